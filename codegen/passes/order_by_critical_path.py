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
        for k, i in enumerate(chain):
            ins = instrs[i]
            if ins.recv_match in counted:
                counted.discard(ins.recv_match)
                self.in_flight[self._pair(ins.recv_match)] -= ins.count
            if ins.send_to is not None and k == len(chain) - 1:
                counted.add(i)
                self.in_flight[self._pair(i)] += ins.count
                self.sent[self._pair(i)].append(i)
            self.taken[i] = True
            self.order.append(i)
            after = chain[k + 1] if k + 1 < len(chain) else None  # taken next, not made ready
            for e in succs[i]:
                j = e.succ
                waiting[j] -= 1
                if waiting[j] == 0 and j != after:
                    heapq.heappush(ready, (key[j], j))

    def run(self) -> tuple[int, ...]:
        ready = [(self.key[i], i) for i in range(len(self.dag.instrs)) if self.waiting[i] == 0]
        heapq.heapify(ready)
        while ready:
            skipped = []
            chains = None
            while ready and chains is None:
                item = heapq.heappop(ready)
                if self.taken[item[1]]:  # drained ahead of its turn
                    continue
                chains = self._chains(item[1])
                if chains is None:
                    skipped.append(item)
            if chains is None:
                if not skipped:
                    break
                chains = [[skipped.pop(0)[1]]]  # nothing fits: take the best send anyway (the checker will object)
            for item in skipped:
                heapq.heappush(ready, item)
            for chain in chains:
                self._take(chain, ready)
        return tuple(self.order)
