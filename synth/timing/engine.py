"""Non-delay list scheduling of transfers on shared edges (the rules: :mod:`synth.timing`).

A feeder submits a job when it knows when the job is ready (``ready_us``: everything it waits for
besides links has happened), with the :class:`~synth.timing.model.Transfer` it makes (``None`` for a
job that uses no link: a receive, a local copy) and its priority. :meth:`Engine.run` starts jobs in
the model's order and calls the feeder back at each start, where it may submit the jobs that start
enables. Event driven: a job blocked by a busy edge waits in that edge's queue and is looked at
again only when the edge frees, so a busy switch port does not rescan its queue at every transfer;
an edge's freeing is an event only while jobs wait for it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from synth.timing.model import Network, Transfer
    from topologies.logical import Edge

__all__ = ["Engine"]

CHECK_EVERY = 1024
"""Instants of the event loop between two calls of ``run``'s ``tick``."""

_READY, _FREED = 0, 1

Entry = tuple[int, float, int, "Transfer | None"]
"""A job as it waits: (priority, ready time, job id, transfer)."""


class Engine:
    """One run of the model on a :class:`~synth.timing.model.Network`; ``record`` keeps, per
    ``(edge, server index)``, the jobs that server carried in order (:attr:`used`)."""

    def __init__(self, network: Network, *, record: bool = False) -> None:
        self.network = network
        self.tolerance = network.params.tolerance_us
        self.free: list[list[float]] = [[0.0] * count for count in network.servers]
        self.used: dict[tuple[Edge, int], list[int]] | None = {} if record else None
        self._waiting: list[list[Entry]] = [[] for _ in network.servers]
        self._armed: list[float | None] = [None] * len(network.servers)
        """Per edge, when its pending freeing event fires (None: no event pending)."""
        self._events: list[tuple[float, int, int, Entry | int]] = []
        self._seq = 0
        self._now = float("-inf")
        self._candidates: list[tuple[Entry, int]] | None = None

    def submit(self, job: int, ready_us: float, transfer: Transfer | None, priority: int = 0) -> None:
        """Job ``job`` (an id unique among the jobs waiting at once) is ready at ``ready_us``."""
        if transfer is not None and len(self.free) < len(self.network.servers):
            self._grow()
        entry = (priority, ready_us, job, transfer)
        if self._candidates is not None and ready_us <= self._now + self.tolerance:
            heapq.heappush(self._candidates, (entry, -1))  # ready at the instant being decided
        else:
            self._push(max(ready_us, self._now), _READY, entry)

    def _grow(self) -> None:
        """Take in the resources the network made since (connections are made on first use)."""
        for count in self.network.servers[len(self.free) :]:
            self.free.append([0.0] * count)
            self._waiting.append([])
            self._armed.append(None)

    def _push(self, at: float, kind: int, what: Entry | int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, kind, self._seq, what))

    def run(self, on_start: Callable[[int, float], None], tick: Callable[[], None] | None = None) -> None:
        """Start every job that can start, calling ``on_start(job, start_us)`` for each, in start
        order; ``tick`` is called every :data:`CHECK_EVERY` instants (e.g. to check a deadline)."""
        events = self._events
        instants = 0
        while events:
            instants += 1
            if tick is not None and instants % CHECK_EVERY == 0:
                tick()
            self._now = now = events[0][0]
            self._candidates = candidates = []
            while events and events[0][0] == now:
                _, kind, _, what = heapq.heappop(events)
                if kind == _READY:
                    candidates.append((what, -1))
                else:
                    self._armed[what] = None
                    if self._waiting[what]:
                        candidates.append((self._waiting[what][0], what))
            heapq.heapify(candidates)
            while candidates:
                entry, via = heapq.heappop(candidates)
                if via < 0 or self._take_head(entry, via):
                    self._try_start(entry, now, on_start)
                if via >= 0:
                    self._offer_head(via, now)
            self._candidates = None

    def _take_head(self, entry: Entry, edge: int) -> bool:
        """Whether ``entry``, drawn as ``edge``'s queue head, still is it (then it leaves the queue)."""
        queue = self._waiting[edge]
        if queue and queue[0] is entry:
            heapq.heappop(queue)
            return True
        return False

    def _offer_head(self, edge: int, now: float) -> None:
        """``edge``'s next waiting job becomes a candidate if ``edge`` still has a free server, else
        it is looked at when the edge next frees."""
        queue = self._waiting[edge]
        if queue:
            if min(self.free[edge]) <= now + self.tolerance:
                heapq.heappush(self._candidates, (queue[0], edge))
            else:
                self._arm(edge)

    def _arm(self, edge: int) -> None:
        """Make sure an event fires when ``edge`` (all of whose servers are busy) next frees."""
        at = min(self.free[edge])
        if self._armed[edge] != at:
            self._armed[edge] = at
            self._push(at, _FREED, edge)

    def _try_start(self, entry: Entry, now: float, on_start: Callable[[int, float], None]) -> None:
        """Start ``entry`` now if every edge of its path has a free server, else queue it on the
        edge that frees last."""
        transfer = entry[3]
        start = entry[1] if entry[1] > now else now
        if transfer is not None:
            free = self.free
            binding = -1
            for e, _ in transfer.path:
                first = min(free[e])
                if first > start:
                    start, binding = first, e
            if start > now + self.tolerance:
                heapq.heappush(self._waiting[binding], entry)
                self._arm(binding)
                return
            for e, hold in transfer.path:
                servers = free[e]
                k = 0 if len(servers) == 1 else servers.index(min(servers))
                servers[k] = start + hold
                if self.used is not None:
                    self.used.setdefault((self.network.edges[e], k), []).append(entry[2])
        on_start(entry[2], start)
