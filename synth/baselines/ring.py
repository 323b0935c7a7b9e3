"""Ring baselines along a Hamiltonian cycle: unidirectional, and bidirectional (half the chunks
each way). Chunks move store-and-forward, one hop per step."""

from __future__ import annotations

from synth.algorithm import Algorithm
from synth.baselines.common import BaselineError, hamiltonian_cycle, make_algorithm, schedule_paths
from synth.collectives import Collective
from topologies.model import Topology

__all__ = ["bidir_ring", "ring"]


def _walk(cycle: list[int], start: int, hops: int, forward: bool) -> list[int]:
    n = len(cycle)
    pos = cycle.index(start)
    step = 1 if forward else -1
    return [cycle[(pos + step * k) % n] for k in range(hops + 1)]


def _distance(cycle: list[int], a: int, b: int, forward: bool) -> int:
    n = len(cycle)
    d = (cycle.index(b) - cycle.index(a)) % n
    return d if forward else (n - d) % n


def _routes(topology: Topology, collective: Collective, cycle: list[int], bidirectional: bool) -> list:
    n, c = collective.num_ranks, collective.chunks_per_rank
    name = collective.name
    routes = []
    if name == "allgather":
        for cid, chunk in enumerate(collective.chunks):
            (src,) = chunk.pre
            if bidirectional and c == 1:
                raise BaselineError(
                    "baseline bidir-ring: allgather needs at least 2 chunks per rank (--chunks 2)"
                )
            forward = not bidirectional or (cid % c) % 2 == 0
            routes.append((cid, _walk(cycle, src, n - 1, forward), 0))
        return routes
    if name == "alltoall":
        for cid, chunk in enumerate(collective.chunks):
            (src,) = chunk.pre
            (dst,) = chunk.post
            if src == dst:
                continue
            fwd = _distance(cycle, src, dst, True)
            forward = not bidirectional or fwd <= n - fwd
            routes.append((cid, _walk(cycle, src, fwd if forward else n - fwd, forward), 0))
        return routes
    if name == "broadcast" and not bidirectional:
        return [(cid, _walk(cycle, collective.root, n - 1, True), cid) for cid in range(c)]
    if name == "scatter" and not bidirectional:
        order = sorted(
            (cid for cid, ch in enumerate(collective.chunks) if ch.post != ch.pre),
            key=lambda cid: (-_distance(cycle, collective.root, cid // c, True), cid),
        )
        root = collective.root
        return [
            (cid, _walk(cycle, root, _distance(cycle, root, cid // c, True), True), depart)
            for depart, cid in enumerate(order)
        ]
    kind = "bidir-ring" if bidirectional else "ring"
    raise BaselineError(f"baseline {kind} does not apply to {name}")


def _build(topology: Topology, collective: Collective, bidirectional: bool) -> Algorithm:
    kind = "bidir-ring" if bidirectional else "ring"
    cycle = hamiltonian_cycle(topology, kind)
    steps = schedule_paths(_routes(topology, collective, cycle, bidirectional))
    return make_algorithm(kind, topology, collective, steps, ring=" ".join(map(str, cycle)))


def ring(topology: Topology, collective: Collective) -> Algorithm:
    """Allgather, alltoall, broadcast (pipelined) and scatter along one ring direction (gather is
    the dual of scatter: :func:`synth.baselines.make_baseline` reaches it by :mod:`synth.reductions`)."""
    return _build(topology, collective, bidirectional=False)


def bidir_ring(topology: Topology, collective: Collective) -> Algorithm:
    """Allgather (even chunks one way, odd the other) and alltoall (each chunk the shorter way)."""
    return _build(topology, collective, bidirectional=True)
