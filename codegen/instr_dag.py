"""The instruction DAG: per-rank instructions (``s r cpy re rrc``, and ``rcs rrs rrcs`` after
fusion) with the dependencies between them and a global order.

A remote copy becomes a send on the source rank *matched* with a receive on the destination rank;
a remote reduce, a send matched with a ``rrc``. Edges are either slot dependencies (read after
write, write after read, write after write; always on one rank) or ``match`` edges from a send to
the receive that takes its data. ``order`` is always a topological order of all instructions; the
pass :mod:`~codegen.passes.order_by_critical_path` chooses the one the schedule follows.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from codegen.chunk_dag import DepKind, ProgramInfo
from codegen.errors import CodegenError
from codegen.ir import OpType, Ref

__all__ = ["Instr", "InstrDAG", "InstrEdge", "topological_order"]


@dataclass(frozen=True)
class Instr:
    """One instruction on ``rank``. ``send_to``/``recv_from`` are the peers; ``send_match`` is the
    index of the instruction that receives what this one sends, ``recv_match`` the index of the one
    whose data this one receives. ``tb_hint`` and ``channel_hint`` are the user's annotations.
    ``time`` is when a timed schedule has the instruction run (a send: its start; a receive: its
    data's arrival), or None."""

    rank: int
    type: OpType
    src: Ref | None = None
    dst: Ref | None = None
    count: int = 1
    send_to: int | None = None
    recv_from: int | None = None
    send_match: int | None = None
    recv_match: int | None = None
    tb_hint: int | None = None
    channel_hint: int | None = None
    instance: int = 0
    time: float | None = None

    def __str__(self) -> str:
        parts = [f"r{self.rank}", self.type.value]
        if self.src is not None:
            parts.append(f"src={self.src}")
        if self.dst is not None:
            parts.append(f"dst={self.dst}")
        parts.append(f"cnt={self.count}")
        if self.recv_from is not None:
            parts.append(f"from={self.recv_from}")
        if self.send_to is not None:
            parts.append(f"to={self.send_to}")
        if self.tb_hint is not None:
            parts.append(f"tb={self.tb_hint}")
        if self.channel_hint is not None:
            parts.append(f"ch={self.channel_hint}")
        if self.instance:
            parts.append(f"inst={self.instance}")
        return " ".join(parts)


@dataclass(frozen=True, order=True)
class InstrEdge:
    pred: int
    succ: int
    kind: DepKind = field(compare=False)


def topological_order(
    n: int, edges: Iterable[InstrEdge], key: Callable[[int], object], what: str = "instruction DAG"
) -> tuple[int, ...]:
    """Kahn's algorithm taking the ready node with the smallest ``key`` first (ties: the smaller
    index). Where the nodes sorted by key already put every edge forward, that sort is what Kahn's
    algorithm would give (the smallest remaining node is always ready) and is returned without the
    heap: passes that keep the previous order as the key mostly get this case."""
    edges = edges if isinstance(edges, Sequence) else tuple(edges)
    order = sorted(range(n), key=key)
    position = [0] * n
    for p, i in enumerate(order):
        position[i] = p
    if all(position[e.pred] < position[e.succ] for e in edges):
        return tuple(order)
    indegree = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for e in edges:
        succs[e.pred].append(e.succ)
        indegree[e.succ] += 1
    ready = [(key(i), i) for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, (key(j), j))
    if len(order) != n:
        stuck = next(i for i in range(n) if indegree[i] > 0)
        raise CodegenError(f"{what}: dependency cycle through instruction {stuck}")
    return tuple(order)


@dataclass(frozen=True)
class InstrDAG:
    info: ProgramInfo
    instrs: tuple[Instr, ...]
    edges: tuple[InstrEdge, ...]
    order: tuple[int, ...]

    @classmethod
    def build(
        cls, info: ProgramInfo, instrs: Sequence[Instr], edges: Iterable[InstrEdge], rank_hint: Sequence[int]
    ) -> InstrDAG:
        """A DAG whose order is topological, following ``rank_hint`` (a position per instruction)
        wherever the edges allow."""
        unique: dict[tuple[int, int], InstrEdge] = {}
        for e in edges:
            if e.pred != e.succ:
                unique.setdefault((e.pred, e.succ), e)
        kept = tuple(sorted(unique.values()))
        order = topological_order(len(instrs), kept, lambda i: (rank_hint[i], i))
        return cls(info, tuple(instrs), kept, order)

    # -- structure -------------------------------------------------------------------------
    @cached_property
    def preds(self) -> tuple[tuple[InstrEdge, ...], ...]:
        out: list[list[InstrEdge]] = [[] for _ in self.instrs]
        for e in self.edges:
            out[e.succ].append(e)
        return tuple(tuple(x) for x in out)

    @cached_property
    def succs(self) -> tuple[tuple[InstrEdge, ...], ...]:
        out: list[list[InstrEdge]] = [[] for _ in self.instrs]
        for e in self.edges:
            out[e.pred].append(e)
        return tuple(tuple(x) for x in out)

    @cached_property
    def position(self) -> tuple[int, ...]:
        pos = [0] * len(self.instrs)
        for p, i in enumerate(self.order):
            pos[i] = p
        return tuple(pos)

    @cached_property
    def depth(self) -> tuple[int, ...]:
        """Longest path (in edges) from any source to each instruction."""
        depth = [0] * len(self.instrs)
        for i in self.order:
            for e in self.preds[i]:
                depth[i] = max(depth[i], depth[e.pred] + 1)
        return tuple(depth)

    @cached_property
    def times(self) -> tuple[float, ...] | None:
        """When the timed schedule the program was lowered from runs each instruction: its own
        ``time``, else the latest of its predecessors' (0 for none); None if no instruction is timed."""
        if all(ins.time is None for ins in self.instrs):
            return None
        times = [0.0] * len(self.instrs)
        for i in self.order:
            own = self.instrs[i].time
            times[i] = own if own is not None else max((times[e.pred] for e in self.preds[i]), default=0.0)
        return tuple(times)

    def holds(self, send: int) -> tuple[float, float]:
        """When a timed transfer (``send`` and its receive) holds its connection: from the send's
        start to halfway to its arrival. The arrival is ``alpha + bytes / bandwidth`` after the
        start and the link is held for ``bytes / bandwidth``, which is at least that half whenever
        ``bytes / bandwidth >= alpha``, as at the sizes schedules are timed at; so two transfers
        one link carries one after the other never overlap here, and two it carries side by side
        (a connection of several links, DGX-1's doubled NVLinks) do."""
        times = self.times
        start, arrival = times[send], times[self.instrs[send].send_match]
        return start, (start + arrival) / 2

    def overlap(self, a: int, b: int) -> bool:
        """Whether timed transfers ``a`` and ``b`` (sends) hold their connections at once: in a
        program timed by the Algorithm model (``ProgramInfo.model_timed``), on one connection,
        they then ran side by side over its links."""
        (s, e), (s2, e2) = self.holds(a), self.holds(b)
        return s < e2 and s2 < e

    @cached_property
    def height(self) -> tuple[int, ...]:
        """Longest path (in edges) from each instruction to any sink: its critical path."""
        height = [0] * len(self.instrs)
        for i in reversed(self.order):
            for e in self.succs[i]:
                height[i] = max(height[i], height[e.succ] + 1)
        return tuple(height)

    # -- checks and printing ---------------------------------------------------------------
    def verify(self) -> None:
        """Raise :class:`CodegenError` on a broken invariant: matches not mutual or with different
        counts, peers that disagree, a slot edge across ranks, an order that is not topological."""
        n = len(self.instrs)
        for i, ins in enumerate(self.instrs):
            where = f"instruction DAG: instruction {i} ({ins})"
            if ins.type.sends != (ins.send_match is not None) or ins.type.receives != (
                ins.recv_match is not None
            ):
                raise CodegenError(f"{where}: matches do not fit its type")
            if ins.send_match is not None:
                other = self.instrs[ins.send_match]
                if other.recv_match != i or other.rank != ins.send_to or other.recv_from != ins.rank:
                    raise CodegenError(f"{where}: its send is not matched by {other}")
                if other.count != ins.count:
                    raise CodegenError(f"{where}: sends {ins.count} chunk(s), {other} receives {other.count}")
            if ins.send_to == ins.rank or ins.recv_from == ins.rank:
                raise CodegenError(f"{where}: a rank cannot send to itself")
        for e in self.edges:
            if not (0 <= e.pred < n and 0 <= e.succ < n):
                raise CodegenError(f"instruction DAG: edge {e} names a missing instruction")
            same = self.instrs[e.pred].rank == self.instrs[e.succ].rank
            if (e.kind is DepKind.MATCH) == same:
                raise CodegenError(f"instruction DAG: edge {e} ({e.kind}) joins the wrong ranks")
        if sorted(self.order) != list(range(n)):
            raise CodegenError("instruction DAG: order is not a permutation of the instructions")
        pos = self.position
        for e in self.edges:
            if pos[e.pred] >= pos[e.succ]:
                raise CodegenError(f"instruction DAG: order puts {e.succ} before its predecessor {e.pred}")

    def describe(self) -> str:
        lines = [
            f"instruction DAG of {self.info.name}: {len(self.instrs)} instructions, {len(self.edges)} edges"
        ]
        for i in self.order:
            preds = " ".join(f"{e.pred}({e.kind})" for e in self.preds[i])
            lines.append(f"  {i}: {self.instrs[i]}" + (f"  after {preds}" if preds else ""))
        return "\n".join(lines)
