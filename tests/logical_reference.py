"""The logical view as it was first written: every simple path through switches enumerated
breadth-first, the first rule-abiding one kept. Exponential on meshes of switches and quadratic
everywhere, it is the oracle that :mod:`topologies.routes` must agree with on small topologies."""

from __future__ import annotations

from collections import deque

from topologies.model import Topology, Vertex


def _rules_ok(topo: Topology, kinds: dict, path: list[Vertex], nxt: Vertex) -> bool:
    if isinstance(nxt, int):
        if len(path) >= 2 and kinds.get(path[-1]) == "nic" and isinstance(path[-2], int):
            return False
        if any(kinds.get(v) == "network" for v in path[1:]):
            return topo.node_of[path[0]] != topo.node_of[nxt]
    return True


def reference_routes(topo: Topology) -> dict[tuple[int, int], tuple[Vertex, ...]]:
    """``{(src, dst): path}`` for every pair with a logical link."""
    kinds = topo.switches
    out: dict[tuple[int, int], tuple[Vertex, ...]] = {}
    for src in topo.ranks:
        routes: dict[int, list[Vertex]] = {}
        for nbr in topo.graph.successors(src):
            if isinstance(nbr, int) and nbr != src:
                routes[nbr] = [src, nbr]
        queue = deque([src, nbr] for nbr in topo.graph.successors(src) if not isinstance(nbr, int))
        while queue:
            path = queue.popleft()
            for nxt in topo.graph.successors(path[-1]):
                if nxt in path or not _rules_ok(topo, kinds, path, nxt):
                    continue
                if isinstance(nxt, int):
                    routes.setdefault(nxt, [*path, nxt])
                else:
                    queue.append([*path, nxt])
        for dst, path in routes.items():
            out[(src, dst)] = tuple(path)
    return out
