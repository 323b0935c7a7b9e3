"""The topology JSON format (docs/topology-format.md): a validating reader and a deterministic writer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.files import read_json_file
from topologies import limits
from topologies.errors import TopologyError
from topologies.model import SWITCH_KINDS, Link, Nic, Topology, Vertex

__all__ = [
    "FORMAT",
    "dump_topology",
    "load_topology_file",
    "topology_from_dict",
    "topology_to_dict",
]

FORMAT = "xccl-topology/1"
_TOP_KEYS = ("format", "name", "description", "source", "ranks", "node_of", "switches", "links", "nics")
_SWITCH_KEYS = ("name", "kind")
_LINK_KEYS = ("src", "dst", "bandwidth_GBps", "alpha_us", "count", "bidirectional")
_NIC_KEYS = ("name", "ranks", "bandwidth_GBps", "alpha_us")


class _Fields:
    """Typed field access that reports ``where.field: expected ...`` on bad input."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, field: str, expected: str, got: Any = ...) -> TopologyError:
        tail = "" if got is ... else f", got {json.dumps(got) if _jsonable(got) else repr(got)}"
        return TopologyError(f"{self.where}: {field}: expected {expected}{tail}")

    def keys(self, obj: Any, field: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict:
        if not isinstance(obj, dict):
            raise self.fail(field or "(top level)", "an object", obj)
        for key in obj:
            if key not in allowed:
                name = f"{field}.{key}" if field else key
                raise self.fail(name, f"one of the known keys ({', '.join(allowed)})", key)
        for key in required:
            if key not in obj:
                raise self.fail(f"{field}.{key}" if field else key, "a value (required)")
        return obj

    def integer(self, value: Any, field: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, "an integer", value)
        if minimum is not None and value < minimum:
            raise self.fail(field, f"an integer >= {minimum}", value)
        return value

    def value(self, value: Any, field: str, problem: Callable[[Any], str | None]) -> Any:
        """``value`` if ``problem`` (one of :mod:`topologies.limits`) finds none, else the error."""
        expected = problem(value)
        if expected:
            raise self.fail(field, expected, value)
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(field, "a non-empty string", value)
        return value

    def array(self, value: Any, field: str) -> list:
        if not isinstance(value, list):
            raise self.fail(field, "a list", value)
        return value


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def topology_from_dict(data: Any, where: str = "<topology>") -> Topology:
    """Validate a parsed topology document and build the :class:`Topology`."""
    f = _Fields(where)
    f.keys(data, "", _TOP_KEYS, ("name", "ranks", "links"))
    if "format" in data and data["format"] != FORMAT:
        raise f.fail("format", f'"{FORMAT}"', data["format"])
    name = f.string(data["name"], "name")
    n = f.integer(data["ranks"], "ranks", minimum=1)
    limits.check_ranks(f"{where}: ranks", n)

    if "node_of" in data:
        raw = f.array(data["node_of"], "node_of")
        if len(raw) != n:
            raise f.fail("node_of", f"a list of {n} machine indices (one per rank)", raw)
        node_of = tuple(f.integer(m, f"node_of[{i}]", minimum=0) for i, m in enumerate(raw))
        if set(node_of) != set(range(max(node_of) + 1)):
            raise f.fail("node_of", "machine indices numbered 0, 1, ... without gaps", raw)
    else:
        node_of = (0,) * n

    switches: dict[str, str] = {}
    for i, sw in enumerate(f.array(data.get("switches", []), "switches")):
        fld = f"switches[{i}]"
        f.keys(sw, fld, _SWITCH_KEYS, _SWITCH_KEYS)
        sname = f.string(sw["name"], f"{fld}.name")
        if sname in switches:
            raise f.fail(f"{fld}.name", "a switch name not used before", sname)
        if sw["kind"] not in SWITCH_KINDS:
            raise f.fail(f"{fld}.kind", f"one of {', '.join(SWITCH_KINDS)}", sw["kind"])
        switches[sname] = sw["kind"]

    def vertex(value: Any, field: str) -> Vertex:
        if isinstance(value, bool):
            raise f.fail(field, f"a rank 0..{n - 1} or a switch name", value)
        if isinstance(value, int):
            if not 0 <= value < n:
                raise f.fail(field, f"a rank in 0..{n - 1}", value)
            return value
        if isinstance(value, str):
            if value not in switches:
                raise f.fail(field, "a rank number or the name of a declared switch", value)
            return value
        raise f.fail(field, f"a rank 0..{n - 1} or a switch name", value)

    links: dict[tuple[Vertex, Vertex], Link] = {}
    entries = f.array(data["links"], "links")
    limits.check_links(f"{where}: links", len(entries))
    for i, entry in enumerate(entries):
        fld = f"links[{i}]"
        f.keys(entry, fld, _LINK_KEYS, ("src", "dst", "bandwidth_GBps", "alpha_us"))
        src = vertex(entry["src"], f"{fld}.src")
        dst = vertex(entry["dst"], f"{fld}.dst")
        if src == dst:
            raise f.fail(f"{fld}.dst", "a vertex other than src (no self links)", entry["dst"])
        link = Link(
            bandwidth_GBps=float(
                f.value(entry["bandwidth_GBps"], f"{fld}.bandwidth_GBps", limits.bandwidth_problem)
            ),
            alpha_us=float(f.value(entry["alpha_us"], f"{fld}.alpha_us", limits.alpha_problem)),
            count=f.value(entry.get("count", 1), f"{fld}.count", limits.count_problem),
        )
        bidirectional = entry.get("bidirectional", True)
        if not isinstance(bidirectional, bool):
            raise f.fail(f"{fld}.bidirectional", "true or false", bidirectional)
        for edge in [(src, dst), (dst, src)] if bidirectional else [(src, dst)]:
            if edge in links:
                raise f.fail(fld, f"a link not listed before ({edge[0]} -> {edge[1]} is a duplicate)")
            links[edge] = link

    nics: list[Nic] = []
    for i, entry in enumerate(f.array(data.get("nics", []), "nics")):
        fld = f"nics[{i}]"
        f.keys(entry, fld, _NIC_KEYS, _NIC_KEYS)
        ranks = tuple(
            f.integer(r, f"{fld}.ranks[{j}]", minimum=0)
            for j, r in enumerate(f.array(entry["ranks"], f"{fld}.ranks"))
        )
        if not ranks or any(r >= n for r in ranks):
            raise f.fail(f"{fld}.ranks", f"a non-empty list of ranks in 0..{n - 1}", entry["ranks"])
        nics.append(
            Nic(
                name=f.string(entry["name"], f"{fld}.name"),
                ranks=ranks,
                bandwidth_GBps=float(
                    f.value(entry["bandwidth_GBps"], f"{fld}.bandwidth_GBps", limits.bandwidth_problem)
                ),
                alpha_us=float(f.value(entry["alpha_us"], f"{fld}.alpha_us", limits.alpha_problem)),
            )
        )
    description = data.get("description", "")
    source = data.get("source", "")
    for key, value in (("description", description), ("source", source)):
        if not isinstance(value, str):
            raise f.fail(key, "a string", value)
    used = {v for edge in links for v in edge if isinstance(v, str)}
    for sname in switches:
        if sname not in used:
            raise f.fail("switches", f"every switch to have links (switch {sname!r} has none)")
    return Topology.build(name, n, links, switches, node_of, tuple(nics), description, source, where=where)


def load_topology_file(path: str | Path) -> Topology:
    return topology_from_dict(read_json_file(path, TopologyError), where=str(path))


def topology_to_dict(topo: Topology) -> dict[str, Any]:
    """The JSON document for ``topo``; equal links in both directions are written once."""
    links = []
    written: set[tuple[Vertex, Vertex]] = set()
    for src, dst, link in topo.links():
        if (src, dst) in written:
            continue
        entry: dict[str, Any] = {
            "src": src,
            "dst": dst,
            "bandwidth_GBps": link.bandwidth_GBps,
            "alpha_us": link.alpha_us,
        }
        if link.count != 1:
            entry["count"] = link.count
        if topo.link(dst, src) == link:
            written.add((dst, src))
        else:
            entry["bidirectional"] = False
        written.add((src, dst))
        links.append(entry)
    doc: dict[str, Any] = {"format": FORMAT, "name": topo.name}
    if topo.description:
        doc["description"] = topo.description
    if topo.source:
        doc["source"] = topo.source
    doc["ranks"] = topo.num_ranks
    if any(topo.node_of):
        doc["node_of"] = list(topo.node_of)
    if topo.switches:
        doc["switches"] = [{"name": s, "kind": k} for s, k in topo.switches.items()]
    doc["links"] = links
    if topo.nics:
        doc["nics"] = [
            {
                "name": nic.name,
                "ranks": list(nic.ranks),
                "bandwidth_GBps": nic.bandwidth_GBps,
                "alpha_us": nic.alpha_us,
            }
            for nic in topo.nics
        ]
    return doc


def dump_topology(topo: Topology) -> str:
    """Deterministic text: one link per line."""
    doc = topology_to_dict(topo)
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"  {json.dumps(key)}: [")
            for j, item in enumerate(value):
                lines.append(f"    {json.dumps(item)}{',' if j < len(value) - 1 else ''}")
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"
