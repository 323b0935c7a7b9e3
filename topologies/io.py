"""The topology JSON format (docs/topology-format.md): a validating reader and a deterministic writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common.fields import Fields, is_integer
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


def topology_from_dict(data: Any, where: str = "<topology>") -> Topology:
    """Validate a parsed topology document and build the :class:`Topology`."""
    f = Fields(where, TopologyError)
    f.keys(data, "", _TOP_KEYS, ("name", "ranks", "links"))
    if "format" in data and data["format"] != FORMAT:
        raise f.fail("format", f'"{FORMAT}"', data["format"])
    name = f.string(data["name"], "name")
    n = f.integer(data["ranks"], "ranks", minimum=1)
    limits.check_ranks(f"{where}: ranks", n)
    node_of = _node_of(f, data["node_of"], n) if "node_of" in data else (0,) * n
    switches = _switches(f, data.get("switches", []))
    links = _links(f, data["links"], n, switches)
    nics = tuple(
        _nic(f, entry, f"nics[{i}]", n) for i, entry in enumerate(f.array(data.get("nics", []), "nics"))
    )
    description = f.string(data.get("description", ""), "description", empty=True)
    source = f.string(data.get("source", ""), "source", empty=True)
    used = {v for edge in links for v in edge if isinstance(v, str)}
    for sname in switches:
        if sname not in used:
            raise f.fail("switches", f"every switch to have links (switch {sname!r} has none)")
    return Topology.build(name, n, links, switches, node_of, nics, description, source, where=where)


def _node_of(f: Fields, value: Any, n: int) -> tuple[int, ...]:
    """The machine of each rank, numbered 0, 1, ... without gaps."""
    raw = f.array(value, "node_of")
    if len(raw) != n:
        raise f.fail("node_of", f"a list of {n} machine indices (one per rank)", raw)
    node_of = tuple(f.integer(m, f"node_of[{i}]", minimum=0) for i, m in enumerate(raw))
    if set(node_of) != set(range(max(node_of) + 1)):
        raise f.fail("node_of", "machine indices numbered 0, 1, ... without gaps", raw)
    return node_of


def _switches(f: Fields, value: Any) -> dict[str, str]:
    """``{name: kind}`` of the declared switches, names unique."""
    switches: dict[str, str] = {}
    for i, sw in enumerate(f.array(value, "switches")):
        fld = f"switches[{i}]"
        f.keys(sw, fld, _SWITCH_KEYS, _SWITCH_KEYS)
        sname = f.string(sw["name"], f"{fld}.name")
        if sname in switches:
            raise f.fail(f"{fld}.name", "a switch name not used before", sname)
        switches[sname] = f.choice(sw["kind"], f"{fld}.kind", SWITCH_KINDS)
    return switches


def _vertex(f: Fields, value: Any, field: str, n: int, switches: dict[str, str]) -> Vertex:
    """A rank number or the name of a declared switch."""
    if is_integer(value):
        if not 0 <= value < n:
            raise f.fail(field, f"a rank in 0..{n - 1}", value)
        return value
    if isinstance(value, str):
        if value not in switches:
            raise f.fail(field, "a rank number or the name of a declared switch", value)
        return value
    raise f.fail(field, f"a rank 0..{n - 1} or a switch name", value)


def _links(f: Fields, value: Any, n: int, switches: dict[str, str]) -> dict[tuple[Vertex, Vertex], Link]:
    """Every directed link (a bidirectional entry gives two), none listed twice."""
    links: dict[tuple[Vertex, Vertex], Link] = {}
    entries = f.array(value, "links")
    limits.check_links(f"{f.where}: links", len(entries))
    for i, entry in enumerate(entries):
        fld = f"links[{i}]"
        f.keys(entry, fld, _LINK_KEYS, ("src", "dst", "bandwidth_GBps", "alpha_us"))
        src = _vertex(f, entry["src"], f"{fld}.src", n, switches)
        dst = _vertex(f, entry["dst"], f"{fld}.dst", n, switches)
        if src == dst:
            raise f.fail(f"{fld}.dst", "a vertex other than src (no self links)", entry["dst"])
        bandwidth, alpha = _rate(f, entry, fld)
        link = Link(bandwidth, alpha, f.check(entry.get("count", 1), f"{fld}.count", limits.count_problem))
        bidirectional = f.boolean(entry.get("bidirectional", True), f"{fld}.bidirectional")
        for edge in [(src, dst), (dst, src)] if bidirectional else [(src, dst)]:
            if edge in links:
                raise f.fail(fld, f"a link not listed before ({edge[0]} -> {edge[1]} is a duplicate)")
            links[edge] = link
    return links


def _rate(f: Fields, entry: dict[str, Any], fld: str) -> tuple[float, float]:
    """``(bandwidth_GBps, alpha_us)`` of a link or a NIC, each within the topology's ranges."""
    bandwidth = f.check(entry["bandwidth_GBps"], f"{fld}.bandwidth_GBps", limits.bandwidth_problem)
    alpha = f.check(entry["alpha_us"], f"{fld}.alpha_us", limits.alpha_problem)
    return float(bandwidth), float(alpha)


def _nic(f: Fields, entry: Any, fld: str, n: int) -> Nic:
    f.keys(entry, fld, _NIC_KEYS, _NIC_KEYS)
    ranks = tuple(
        f.integer(r, f"{fld}.ranks[{j}]", minimum=0)
        for j, r in enumerate(f.array(entry["ranks"], f"{fld}.ranks"))
    )
    if not ranks or any(r >= n for r in ranks):
        raise f.fail(f"{fld}.ranks", f"a non-empty list of ranks in 0..{n - 1}", entry["ranks"])
    name = f.string(entry["name"], f"{fld}.name")
    return Nic(name, ranks, *_rate(f, entry, fld))


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
