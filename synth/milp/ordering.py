"""Stage 2: greedy list scheduling of the routed pieces on every link and switch port.

Each tree arc is a send. A send is ready when its piece has arrived at its source; it then needs
one server of every physical edge of its logical path (a NIC, a switch port, an NVLink). Among
sends that can start at the same moment, the one with the longest remaining path (its own delay
plus the longest chain of sends below it in its tree) goes first, as in TACCL's heuristic. The
time model and the tie rules are exactly those of :func:`synth.cost.simulate`, so an algorithm
whose sends are listed in this schedule's order replays in the simulator with the same times.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from synth.cost import BYTES_PER_US_PER_GBPS
from synth.deadline import NO_DEADLINE, Deadline
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
    chunk: int
    src: int
    dst: int
    parent: int
    """Index of the send that brings the piece to ``src`` (-1 at the piece's source)."""
    start_us: float
    arrive_us: float
    rank: tuple
    """The priority key that ordered it (smaller first)."""


@dataclass(frozen=True)
class Schedule:
    """Sends in start order, and on every server of every physical edge the sends it carried."""

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
) -> Schedule:
    """Schedule every tree arc (module docstring): ``sources[chunk]`` and ``piece_index[chunk]`` say
    where each piece starts and which of its chunk's pieces it is; ``levels`` are the rotation group
    sizes the offsets are taken in (see :data:`PRIORITIES`). Past the ``deadline`` it raises
    :class:`synth.deadline.OutOfTime`."""
    if priority not in PRIORITIES:
        raise ValueError(f"unknown ordering rule {priority!r}: expected one of {', '.join(PRIORITIES)}")
    logical = topology.logical()
    arcs, parents = _sends(trees)
    count = len(arcs)
    links = [logical.links[(u, v)] for _, u, v in arcs]
    delay = [lk.alpha_us + piece_bytes / (lk.bandwidth_GBps * BYTES_PER_US_PER_GBPS) for lk in links]
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

    ranks = [key(i) for i in range(count)]
    start, arrive, used = _run(topology, arcs, parents, children, ranks, piece_bytes, deadline)
    order = sorted(range(count), key=lambda i: (start[i], ranks[i]))
    new_index = {old: new for new, old in enumerate(order)}
    sends = tuple(
        TimedSend(
            arcs[i][0],
            arcs[i][1],
            arcs[i][2],
            new_index[parents[i]] if parents[i] >= 0 else -1,
            start[i],
            arrive[i],
            ranks[i],
        )
        for i in order
    )
    servers = {key_: tuple(new_index[i] for i in seq) for key_, seq in used.items()}
    return Schedule(sends, servers, max(arrive, default=0.0))


EPS = 1e-9
"""The simulator's tolerance: a send whose resources free within EPS of its turn starts then."""
CHECK_EVERY = 1024
"""Instants of the event loop between two looks at the deadline."""


def _run(
    topology: Topology,
    arcs: list[tuple[int, int, int]],
    parents: list[int],
    children: list[list[int]],
    ranks: list[tuple],
    piece_bytes: float,
    deadline: Deadline,
) -> tuple[list[float], list[float], dict[tuple, list[int]]]:
    """Event-driven non-delay list scheduling with :func:`synth.cost.simulate`'s semantics.

    At every instant, the best-ranked send whose piece has arrived and whose edges each have a free
    server starts. A blocked send waits on the edge that frees last and is looked at again only when
    that edge frees, so a busy port does not rescan its whole queue at every transfer.
    """
    logical = topology.logical()
    resources = logical.resources
    edge_ids = {e: j for j, e in enumerate(resources)}
    edge_list = list(resources)
    hold = [piece_bytes / (resources[e].bandwidth_GBps * BYTES_PER_US_PER_GBPS) for e in edge_list]
    free = [[0.0] * resources[e].count for e in edge_list]
    count = len(arcs)
    paths: list[tuple[int, ...]] = []
    alpha: list[float] = []
    transfer: list[float] = []
    for _, u, v in arcs:
        link = logical.links[(u, v)]
        paths.append(tuple(edge_ids[e] for e in link.edges))
        alpha.append(link.alpha_us)
        transfer.append(piece_bytes / (link.bandwidth_GBps * BYTES_PER_US_PER_GBPS))
    order = sorted(range(count), key=ranks.__getitem__)
    prio = [0] * count
    for p, i in enumerate(order):
        prio[i] = p
    ready = [0.0] * count
    start = [0.0] * count
    arrive = [0.0] * count
    used: dict[tuple, list[int]] = {}
    waiting: dict[int, list[tuple[int, int]]] = {}
    events: list[tuple[float, int, int]] = [(0.0, 0, i) for i in range(count) if parents[i] < 0]
    heapq.heapify(events)
    READY, FREED = 0, 1
    instants = 0
    while events:
        instants += 1
        if instants % CHECK_EVERY == 0:
            deadline.check()
        now = events[0][0]
        candidates: list[tuple[int, int, int]] = []
        freed: set[int] = set()
        while events and events[0][0] == now:
            _, kind, what = heapq.heappop(events)
            if kind == READY:
                candidates.append((prio[what], what, -1))
            elif what not in freed and waiting.get(what):
                freed.add(what)
                candidates.append((waiting[what][0][0], waiting[what][0][1], what))
        heapq.heapify(candidates)
        while candidates:
            _, i, src_edge = heapq.heappop(candidates)
            if src_edge >= 0:
                queue = waiting[src_edge]
                if not queue or queue[0][1] != i:  # the queue's head changed since: draw the new head
                    if queue and min(free[src_edge]) <= now + EPS:
                        heapq.heappush(candidates, (queue[0][0], queue[0][1], src_edge))
                    continue
                heapq.heappop(queue)
            t = ready[i]
            binding = -1
            for e in paths[i]:
                m = min(free[e])
                if m > t:
                    t = m
                    binding = e
            if t > now + EPS:
                heapq.heappush(waiting.setdefault(binding, []), (prio[i], i))
            else:
                for e in paths[i]:
                    servers = free[e]
                    s = min(range(len(servers)), key=servers.__getitem__)
                    servers[s] = t + hold[e]
                    used.setdefault((edge_list[e], s), []).append(i)
                    heapq.heappush(events, (servers[s], FREED, e))
                start[i] = t
                arrive[i] = t + alpha[i] + transfer[i]
                for c in children[i]:
                    ready[c] = arrive[i]
                    heapq.heappush(events, (arrive[i], READY, c))
            if src_edge >= 0:
                queue = waiting[src_edge]
                if queue and min(free[src_edge]) <= now + EPS:
                    heapq.heappush(candidates, (queue[0][0], queue[0][1], src_edge))
    return start, arrive, used
