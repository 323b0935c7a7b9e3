"""Latency bounds: the largest hop distance a chunk must travel, and the same in microseconds."""

from __future__ import annotations

import heapq

from synth.bounds.bandwidth import bandwidth_time_us
from synth.collectives import Collective
from synth.errors import InfeasibleError
from topologies.model import Topology

__all__ = ["latency_time_us", "lower_bound_us", "steps_lower_bound"]


def _needs(collective: Collective) -> list[tuple[frozenset[int], int]]:
    """(sources, destination) for every chunk and every rank that must receive it."""
    return [(c.pre, d) for c in collective.chunks for d in sorted(c.post - c.pre)]


def steps_lower_bound(topology: Topology, collective: Collective) -> int:
    """SCCL's steps bound: max over (chunk, destination) of the fewest logical hops from a source."""
    hops = topology.logical().hops
    best = 0
    for pre, dst in _needs(collective):
        dist = [int(hops[src, dst]) for src in pre if hops[src, dst] >= 0]
        if not dist:
            raise InfeasibleError(
                f"{collective.name} cannot be implemented on {topology.name}: rank {dst} is unreachable"
            )
        best = max(best, min(dist))
    return best


def latency_time_us(topology: Topology, collective: Collective) -> float:
    """Max over (chunk, destination) of the smallest sum of link alphas from a source."""
    logical = topology.logical()
    n = topology.num_ranks
    dist_from: dict[int, list[float]] = {}

    def dijkstra(src: int) -> list[float]:
        dist = [float("inf")] * n
        dist[src] = 0.0
        heap = [(0.0, src)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u]:
                continue
            for v in logical.successors(u):
                nd = d + logical.links[(u, v)].alpha_us
                if nd < dist[v]:
                    dist[v] = nd
                    heapq.heappush(heap, (nd, v))
        return dist

    worst = 0.0
    for pre, dst in _needs(collective):
        best = float("inf")
        for src in pre:
            if src not in dist_from:
                dist_from[src] = dijkstra(src)
            best = min(best, dist_from[src][dst])
        worst = max(worst, best)
    if collective.name == "allreduce":
        worst *= 2  # contributions travel in, then the sum travels out (no in-network reduction)
    return worst


def lower_bound_us(topology: Topology, collective: Collective, size_bytes: float) -> float:
    """The larger of the latency bound and the bandwidth bound at ``size_bytes``."""
    return max(latency_time_us(topology, collective), bandwidth_time_us(topology, collective, size_bytes))
