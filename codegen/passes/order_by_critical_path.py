"""Choose the global order the schedule follows (instruction DAG -> itself).

A topological order taking, among the ready instructions, the one of least depth (its step in the
dataflow), then the one with the longest path still ahead of it (the critical path), then the
lowest index. A program lowered from a timed schedule (``InstrDAG.times``: a synthesized
algorithm's ``start_us``) is ordered by those times first: a send at its start, a receive when its
data lands; depth alone would put every receive of a relay before any of its forwards, and a
threadblock that shares both would forward nothing until it has received everything. All subject
to the bounded FIFOs of the runtime: a connection holds only
``codegen.protocols.fifo_calls(protocol)`` primitive calls (Simple: 2) and a step of ``cnt``
chunks is ``cnt`` calls at large sizes. Played in this order, every instruction runs as soon as
the ones before it have, so the order is a witness that the schedule cannot deadlock:

- a send is taken while the calls in flight from its rank to its peer (sent, not yet received,
  counted per instance, a bound for each of the connections the pair will use) leave room for it;
- otherwise, with ``drain_fifos``, where the receives of the oldest calls in flight are ready
  (all they wait for is taken), those are taken first, oldest first, until the send fits: the
  peer drains the connection in the order it was filled, so a pairwise exchange (an alltoall's)
  alternates its sends and receives and keeps both directions in one threadblock on one channel
  (the compact layouts pair them so; an overtaking receive below needs a threadblock of its own);
- otherwise it is taken together with its receive, if that receive only waits for it (and, if the
  receive forwards, with the next receive, and so on; a chain through distinct ranks): the
  receiver drains the calls as they come. Such a receive may overtake the pair's calls in flight;
  channel assignment then puts it on another connection. A step of more chunks than the FIFO
  holds always travels so;
- else the next instruction by the key is considered.

Every threadblock later runs its instructions in this order, so sends and receives on each
connection come in the same order, and every wait (program order, dependencies, data, FIFO room)
points backwards in it. A DAG that leaves no such choice (every ready instruction a send that
fits nowhere) takes the best send anyway; the static checker then reports the deadlock.

``bounded_fifos=False`` orders by the key alone, as the reference compiler does; the order then
proves freedom from deadlock with unbounded FIFOs only. The compiler tries it first and keeps it
when the static checker proves the schedule deadlock-free with the runtime's FIFOs too, since the
bounded order may need more channels.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

from codegen.instr_dag import InstrDAG, prioritized_order
from codegen.protocols import fifo_calls
from common.memo import SameObjects

__all__ = ["order_by_critical_path"]


_ORDERED = SameObjects()
"""The last DAG's orders: the compiler reruns this pass on the same DAG for every channel count it
tries, and the passes after it then find the DAG's positions, depths and edges computed."""


def order_by_critical_path(dag: InstrDAG, bounded_fifos: bool = True, drain_fifos: bool = False) -> InstrDAG:
    """Order by ((time,) depth, -critical path, index), within the FIFO bound unless told otherwise."""
    drain = bounded_fifos and drain_fifos
    return _ORDERED.get([dag], (bounded_fifos, drain), lambda: _ordered(dag, bounded_fifos, drain))


def _ordered(dag: InstrDAG, bounded_fifos: bool, drain: bool) -> InstrDAG:
    if not bounded_fifos:
        return replace(dag, order=prioritized_order(_by_key(dag), dag.edges, ends=dag.ends))
    return replace(dag, order=_Scheduler(dag, drain).run())


def _by_key(dag: InstrDAG) -> list[int]:
    """The instructions sorted by ((time,) depth, -critical path, index): one stable sort of those
    columns as arrays (a million instructions at 512 ranks, where a sort of key tuples took seconds)."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass
    columns = [-np.asarray(dag.height, np.int64), np.asarray(dag.depth, np.int64)]
    if dag.times is not None:
        columns.append(np.asarray(dag.times, np.float64))
    return np.lexsort(columns).tolist()


def _places(dag: InstrDAG) -> list[int]:
    """Each instruction's place in :func:`_by_key`'s order: an int that orders as its key does."""
    import numpy as np
    place = np.empty(len(dag.instrs), np.int64)
    place[_by_key(dag)] = np.arange(len(dag.instrs))
    return place.tolist()


class _Scheduler:
    def __init__(self, dag: InstrDAG, drain: bool = False) -> None:
        self.dag, self.drain = dag, drain
        self.room = fifo_calls(dag.info.protocol)
        self.key = _places(dag)
        self.waiting = [len(dag.preds[i]) for i in range(len(dag.instrs))]
        self.in_flight: dict[tuple[int, int, int], int] = defaultdict(int)
        self.counted: set[int] = set()  # sends whose calls are in flight (their receive not yet taken)
        self.sent: dict[tuple[int, int, int], list[int]] = defaultdict(list)  # counted, in order, per pair
        self.taken = [False] * len(dag.instrs)
        self.order: list[int] = []
        self.blocked: dict[int, int] = {}
        """Ready instructions that cannot be taken as things stand, with the wake-up their
        watches carry: each waits, out of the ready heap, until a pair or an instruction that
        :meth:`_chains` read for it changes (:meth:`_block`, :meth:`_wake`)."""
        self.watching: dict[object, list[tuple[int, int]]] = defaultdict(list)
        """Per pair (a tuple) or instruction (an int), the (instruction, wake-up) watching it."""
        self.wakes = 0

    def _pair(self, i: int) -> tuple[int, int, int]:
        ins = self.dag.instrs[i]
        return ins.rank, ins.send_to, ins.instance

    def _fits(self, i: int) -> bool:
        ins = self.dag.instrs[i]
        return ins.send_to is None or self.in_flight[self._pair(i)] + ins.count <= self.room

    def _drained(self, i: int) -> list[int] | None:
        """The ready receives of the oldest calls in flight on send ``i``'s connection, oldest
        first, that leave it room ([] where it fits; None where the ready ones are not enough)."""
        if self._fits(i):
            return []
        instrs, pair = self.dag.instrs, self._pair(i)
        sent = self.sent[pair] = [s for s in self.sent[pair] if s in self.counted]
        need, drained = self.in_flight[pair] + instrs[i].count - self.room, []
        for s in sent:
            r = instrs[s].send_match
            if self.waiting[r] or self.taken[r] or not self._fits(r):
                return None
            drained.append(r)
            need -= instrs[s].count
            if need <= 0:
                return drained
        return None

    def _chains(self, i: int) -> list[list[int]] | None:
        """What taking ``i`` takes, chain by chain: with ``drain``, the receives that drain its
        connection first where they can (each a chain of its own), else :meth:`_chain`."""
        drained = self._drained(i) if self.drain else None
        if drained is not None:
            return [[r] for r in drained] + [[i]]
        chain = self._chain(i)
        return None if chain is None else [chain]

    def _chain(self, i: int) -> list[int] | None:
        """``i`` alone if it fits; else ``i`` with its receive (and so on), if each only waits for
        the one before it; None if neither."""
        if self._fits(i):  # most instructions: no set of ranks made
            return [i]
        chain = [i]
        ranks = {self.dag.instrs[i].rank}
        while not self._fits(chain[-1]):
            r = self.dag.instrs[chain[-1]].send_match
            rank = self.dag.instrs[r].rank
            if self.waiting[r] != 1 or rank in ranks:
                return None
            chain.append(r)
            ranks.add(rank)
        return chain

    def _take(self, chain: list[int], ready: list) -> None:
        instrs, succs = self.dag.instrs, self.dag.succs
        waiting, key, counted = self.waiting, self.key, self.counted
        watched = self.watching
        for k, i in enumerate(chain):
            ins = instrs[i]
            if ins.recv_match in counted:
                counted.discard(ins.recv_match)
                pair = self._pair(ins.recv_match)
                self.in_flight[pair] -= ins.count
                if pair in watched:
                    self._wake(pair, ready)
            if ins.send_to is not None and k == len(chain) - 1:
                pair = self._pair(i)
                counted.add(i)
                self.in_flight[pair] += ins.count
                self.sent[pair].append(i)
                if pair in watched:
                    self._wake(pair, ready)
            self.taken[i] = True
            self.blocked.pop(i, None)  # a receive drained ahead of its turn
            self.order.append(i)
            if i in watched:
                self._wake(i, ready)
            after = chain[k + 1] if k + 1 < len(chain) else None  # taken next, not made ready
            for e in succs[i]:
                j = e.succ
                waiting[j] -= 1
                if j in watched:
                    self._wake(j, ready)
                if waiting[j] == 0 and j != after:
                    heapq.heappush(ready, (key[j], j))

    def _block(self, i: int) -> None:
        """Hold ready ``i``, which :meth:`_chains` just refused, until something it read changes:
        its connection's calls in flight (and the calls sent on it), and for each receive it
        looked at (to drain, or to chain) that receive's waits, whether it is taken and its own
        connection. Nothing else decides :meth:`_chains`, so until then it would refuse again."""
        self.wakes += 1
        wake = self.wakes
        self.blocked[i] = wake
        for watched in self._reads(i):
            self.watching[watched].append((i, wake))

    def _reads(self, i: int) -> list:
        """The pairs and instructions :meth:`_chains` read in refusing ``i`` (see :meth:`_block`)."""
        instrs = self.dag.instrs
        reads: list = [self._pair(i)]
        if self.drain:
            for s in self.sent[reads[0]]:  # as _drained read them: in order, up to the first refusal
                r = instrs[s].send_match
                reads.append(r)
                if instrs[r].send_to is not None:
                    reads.append(self._pair(r))
                if self.waiting[r] or self.taken[r] or not self._fits(r):
                    break
        j, ranks = i, {instrs[i].rank}
        while not self._fits(j):  # as _chain walked: up to where it stopped
            r = instrs[j].send_match
            reads.append(r)
            if self.waiting[r] != 1 or instrs[r].rank in ranks:
                break
            if instrs[r].send_to is not None:
                reads.append(self._pair(r))
            ranks.add(instrs[r].rank)
            j = r
        return reads

    def _wake(self, watched: object, ready: list) -> None:
        """Return to the ready heap what waits on ``watched``, which just changed."""
        for i, wake in self.watching.pop(watched):
            if self.blocked.get(i) == wake:
                del self.blocked[i]
                heapq.heappush(ready, (self.key[i], i))

    def run(self) -> tuple[int, ...]:
        """Take, each time, the first ready instruction by the key that :meth:`_chains` accepts,
        with its chains; where it accepts none, the first ready one alone. A refused instruction
        is held out of the heap until what refused it changes (:meth:`_block`), so a connection
        with hundreds of sends waiting for room is not asked again after every take (the 128-GPU
        DGX A100 reducescatter's order took minutes so)."""
        ready = [(self.key[i], i) for i in range(len(self.dag.instrs)) if self.waiting[i] == 0]
        heapq.heapify(ready)
        while ready or self.blocked:
            chains = None
            while ready and chains is None:
                i = heapq.heappop(ready)[1]
                if self.taken[i]:  # drained ahead of its turn
                    continue
                chains = self._chains(i)
                if chains is None:
                    self._block(i)
            if chains is None:  # nothing fits: take the best send anyway (the checker will object)
                i = min(self.blocked, key=self.key.__getitem__)
                del self.blocked[i]
                chains = [[i]]
            for chain in chains:
                self._take(chain, ready)
        return tuple(self.order)
