"""Stage 2: greedy list scheduling of the routed pieces on every link and switch port.

Each tree arc is a send. A send is ready when its piece has arrived at its source; it then needs
one server of every physical edge of its logical path (a NIC, a switch port, an NVLink). Among
sends that can start at the same moment, the one with the longest remaining path (its own delay
plus the longest chain of sends below it in its tree) goes first, as in TACCL's heuristic. The
times are the timing engine's (:mod:`synth.timing`) with this priority, so an algorithm whose sends
are listed in this schedule's order replays in :func:`synth.cost.simulate` with the same times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.deadline import NO_DEADLINE, Deadline
from synth.timing import IDEAL, Network, Params, Transfer
from synth.timing.engine import Jobs, arcs_by_source, run_jobs
from topologies.model import Topology

__all__ = ["PRIORITIES", "Schedule", "TimedSend", "list_schedule", "offsets"]

Pair = tuple[int, int]

PRIORITIES = ("critical", "depth", "piece")
"""Rules ordering sends that could start at the same moment (smaller key first):

- ``critical``: longest remaining path first (TACCL's heuristic), then the link's offset;
- ``depth``: sends nearer their tree's root first, then earlier pieces, then the longest path;
- ``piece``: earlier pieces of every chunk first (keeps pipelines in order), then the longest path.

Ties are broken by the link's *offset* ((dst - src) in each level of the sketch's rotation groups),
which is the same for every image of a send under the sketch's symmetry: ranks that face the same
choice make the same one, so the transfers that start together form permutations (every switch
port busy) rather than collisions.
"""


def offsets(levels: tuple[int, ...], a: int, b: int) -> tuple[int, ...]:
    """``b - a`` inside each nested rotation group (``levels`` = group sizes, ascending)."""
    out = []
    below = 1
    for size in levels:
        out.append(((b % size) // below - (a % size) // below) % max(1, size // below))
        below = size
    return tuple(out)


@dataclass(frozen=True)
class TimedSend:
    """One tree arc as scheduled: ``chunk`` goes ``src -> dst`` at ``start_us``; ``parent`` is the
    index of the send that brings the piece to ``src`` (-1 at the piece's source), ``rank`` the
    priority key that ordered it (smaller first)."""

    chunk: int
    src: int
    dst: int
    parent: int
    start_us: float
    rank: tuple


@dataclass(frozen=True)
class Schedule:
    """Sends in start order, and on every server of every resource (physical edge, or connection
    where sends cost time) the sends it carried."""

    sends: tuple[TimedSend, ...]
    servers: dict[tuple, tuple[int, ...]]
    """``(edge, server index)`` -> indices of the sends it carried, in order."""
    makespan_us: float


def _sends(trees: dict[int, tuple[Pair, ...]]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """(chunk, src, dst) per arc and the index of each arc's parent arc (-1 at the root)."""
    arcs: list[tuple[int, int, int]] = []
    parents: list[int] = []
    for chunk in sorted(trees):
        holder: dict[int, int] = {}
        for u, v in trees[chunk]:
            parents.append(holder.get(u, -1))
            holder[v] = len(arcs)
            arcs.append((chunk, u, v))
    return arcs, parents


def list_schedule(
    topology: Topology,
    trees: dict[int, tuple[Pair, ...]],
    piece_bytes: float,
    sources: dict[int, int],
    piece_index: dict[int, int],
    levels: tuple[int, ...],
    priority: str = "critical",
    deadline: Deadline = NO_DEADLINE,
    params: Params = IDEAL,
) -> Schedule:
    """Schedule every tree arc (module docstring): ``sources[chunk]`` and ``piece_index[chunk]`` say
    where each piece starts and which of its chunk's pieces it is; ``levels`` are the rotation group
    sizes the offsets are taken in (see :data:`PRIORITIES`). Past the ``deadline`` it raises
    :class:`synth.deadline.OutOfTime`. Times are under ``params``."""
    if priority not in PRIORITIES:
        raise ValueError(f"unknown ordering rule {priority!r}: expected one of {', '.join(PRIORITIES)}")
    network = Network(topology, params)
    arcs, parents = _sends(trees)
    transfers = [network.transfer(u, v, piece_bytes) for _, u, v in arcs]
    ranks = _ranks(arcs, parents, [t.delay_us for t in transfers], sources, piece_index, levels, priority)
    start, arrive, used = _run(network, transfers, parents, ranks, deadline)
    order = sorted(range(len(arcs)), key=lambda i: (start[i], ranks[i]))
    new_index = {old: new for new, old in enumerate(order)}
    sends = tuple(
        TimedSend(*arcs[i], new_index[parents[i]] if parents[i] >= 0 else -1, start[i], ranks[i])
        for i in order
    )
    servers = {key: tuple(new_index[i] for i in seq) for key, seq in used.items()}
    return Schedule(sends, servers, max(arrive, default=0.0))


def _ranks(
    arcs: list[tuple[int, int, int]],
    parents: list[int],
    delay: list[float],
    sources: dict[int, int],
    piece_index: dict[int, int],
    levels: tuple[int, ...],
    priority: str,
) -> list[tuple]:
    """Every arc's priority key under the rule ``priority`` (:data:`PRIORITIES`)."""
    count = len(arcs)
    children: list[list[int]] = [[] for _ in range(count)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    remaining = list(delay)
    for i in range(count - 1, -1, -1):
        if children[i]:
            remaining[i] = delay[i] + max(remaining[c] for c in children[i])
    depth = [0] * count
    for i, p in enumerate(parents):
        if p >= 0:
            depth[i] = depth[p] + 1

    def key(i: int) -> tuple:
        chunk, u, v = arcs[i]
        tie = (offsets(levels, u, v), offsets(levels, sources[chunk], u), piece_index[chunk], chunk, u, v)
        if priority == "depth":
            return (depth[i], piece_index[chunk], -remaining[i], *tie)
        if priority == "piece":
            return (piece_index[chunk], -remaining[i], *tie)
        return (-remaining[i], *tie)

    return [key(i) for i in range(count)]


def _run(
    network: Network, transfers: list[Transfer], parents: list[int], ranks: list[tuple], deadline: Deadline
) -> tuple[list[float], list[float], dict[tuple, list[int]]]:
    """The engine fed every arc, ready when its parent has arrived, with its place in ``ranks``
    order as its priority: (starts, arrivals, the arcs each server carried in order)."""
    count = len(transfers)
    prio = np.empty(count, np.int64)
    prio[sorted(range(count), key=ranks.__getitem__)] = np.arange(count)
    parent = np.asarray(parents, np.int64).reshape(-1)
    child = np.flatnonzero(parent >= 0)
    delay = np.array([t.delay_us for t in transfers]).reshape(-1)
    graph = Jobs(
        transfers, np.arange(count), prio, (parent >= 0).astype(np.int64), np.zeros(count),
        *arcs_by_source(parent[child], child, delay[parent[child]], count),
    )  # fmt: skip
    deadline.check()
    started = run_jobs(network, graph, record=True)
    deadline.check()
    start = np.nan_to_num(started.starts, nan=0.0)
    arrive = np.where(np.isnan(started.starts), 0.0, started.starts + delay)
    return start.tolist(), arrive.tolist(), started.used or {}
