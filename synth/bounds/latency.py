"""Latency bounds: the largest hop distance a chunk must travel, and the same in microseconds.

Both are a maximum over (source, destination) pairs, read from the collective's name: every pair
(allgather, allreduce, alltoall, reducescatter), the root to every rank (broadcast, scatter), every
rank to the root (gather, reduce); other collectives list theirs in their chunks. For the every-pair
collectives on more than :data:`EXACT_RANKS` ranks the sources searched from are one rank per
class of alike ranks (:func:`topologies.classes.rank_classes`): a maximum over fewer sources is
still a lower bound, and the same where the classes are the topology's orbits.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from synth.bounds.bandwidth import bandwidth_time_us
from synth.bounds.cuts import representatives
from synth.collectives import Collective
from synth.errors import InfeasibleError
from topologies.model import Topology

__all__ = ["EXACT_RANKS", "latency_time_us", "lower_bound_us", "searched_sources", "steps_lower_bound"]

EXACT_RANKS = 128
"""Up to this many ranks the every-pair bounds search from every rank."""

_EVERY_PAIR = frozenset({"allgather", "allreduce", "alltoall", "reducescatter"})
_FROM_ROOT = frozenset({"broadcast", "scatter"})
_TO_ROOT = frozenset({"gather", "reduce"})

Distances = Callable[[int, bool], list]
"""``(rank, backwards) -> distance of every rank from it (to it, backwards)``."""


def searched_sources(topology: Topology, collective: Collective) -> tuple[tuple[int, ...], bool] | None:
    """The ranks the bounds search from and whether backwards (to the root), or None where the
    collective's chunks list its pairs."""
    if collective.name in _FROM_ROOT:
        return (collective.root,), False
    if collective.name in _TO_ROOT:
        return (collective.root,), True
    if collective.name in _EVERY_PAIR:
        n = topology.num_ranks
        return (tuple(range(n)) if n <= EXACT_RANKS else tuple(representatives(topology))), False
    return None


def _worst(topology: Topology, collective: Collective, distances: Distances, unreachable) -> float:
    """Max over the collective's pairs of the distance from the source to the destination."""
    searched = searched_sources(topology, collective)
    if searched is None:
        pairs = [(c.pre, d) for c in collective.chunks for d in sorted(c.post - c.pre)]
        cache: dict[int, list] = {}
        worst = 0
        for pre, dst in pairs:
            dist = [cache.setdefault(s, distances(s, False))[dst] for s in pre]
            dist = [d for d in dist if not unreachable(d)]
            if not dist:
                raise _unreachable(topology, collective, dst)
            worst = max(worst, min(dist))
        return worst
    sources, backwards = searched
    worst = 0
    for src in sources:
        dist = distances(src, backwards)
        for r, d in enumerate(dist):
            if unreachable(d):
                raise _unreachable(topology, collective, src if backwards else r)
        worst = max(worst, max(dist, default=0))
    return worst


def _unreachable(topology: Topology, collective: Collective, rank: int) -> InfeasibleError:
    return InfeasibleError(
        f"{collective.name} cannot be implemented on {topology.name}: rank {rank} is unreachable"
    )


def steps_lower_bound(topology: Topology, collective: Collective) -> int:
    """SCCL's steps bound: max over (chunk, destination) of the fewest logical hops from a source."""
    logical = topology.logical()

    def hops(rank: int, backwards: bool) -> list[int]:
        if backwards:
            return logical.graph.hop_distances(rank, logical.predecessors)
        return logical.hops_from(rank)

    return int(_worst(topology, collective, hops, lambda d: d < 0))


def latency_time_us(topology: Topology, collective: Collective) -> float:
    """Max over (chunk, destination) of the smallest sum of link alphas from a source."""
    logical = topology.logical()
    n = topology.num_ranks

    def _alphas(u: int, backwards: bool) -> Iterable[tuple[int, float]]:
        if backwards:
            return ((v, logical.link(v, u).alpha_us) for v in logical.predecessors(u))
        return logical.alphas_from(u)  # no LogicalLink kept per pair (2.2 M on hypercube:17)

    least = min((link.alpha_us for link in topology.arrays.values), default=0.0)

    def dijkstra(src: int, backwards: bool) -> list[float]:
        return _dijkstra(n, src, lambda u: _alphas(u, backwards), least)

    worst = float(_worst(topology, collective, dijkstra, lambda d: d == float("inf")))
    if collective.name == "allreduce":
        worst *= 2  # contributions travel in, then the sum travels out (no in-network reduction)
    return worst


def _dijkstra(n: int, src: int, alphas: Callable[[int], Iterable[tuple[int, float]]], least: float) -> list[float]:
    """Least summed alpha from ``src`` to every rank over chains of logical links (``alphas(u)``:
    each link out of ``u`` with its alpha; ``least``: no link's alpha is lower).

    It stops once every rank is reached and no rank left to expand can shorten a distance (its
    own plus ``least`` is at least the largest distance ever set): the distances are then final.
    On a cluster every rank is one route from the source, so a few ranks are expanded instead of
    all 4,096 with 4,095 routes each (16.8 M routes: 6 minutes and 6 GB on dgx-h100x512)."""
    inf = float("inf")
    dist = [inf] * n
    dist[src] = 0.0
    heap = [(0.0, src)]
    unreached, top = n - 1, 0.0
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        if not unreached and d + least >= top:
            break
        for v, alpha in alphas(u):
            nd = d + alpha
            if nd < dist[v]:
                unreached -= dist[v] == inf
                dist[v] = nd
                top = max(top, nd)
                heapq.heappush(heap, (nd, v))
    return dist


def lower_bound_us(topology: Topology, collective: Collective, size_bytes: float) -> float:
    """The larger of the latency bound and the bandwidth bound at ``size_bytes``."""
    return max(latency_time_us(topology, collective), bandwidth_time_us(topology, collective, size_bytes))
