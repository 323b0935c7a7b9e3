"""Ring baselines along a Hamiltonian cycle: unidirectional, and bidirectional (half the chunks
each way). Chunks move store-and-forward, one hop per step."""

from __future__ import annotations

from common.limits import Limit
from synth.algorithm import Algorithm
from synth.baselines.common import BaselineError, hamiltonian_cycle, make_algorithm, schedule_paths
from synth.collectives import Collective
from topologies.model import Topology

__all__ = ["SENDS", "bidir_ring", "ring"]

SENDS = Limit("sends", 20_000_000, "XCCL_MAX_BASELINE_SENDS")
"""Most sends a ring baseline may have (about 2 GB as an Algorithm)."""


class _Cycle:
    """A ring order and each rank's place in it (looked up once per chunk: linear, not n^2)."""

    def __init__(self, order: list[int]) -> None:
        self.order = order
        self.place = {r: i for i, r in enumerate(order)}

    def walk(self, start: int, hops: int, forward: bool) -> list[int]:
        n, pos = len(self.order), self.place[start]
        step = 1 if forward else -1
        return [self.order[(pos + step * k) % n] for k in range(hops + 1)]

    def distance(self, a: int, b: int, forward: bool) -> int:
        n = len(self.order)
        d = (self.place[b] - self.place[a]) % n
        return d if forward else (n - d) % n


def _routes(topology: Topology, collective: Collective, cycle: _Cycle, bidirectional: bool) -> list:
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
            routes.append((cid, cycle.walk(src, n - 1, forward), 0))
        return routes
    if name == "alltoall":
        for cid, chunk in enumerate(collective.chunks):
            (src,) = chunk.pre
            (dst,) = chunk.post
            if src == dst:
                continue
            fwd = cycle.distance(src, dst, True)
            forward = not bidirectional or fwd <= n - fwd
            routes.append((cid, cycle.walk(src, fwd if forward else n - fwd, forward), 0))
        return routes
    if name == "broadcast" and not bidirectional:
        return [(cid, cycle.walk(collective.root, n - 1, True), cid) for cid in range(c)]
    if name == "scatter" and not bidirectional:
        order = sorted(
            (cid for cid, ch in enumerate(collective.chunks) if ch.post != ch.pre),
            key=lambda cid: (-cycle.distance(collective.root, cid // c, True), cid),
        )
        root = collective.root
        return [
            (cid, cycle.walk(root, cycle.distance(root, cid // c, True), True), depart)
            for depart, cid in enumerate(order)
        ]
    kind = "bidir-ring" if bidirectional else "ring"
    raise BaselineError(f"baseline {kind} does not apply to {name}")


def _check_size(collective: Collective, kind: str) -> None:
    """Refuse before building a schedule of more sends than :data:`SENDS` (an alltoall's
    chunks travel n / 2 hops on average: n^3 / 2 sends)."""
    n, c = collective.num_ranks, collective.chunks_per_rank
    hops = {"allgather": n * (n - 1), "alltoall": n * n * (n - 1) // (4 if kind == "bidir-ring" else 2)}
    SENDS.check(c * hops.get(collective.name, n * (n - 1)), f"baseline {kind}: {collective.name} on {n} ranks")


def _build(topology: Topology, collective: Collective, bidirectional: bool) -> Algorithm:
    kind = "bidir-ring" if bidirectional else "ring"
    _check_size(collective, kind)
    cycle = _Cycle(hamiltonian_cycle(topology, kind))
    steps = schedule_paths(_routes(topology, collective, cycle, bidirectional))
    return make_algorithm(kind, topology, collective, steps, ring=" ".join(map(str, cycle.order)))


def ring(topology: Topology, collective: Collective) -> Algorithm:
    """Allgather, alltoall, broadcast (pipelined) and scatter along one ring direction (gather is
    the dual of scatter: :func:`synth.baselines.make_baseline` reaches it by :mod:`synth.reductions`)."""
    return _build(topology, collective, bidirectional=False)


def bidir_ring(topology: Topology, collective: Collective) -> Algorithm:
    """Allgather (even chunks one way, odd the other) and alltoall (each chunk the shorter way)."""
    return _build(topology, collective, bidirectional=True)
