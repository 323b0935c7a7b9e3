"""Topology names as the command line and the API accept them (DESIGN.md, conventions).

A name is a shipped machine (``dgx1``), a multi-machine variant (``ndv2x2``, ``dgx-a100x8``),
a family with its size (``ring:8``, ``torus:4x4``, ``hypercube:3``) or a path to a JSON file.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from topologies.builders import FAMILIES, multi_node
from topologies.errors import TopologyError
from topologies.io import load_topology_file, topology_from_dict
from topologies.model import Topology

__all__ = ["load", "shipped_machines"]

_MULTI = re.compile(r"^(?P<machine>.+?)x(?P<k>\d+)$")


def shipped_machines() -> list[str]:
    """Names of the machine files shipped in ``topologies/machines``."""
    folder = resources.files("topologies") / "machines"
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


@lru_cache(maxsize=64)
def _shipped(name: str) -> Topology:
    import json

    path = resources.files("topologies") / "machines" / f"{name}.json"
    return topology_from_dict(json.loads(path.read_text()), where=f"topologies/machines/{name}.json")


def _family(name: str) -> Topology:
    family, _, size = name.partition(":")
    builder = FAMILIES.get(family.replace("_", "-"))
    if builder is None:
        raise TopologyError(
            f"topology {name!r}: unknown family {family!r}; expected one of {', '.join(FAMILIES)}"
        )
    try:
        dims = [int(x) for x in size.lower().split("x")]
    except ValueError:
        raise TopologyError(f"topology {name!r}: expected a size like {family}:8 (torus:4x4)") from None
    expected = 2 if builder is FAMILIES["torus"] else 1
    if len(dims) != expected:
        shape = "AxB" if expected == 2 else "N"
        raise TopologyError(f"topology {name!r}: expected {family}:{shape}")
    return builder(*dims)


@lru_cache(maxsize=64)
def _load_name(name: str) -> Topology:
    if ":" in name:
        return _family(name)
    machines = shipped_machines()
    if name in machines:
        return _shipped(name)
    match = _MULTI.match(name)
    if match and match["machine"] in machines:
        return multi_node(_shipped(match["machine"]), int(match["k"]), name=name)
    raise TopologyError(
        f"unknown topology {name!r}: expected a shipped machine ({', '.join(machines)}), "
        f"a multi-machine variant like ndv2x2, a family with its size like ring:8 or torus:4x4, "
        f"or a path to a JSON file"
    )


def load(name_or_path: str | Path | Topology) -> Topology:
    """Resolve a topology name or file (see module docstring); a Topology passes through."""
    if isinstance(name_or_path, Topology):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".json") or path.is_file():
        if not path.is_file():
            raise TopologyError(f"{path}: no such topology file")
        return load_topology_file(path)
    return _load_name(text)
