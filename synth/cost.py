"""Cost models of an algorithm on a topology.

``sccl_cost``: SCCL's closed form ``S * alpha + (R / C) * L * beta`` (latency and bandwidth parts).
``simulate``: an event simulation at a buffer size. Every send is a store-and-forward transfer of
one chunk over the logical link's physical path; each physical edge is a resource with ``count``
servers, a transfer holds one server of every edge on its path for ``bytes / bandwidth``, and
arrives ``alpha + bytes / bandwidth`` after it starts. A send starts once its chunk is final at the
source (every earlier step's write there has arrived) and its path is free.
Sizes follow nccl-tests: ``size_bytes`` is the buffer nccl-tests reports (allgather: the output).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.units import BYTES_PER_US_PER_GBPS

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from synth.collectives import Collective
    from topologies.model import Topology

__all__ = ["SCCLCost", "SimResult", "algbw_GBps", "chunk_bytes", "sccl_cost", "simulate", "start_times"]


def chunk_bytes(collective: Collective, size_bytes: float) -> float:
    """Bytes in one chunk when nccl-tests' buffer has ``size_bytes``."""
    return size_bytes / collective.size_chunks


def algbw_GBps(size_bytes: float, time_us: float) -> float:
    """nccl-tests' algbw; infinite when nothing takes time (one rank: nothing moves)."""
    return size_bytes / (time_us * BYTES_PER_US_PER_GBPS) if time_us > 0 else float("inf")


@dataclass(frozen=True)
class SCCLCost:
    latency_us: float
    bandwidth_us: float


def sccl_cost(algo: Algorithm, topology: Topology, size_bytes: float) -> SCCLCost:
    """``S * alpha`` with the slowest logical link's alpha, plus ``R`` rounds of one chunk at the
    capacity unit of :meth:`Topology.chunk_capacity` (``R / C * L * beta``)."""
    alpha = max((link.alpha_us for link in topology.logical().links.values()), default=0.0)
    unit = topology.chunk_capacity().unit_GBps
    per_round = chunk_bytes(algo.collective, size_bytes) / (unit * BYTES_PER_US_PER_GBPS)
    return SCCLCost(algo.num_steps * alpha, algo.rounds * per_round)


@dataclass(frozen=True)
class SimResult:
    size_bytes: float
    time_us: float
    algbw_GBps: float
    busbw_GBps: float


def simulate(algo: Algorithm, topology: Topology, size_bytes: float) -> SimResult:
    """Time ``algo`` on ``topology`` at ``size_bytes`` (see module docstring).

    List scheduling: a send becomes available when every earlier-step write to the slot it reads
    has arrived; among available sends the one that can start earliest goes first (there is no
    barrier between steps, as in the runtime, where only data dependencies order transfers).
    """
    finish = _list_schedule(algo, topology, size_bytes)[1]
    algbw = algbw_GBps(size_bytes, finish)
    return SimResult(size_bytes, finish, algbw, algbw * algo.collective.busbw_factor)


def start_times(algo: Algorithm, topology: Topology, size_bytes: float) -> tuple[float, ...]:
    """When each send starts in :func:`simulate`'s schedule at ``size_bytes`` (sends in step order),
    so a compiler can follow the schedule the model times."""
    return _list_schedule(algo, topology, size_bytes)[0]


def _list_schedule(algo: Algorithm, topology: Topology, size_bytes: float) -> tuple[tuple[float, ...], float]:
    """(start of each send in step order, finish) of :func:`simulate`'s list schedule."""
    logical = topology.logical()
    nbytes = chunk_bytes(algo.collective, size_bytes)
    sends = [(k, send) for k, step in enumerate(algo.steps) for send in step.sends]
    writes: dict[tuple[int, int], list[int]] = {}
    for i, (_, send) in enumerate(sends):
        writes.setdefault((send.dst, send.chunk), []).append(i)
    waiting = [0] * len(sends)
    dependents: list[list[int]] = [[] for _ in sends]
    for i, (k, send) in enumerate(sends):
        for j in writes.get((send.src, send.chunk), ()):
            if sends[j][0] < k:
                waiting[i] += 1
                dependents[j].append(i)
    servers = {edge: [0.0] * res.count for edge, res in logical.resources.items()}
    # Per logical link, once: (its edge's servers, microseconds held) along the path, and the
    # time from start to arrival.
    routes = {
        pair: (
            tuple(
                (servers[edge], nbytes / (logical.resources[edge].bandwidth_GBps * BYTES_PER_US_PER_GBPS))
                for edge in link.edges
            ),
            link.alpha_us + nbytes / (link.bandwidth_GBps * BYTES_PER_US_PER_GBPS),
        )
        for pair, link in logical.links.items()
    }
    route = [routes[(send.src, send.dst)] for _, send in sends]
    ready = [0.0] * len(sends)
    started = [0.0] * len(sends)

    def earliest(i: int) -> float:
        start = ready[i]
        for free, _ in route[i][0]:
            first = free[0] if len(free) == 1 else min(free)
            if first > start:
                start = first
        return start

    # Lazy list scheduling: a heap key is a lower bound of the send's start (servers only get
    # busier); a popped send whose bound is stale goes back with its true start.
    heap = [(0.0, i) for i in range(len(sends)) if waiting[i] == 0]
    heapq.heapify(heap)
    finish = 0.0
    while heap:
        key, i = heap[0]
        start = earliest(i)
        if start > key + 1e-9:
            heapq.heapreplace(heap, (start, i))
            continue
        heapq.heappop(heap)
        started[i] = start
        path, latency = route[i]
        for free, hold in path:
            k = min(range(len(free)), key=free.__getitem__) if len(free) > 1 else 0
            free[k] = start + hold
        arrive = start + latency
        if arrive > finish:
            finish = arrive
        for d in dependents[i]:
            if arrive > ready[d]:
                ready[d] = arrive
            waiting[d] -= 1
            if waiting[d] == 0:
                heapq.heappush(heap, (earliest(d), d))
    return tuple(started), finish
