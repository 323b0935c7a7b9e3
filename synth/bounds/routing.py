"""The multi-commodity flow LP's rate without the LP, where a shortest-path routing meets a bound.

The exact bound for unicast data (alltoall) is a multi-commodity flow LP (:mod:`synth.bounds.flow`),
one commodity per source: on a torus or hypercube HiGHS needs minutes for it (an 8 x 8 torus 56 s,
hypercube:6 186 s, hypercube:7 over 5 minutes) though the network has a few hundred arcs. Its
rate ``x*`` lies between two numbers that take one breadth-first search per source:

- below, the rate of a feasible flow: every destination's share split evenly over its shortest
  paths (in arcs of the LP's network, NICs split as there), the arcs' loads summed (Brandes'
  accumulation), and ``x`` the least capacity / load over the loaded arcs;
- above, the volume bound (a unit from ``s`` to ``t`` uses at least ``dist(s, t)`` arcs'
  capacity: ``x <= sum of capacities / sum of demand x distance``) and the cuts of
  :mod:`synth.bounds.cuts`.

Where the two meet (rings, square tori, hypercubes, the DGX clusters' NIC cut: the topologies
whose symmetry spreads shortest paths evenly) the LP's rate is that number, with no LP solved;
elsewhere the LP runs as before.
"""

from __future__ import annotations

from collections.abc import Hashable

from synth.bounds.flow import Arc

__all__ = ["MEET_TOLERANCE", "routed_rates"]

MEET_TOLERANCE = 1e-12
"""Relative gap under which the routing's rate and the upper bound are taken to meet (floating-point
sums of the loads; the LP's own answer carries rounding of the same size)."""


def _graph(arcs: list[Arc]) -> tuple[dict[Hashable, int], list[list[tuple[int, int]]]]:
    """Node ids, and each node's incoming ``(arc index, tail id)`` pairs."""
    ids: dict[Hashable, int] = {}
    for u, v, _ in arcs:
        ids.setdefault(u, len(ids))
        ids.setdefault(v, len(ids))
    into: list[list[tuple[int, int]]] = [[] for _ in ids]
    for i, (u, v, _) in enumerate(arcs):
        into[ids[v]].append((i, ids[u]))
    return ids, into


def _out_lists(into: list[list[tuple[int, int]]]) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in into]
    for v, pairs in enumerate(into):
        for _, u in pairs:
            out[u].append(v)
    return out


def _route_one(
    source: int, demand: dict[int, float], into: list[list[tuple[int, int]]], out: list[list[int]], load: list[float]
) -> float | None:
    """Add one commodity's evenly split shortest-path flow to ``load``; return its demand x distance
    (None where a destination is unreachable)."""
    dist, sigma, order = {source: 0}, {source: 1.0}, [source]
    for u in order:  # breadth-first: order grows while read
        for v in out[u]:
            if v not in dist:
                dist[v], sigma[v] = dist[u] + 1, 0.0
                order.append(v)
            if dist[v] == dist[u] + 1:
                sigma[v] += sigma[u]
    if any(t not in dist for t in demand):
        return None
    through = dict.fromkeys(order, 0.0)
    for t, amount in demand.items():
        through[t] += amount
    for v in reversed(order):
        if v == source or not through[v]:
            continue
        for arc, u in into[v]:
            if dist.get(u) == dist[v] - 1:
                share = through[v] * sigma[u] / sigma[v]
                load[arc] += share
                through[u] += share
    return sum(amount * dist[t] for t, amount in demand.items())


def routed_rates(arcs: list[Arc], commodities: list[dict[Hashable, float]]) -> tuple[float, float] | None:
    """``(rate of the shortest-path routing, volume bound)``: the LP's rate lies between them.
    None where a commodity has several sources or a destination is unreachable."""
    ids, into = _graph(arcs)
    out = _out_lists(into)
    load = [0.0] * len(arcs)
    volume = 0.0
    for supply in commodities:
        sources = [v for v, amount in supply.items() if amount > 0]
        if len(sources) != 1 or any(v not in ids for v in supply):
            return None
        demand = {ids[v]: -amount for v, amount in supply.items() if amount < 0}
        used = _route_one(ids[sources[0]], demand, into, out, load)
        if used is None:
            return None
        volume += used
    loaded = [(arc[2], w) for arc, w in zip(arcs, load, strict=True) if w > 0]
    if not loaded or volume <= 0:
        return None
    lower = min(cap / w for cap, w in loaded)
    upper = sum(arc[2] for arc in arcs) / volume
    return lower, upper
