"""Non-delay list scheduling of transfers on shared edges (the rules: :mod:`synth.timing`).

A feeder submits a job when it knows when the job is ready (``ready_us``: everything it waits for
besides links has happened), with the :class:`~synth.timing.model.Transfer` it makes (``None`` for a
job that uses no link: a receive, a local copy) and its priority. :meth:`Engine.run` starts jobs in
the model's order and calls the feeder back at each start, where it may submit the jobs that start
enables. Event driven: a job blocked by a busy edge waits in that edge's queue and is looked at
again only when the edge frees, so a busy switch port does not rescan its queue at every transfer;
an edge's freeing is an event only while jobs wait for it. The loop is the hot path of every
modeled time (half a million starts per IR simulation at 512 ranks, with a thousand candidates
at one instant), so it keeps each resource's earliest free server (:attr:`Engine.first`) instead
of taking a minimum per try, keeps its events by instant (one heap entry per instant), orders
candidates by flat tuples, and runs a whole instant in one function.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from synth.timing.model import Network, Transfer
    from topologies.logical import Edge

__all__ = ["Engine"]

CHECK_EVERY = 1024
"""Instants of the event loop between two calls of ``run``'s ``tick``."""

Candidate = tuple[int, float, int, int, "tuple[tuple[int, float], ...] | None"]
"""A job as it waits: (priority, ready time, job id, the edge whose queue holds it (-1: none), its
transfer's path: None for a job that uses no link); flat, so that ordering two compares numbers
only. One tuple per job and wait: made at its submission, and again when it joins an edge's queue,
where it stays as it is (job ids are unique among waiting jobs, so ordering never reaches past the
id) and is offered as it is when the edge frees."""


class Engine:
    """One run of the model on a :class:`~synth.timing.model.Network`; ``record`` keeps, per
    ``(edge, server index)``, the jobs that server carried in order (:attr:`used`)."""

    def __init__(self, network: Network, *, record: bool = False) -> None:
        self.network = network
        self._servers = network.servers
        """The network's resources (it adds connections as transfers first use them)."""
        self.tolerance = network.params.tolerance_us
        self.free: list[list[float] | None] = [
            None if count == 1 else [0.0] * count for count in network.servers
        ]
        """Per resource of several servers, when each frees (None for one server: :attr:`first` is it)."""
        self.first: list[float] = [0.0] * len(network.servers)
        """Per resource, when its first server frees (``min(free[e])``, kept as servers change)."""
        self.used: dict[tuple[Edge, int], list[int]] | None = {} if record else None
        self._plain = not record and all(count == 1 for count in network.servers)
        """Every resource has one server and nothing is recorded: a start only sets :attr:`first`
        (every resource of the 512-rank trees' runs)."""
        self._waiting: list[list[Candidate]] = [[] for _ in network.servers]
        self._armed: list[float | None] = [None] * len(network.servers)
        """Per edge, when its pending freeing event fires (None: no event pending)."""
        self._times: list[float] = []
        """The instants that have events, as a heap; each instant's events are in :attr:`_events`."""
        self._events: dict[float, tuple[list[Candidate], list[int]]] = {}
        """Per instant, the jobs that become ready then and the edges that free then (in any order:
        an instant takes all its events before it decides anything)."""
        self._now = float("-inf")
        self._candidates: list[Candidate] | None = None

    def submit(self, job: int, ready_us: float, transfer: Transfer | None, priority: int = 0) -> None:
        """Job ``job`` (an id unique among the jobs waiting at once) is ready at ``ready_us``."""
        path = None
        if transfer is not None:
            path = transfer.path
            if len(self.first) < len(self._servers):
                self._grow()
        self.offer(job, ready_us, path, priority)

    def offer(
        self, job: int, ready_us: float, path: tuple[tuple[int, float], ...] | None, priority: int = 0
    ) -> None:
        """:meth:`submit` of a transfer's path (None: no link), for a feeder whose network made
        every transfer before this engine (a million submits at 512 ranks)."""
        candidate = (priority, ready_us, job, -1, path)
        now = self._now
        if ready_us <= now + self.tolerance and self._candidates is not None:
            heappush(self._candidates, candidate)  # ready at the instant being decided
            return
        at = now if now > ready_us else ready_us
        events = self._events.get(at)  # _at, inline: a call per submit at 512 ranks
        if events is None:
            events = self._events[at] = ([], [])
            heappush(self._times, at)
        events[0].append(candidate)

    def _at(self, at: float) -> tuple[list[Candidate], list[int]]:
        """The events of instant ``at``, made on first use."""
        events = self._events.get(at)
        if events is None:
            events = self._events[at] = ([], [])
            heappush(self._times, at)
        return events

    def _grow(self) -> None:
        """Take in the resources the network made since (connections are made on first use)."""
        for count in self._servers[len(self.free) :]:
            self.free.append(None if count == 1 else [0.0] * count)
            self._plain = self._plain and count == 1
            self.first.append(0.0)
            self._waiting.append([])
            self._armed.append(None)

    def run(self, on_start: Callable[[int, float], None], tick: Callable[[], None] | None = None) -> None:
        """Start every job that can start, calling ``on_start(job, start_us)`` for each, in start
        order; ``tick`` is called every :data:`CHECK_EVERY` instants (e.g. to check a deadline).
        Each instant takes its events, then starts its candidates in the tie rule's order."""
        times, events, waiting, armed = self._times, self._events, self._waiting, self._armed
        instants = 0
        while times:
            instants += 1
            if tick is not None and instants % CHECK_EVERY == 0:
                tick()
            self._now = now = heappop(times)
            candidates, freed = events.pop(now)
            self._candidates = candidates
            for edge in freed:
                armed[edge] = None
                if waiting[edge]:
                    candidates.append(waiting[edge][0])
            if len(candidates) > 1:
                heapify(candidates)
            self._instant(now, candidates, on_start)
            self._candidates = None

    def _instant(
        self, now: float, candidates: list[Candidate], on_start: Callable[[int, float], None]
    ) -> None:
        """Start the candidates of instant ``now`` that can start (one drawn as an edge's queue
        head that is no longer it is stale), and queue the others on the edge that frees last; an
        edge a candidate came from offers its next head while it has a free server. Where every
        resource has one server and nothing is recorded, a start sets :attr:`first` alone."""
        waiting, first, armed, events = self._waiting, self.first, self._armed, self._events
        plain = self._plain
        limit = now + self.tolerance
        while candidates:
            candidate = heappop(candidates)
            via = candidate[3]
            if via >= 0:
                queue = waiting[via]
                if queue and queue[0] is candidate:
                    heappop(queue)
                else:
                    candidate = None
            if candidate is not None:
                _, ready, job, _, path = candidate
                start = ready if ready > now else now
                if path is None:
                    on_start(job, start)
                else:
                    binding = -1
                    for e, _ in path:
                        if first[e] > start:
                            start, binding = first[e], e
                    if start > limit:
                        heappush(waiting[binding], (candidate[0], ready, job, binding, path))
                        if armed[binding] != start:  # _arm, inline: a blocked try per start at 512 ranks
                            armed[binding] = start
                            freeing = events.get(start)
                            if freeing is None:
                                freeing = self._at(start)
                            freeing[1].append(binding)
                    else:
                        if plain:
                            for e, hold in path:
                                first[e] = start + hold
                        else:
                            self._take(path, start, job)
                        on_start(job, start)
            if via >= 0 and waiting[via]:
                at = first[via]
                if at <= limit:
                    heappush(candidates, waiting[via][0])
                elif armed[via] != at:  # _arm, inline
                    armed[via] = at
                    freeing = events.get(at)
                    if freeing is None:
                        freeing = self._at(at)
                    freeing[1].append(via)

    def _take(self, path: tuple[tuple[int, float], ...], start: float, job: int) -> None:
        """Job ``job`` takes a server of each resource of ``path`` from ``start``: the one that
        frees first (recorded in :attr:`used`)."""
        first, free, used = self.first, self.free, self.used
        for e, hold in path:
            servers = free[e]
            if servers is None:
                first[e] = start + hold
                k = 0
            else:
                k = servers.index(min(servers))
                servers[k] = start + hold
                first[e] = min(servers)
            if used is not None:
                used.setdefault((self.network.edges[e], k), []).append(job)
