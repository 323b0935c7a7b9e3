"""Topology names as the command line and the API accept them (DESIGN.md, conventions).

A name is a shipped machine (``dgx1``), a multi-machine variant (``ndv2x2``, ``dgx-a100x8``),
a family with its size (``ring:8``, ``torus:4x4``, ``hypercube:3``) or a path to a JSON file.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from common.errors import quoted
from common.files import named_file, read_shipped, shipped_names
from topologies.builders import FAMILIES, multi_node
from topologies.errors import TopologyError
from topologies.io import load_topology_file, topology_from_dict
from topologies.limits import RANKS_ENV, max_ranks
from topologies.model import Topology

__all__ = ["load", "shipped_machines"]

_MULTI = re.compile(r"^(?P<machine>.+?)x(?P<k>[0-9]+)$")
_SIZE = {1: re.compile(r"[0-9]+"), 2: re.compile(r"[0-9]+x[0-9]+")}


def shipped_machines() -> list[str]:
    """Names of the machine files shipped in ``topologies/machines``."""
    return shipped_names("topologies", "machines")


@lru_cache(maxsize=64)
def _shipped(name: str) -> Topology:
    return topology_from_dict(*read_shipped("topologies", "machines", name, TopologyError))


def _sizes(name: str, digits: list[str]) -> list[int]:
    """The integers of a name's size, refusing at once those too long to be within the limits
    (Python would not even convert a number of more than 4,300 digits)."""
    limit = max_ranks()
    longest = max(len(d.lstrip("0")) for d in digits)
    if longest > len(str(limit)):
        raise TopologyError(
            f"topology {quoted(name)}: a size of {longest} digits, more than the limit of {limit} ranks "
            f"(set {RANKS_ENV} to raise it)"
        )
    return [int(d) for d in digits]


def _family(name: str) -> Topology:
    family, _, size = name.partition(":")
    builder = FAMILIES.get(family.replace("_", "-"))
    if builder is None:
        raise TopologyError(
            f"topology {quoted(name)}: unknown family {family!r}; expected one of {', '.join(FAMILIES)}"
        )
    dims = 2 if builder is FAMILIES["torus"] else 1
    size = size.lower()
    if not _SIZE[dims].fullmatch(size):
        shape = (
            f"{family}:AxB, A and B whole numbers (torus:4x4)"
            if dims == 2
            else f"{family}:N, N a whole number ({family}:8)"
        )
        raise TopologyError(f"topology {quoted(name)}: expected {shape}")
    return builder(*_sizes(name, size.split("x")))


@lru_cache(maxsize=64)
def _load_name(name: str) -> Topology:
    if ":" in name:
        return _family(name)
    machines = shipped_machines()
    if name in machines:
        return _shipped(name)
    match = _MULTI.match(name)
    if match and match["machine"] in machines:
        (k,) = _sizes(name, [match["k"]])
        return multi_node(_shipped(match["machine"]), k, name=name)
    raise TopologyError(
        f"unknown topology {quoted(name)}: expected a shipped machine ({', '.join(machines)}), "
        f"a multi-machine variant like ndv2x2, a family with its size like ring:8 or torus:4x4, "
        f"or a path to a JSON file"
    )


def load(name_or_path: str | Path | Topology) -> Topology:
    """Resolve a topology name or file (see module docstring); a Topology passes through."""
    if isinstance(name_or_path, Topology):
        return name_or_path
    path = named_file(name_or_path, "topology", TopologyError)
    return _load_name(str(name_or_path)) if path is None else load_topology_file(path)
