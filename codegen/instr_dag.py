"""The instruction DAG: per-rank instructions (``s r cpy re rrc``, and ``rcs rrs rrcs`` after
fusion) with the dependencies between them and a global order.

A remote copy becomes a send on the source rank *matched* with a receive on the destination rank;
a remote reduce, a send matched with a ``rrc``. Edges are either slot dependencies (read after
write, write after read, write after write; always on one rank) or ``match`` edges from a send to
the receive that takes its data. ``order`` is always a topological order of all instructions; the
pass :mod:`~codegen.passes.order_by_critical_path` chooses the one the schedule follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import TYPE_CHECKING

from codegen.chunk_dag import DepKind, ProgramInfo
from codegen.errors import CodegenError
from codegen.ir import OpType, Ref
from codegen.slotted import made_all

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Instr",
    "InstrDAG",
    "InstrEdge",
    "edge_ends",
    "new_edge",
    "new_edges",
    "prioritized_order",
    "topological_order",
]


@dataclass(frozen=True, slots=True)
class Instr:
    """One instruction on ``rank``. ``send_to``/``recv_from`` are the peers; ``send_match`` is the
    index of the instruction that receives what this one sends, ``recv_match`` the index of the one
    whose data this one receives. ``tb_hint`` and ``channel_hint`` are the user's annotations.
    ``time`` is when a timed schedule has the instruction run (a send: its start; a receive: its
    data's arrival), or None. Slotted: a million are made at 512 ranks (:mod:`codegen.slotted`)."""

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


@dataclass(frozen=True, order=True, slots=True)
class InstrEdge:
    pred: int
    succ: int
    kind: DepKind = field(compare=False)


_new = object.__new__
_SET_PRED, _SET_SUCC, _SET_KIND = (getattr(InstrEdge, name).__set__ for name in ("pred", "succ", "kind"))


def new_edge(pred: int, succ: int, kind: DepKind) -> InstrEdge:
    """``InstrEdge(pred, succ, kind)`` without its frozen ``__init__`` (each field set through its
    slot, as :mod:`codegen.slotted` does): the passes that rebuild the DAG make a million edges at
    512 ranks."""
    edge = _new(InstrEdge)
    _SET_PRED(edge, pred)
    _SET_SUCC(edge, succ)
    _SET_KIND(edge, kind)
    return edge


def new_edges(pred: Iterable[int], succ: Iterable[int], kind: Iterable[DepKind], n: int) -> list[InstrEdge]:
    """``n`` edges, the ``k``-th ``InstrEdge(pred[k], succ[k], kind[k])``, made in bulk."""
    return made_all(InstrEdge, n, {"pred": pred, "succ": succ, "kind": kind})


_PRED, _SUCC, _TIME = attrgetter("pred"), attrgetter("succ"), attrgetter("time")


def edge_ends(edges: Sequence[InstrEdge]) -> tuple[np.ndarray, np.ndarray]:
    """Each edge's ``pred`` and each edge's ``succ``, as arrays (read through ``map``, no Python
    call per edge: a million edges at 512 ranks)."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass

    m = len(edges)
    return np.fromiter(map(_PRED, edges), np.int64, m), np.fromiter(map(_SUCC, edges), np.int64, m)


def topological_order(
    n: int, edges: Iterable[InstrEdge], key: Callable[[int], object], what: str = "instruction DAG"
) -> tuple[int, ...]:
    """Kahn's algorithm taking the ready node with the smallest ``key`` first (ties: the smaller
    index): :func:`prioritized_order` of the nodes sorted by key."""
    edges = edges if isinstance(edges, Sequence) else tuple(edges)
    return prioritized_order(sorted(range(n), key=key), edges, what)


def prioritized_order(
    by_key: Sequence[int],
    edges: Sequence[InstrEdge],
    what: str = "instruction DAG",
    ends: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[int, ...]:
    """Kahn's algorithm taking the ready node that comes first in ``by_key`` (every node once, in
    the order of priority; ``ends``: the edges' :func:`edge_ends`, where known). Where that order
    already puts every edge forward, it is what Kahn's algorithm would give (the first remaining
    node is always ready) and is returned without the heap: passes that keep the previous order as
    the key mostly get this case. Otherwise :func:`codegen.kahn.kahn` (compiled) orders them."""
    import numpy as np

    n = len(by_key)
    nodes = np.asarray(by_key, dtype=np.int64).reshape(n)
    pred, succ = edge_ends(edges) if ends is None else ends
    place = np.empty(n, np.int64)
    place[nodes] = np.arange(n)
    pred, succ = place[pred], place[succ]  # the edges between places
    if bool((pred < succ).all()):
        return tuple(nodes.tolist())
    from codegen.kahn import kahn  # numba: not loaded by building the CLI's parser

    out = kahn(n, pred, succ)
    if len(out) != n:
        indegree = np.bincount(succ, minlength=n)
        indegree[out] = 0
        stuck = int(np.flatnonzero(indegree[place] > 0)[0])
        raise CodegenError(f"{what}: dependency cycle through instruction {stuck}")
    return tuple(nodes[out].tolist())


def _layers(n: int, pred: np.ndarray, succ: np.ndarray) -> np.ndarray | None:
    """Per node, the longest path (in edges) from a source to it: the round in which peeling the
    sources off the DAG, all at once each round, removes it. Rounds are as many as the longest path
    (3 at 512 ranks), each one array operation over the edges leaving the round's nodes. None where
    a cycle leaves nodes unpeeled."""
    import numpy as np

    from topologies.numeric import ranges

    layer = np.full(n, -1, np.int64)
    indegree = np.bincount(succ, minlength=n)
    by_pred = np.argsort(pred, kind="stable")
    targets = succ[by_pred]
    starts = np.concatenate(([0], np.cumsum(np.bincount(pred, minlength=n))))
    frontier, r = np.flatnonzero(indegree == 0), 0
    while frontier.size:
        layer[frontier] = r
        lo, counts = starts[frontier], starts[frontier + 1] - starts[frontier]
        total = int(counts.sum())
        if not total:
            break
        reached = targets[ranges(lo, counts)]  # the out-edges' targets
        reached.sort()
        first = np.flatnonzero(np.concatenate(([True], reached[1:] != reached[:-1])))
        nodes = reached[first]
        indegree[nodes] -= np.diff(np.append(first, reached.size))  # the edges into each
        frontier, r = nodes[indegree[nodes] == 0], r + 1
    return None if (layer < 0).any() else layer


def _unique_sorted(pred: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """The edges (given by their ends) :meth:`InstrDAG.build` keeps, sorted as :class:`InstrEdge`
    orders them (by ``pred``, then ``succ``), without self-loops and with the first of each pair of
    ends only: one stable sort of the ends as arrays, no comparison of dataclasses."""
    import numpy as np

    by_ends = np.lexsort((succ, pred))  # stable: the first of equal ends first
    pred, succ = pred[by_ends], succ[by_ends]
    keep = pred != succ
    keep[1:] &= (pred[1:] != pred[:-1]) | (succ[1:] != succ[:-1])
    return by_ends[keep]


@dataclass(frozen=True)
class InstrDAG:
    info: ProgramInfo
    instrs: tuple[Instr, ...]
    edges: tuple[InstrEdge, ...]
    order: tuple[int, ...]

    @classmethod
    def build(
        cls,
        info: ProgramInfo,
        instrs: Sequence[Instr],
        edges: Iterable[InstrEdge],
        rank_hint: Sequence[int] | np.ndarray,
    ) -> InstrDAG:
        """A DAG whose order is topological, following ``rank_hint`` (a position per instruction)
        wherever the edges allow."""
        edges = edges if isinstance(edges, Sequence) else tuple(edges)
        pred, succ = edge_ends(edges)
        kept = _unique_sorted(pred, succ)
        return cls._ordered(
            info, instrs, tuple(map(edges.__getitem__, kept.tolist())), (pred[kept], succ[kept]), rank_hint
        )

    @classmethod
    def from_ends(
        cls,
        info: ProgramInfo,
        instrs: Sequence[Instr],
        ends: tuple[np.ndarray, np.ndarray],
        kind: np.ndarray,
        rank_hint: Sequence[int] | np.ndarray,
    ) -> InstrDAG:
        """:meth:`build` of the edges ``InstrEdge(pred[k], succ[k], kind[k])`` (``ends``: the
        arrays ``pred`` and ``succ``; ``kind``: an object array): only the edges kept are made."""
        pred, succ = ends
        kept = _unique_sorted(pred, succ)
        pred, succ = pred[kept], succ[kept]
        edges = tuple(new_edges(pred.tolist(), succ.tolist(), kind[kept].tolist(), kept.size))
        return cls._ordered(info, instrs, edges, (pred, succ), rank_hint)

    @classmethod
    def _ordered(
        cls,
        info: ProgramInfo,
        instrs: Sequence[Instr],
        edges: tuple[InstrEdge, ...],
        ends: tuple[np.ndarray, np.ndarray],
        rank_hint: Sequence[int] | np.ndarray,
    ) -> InstrDAG:
        """The DAG of ``edges`` (unique, sorted; ``ends``: theirs) in the topological order that
        follows ``rank_hint``."""
        import numpy as np

        by_hint = np.argsort(np.asarray(rank_hint).reshape(len(instrs)), kind="stable")  # (hint, index)
        dag = cls(info, tuple(instrs), edges, prioritized_order(by_hint.tolist(), edges, ends=ends))
        dag.__dict__["ends"] = ends  # the cached property, known here
        return dag

    # -- structure -------------------------------------------------------------------------
    @cached_property
    def ends(self) -> tuple[np.ndarray, np.ndarray]:
        """Each edge's ``pred`` and ``succ`` (:func:`edge_ends`): what the structure below is
        computed from in bulk."""
        return edge_ends(self.edges)

    @cached_property
    def preds(self) -> tuple[tuple[InstrEdge, ...], ...]:
        return self._grouped(self.ends[1])

    @cached_property
    def succs(self) -> tuple[tuple[InstrEdge, ...], ...]:
        return self._grouped(self.ends[0])

    def _grouped(self, end: np.ndarray) -> tuple[tuple[InstrEdge, ...], ...]:
        """Per instruction, the edges whose ``end`` it is, in the order of ``edges``: slices of the
        edges sorted (stably) by that end."""
        import numpy as np

        n = len(self.instrs)
        by_end = np.argsort(end, kind="stable")
        edges = tuple(map(self.edges.__getitem__, by_end.tolist()))
        bounds = np.concatenate(([0], np.cumsum(np.bincount(end, minlength=n)))).tolist()
        return tuple(map(edges.__getitem__, map(slice, bounds[:-1], bounds[1:])))

    @cached_property
    def position(self) -> tuple[int, ...]:
        import numpy as np

        pos = np.empty(len(self.instrs), np.int64)
        pos[np.asarray(self.order, dtype=np.int64)] = np.arange(len(self.order))
        return tuple(pos.tolist())

    @cached_property
    def depth(self) -> tuple[int, ...]:
        """Longest path (in edges) from any source to each instruction."""
        pred, succ = self.ends
        layer = _layers(len(self.instrs), pred, succ)
        if layer is not None:
            return tuple(layer.tolist())
        depth = [0] * len(self.instrs)  # a cycle (a DAG built by hand): as the order has it
        for i in self.order:
            for e in self.preds[i]:
                depth[i] = max(depth[i], depth[e.pred] + 1)
        return tuple(depth)

    @cached_property
    def times(self) -> tuple[float, ...] | None:
        """When the timed schedule the program was lowered from runs each instruction: its own
        ``time``, else the latest of its predecessors' (0 for none); None if no instruction is timed."""
        own = list(map(_TIME, self.instrs))
        untimed = own.count(None)
        if untimed == len(own):
            return None
        if not untimed:  # every instruction timed (every program lowered from an Algorithm)
            return tuple(own)
        times = [0.0] * len(self.instrs)
        for i in self.order:
            times[i] = (
                own[i] if own[i] is not None else max((times[e.pred] for e in self.preds[i]), default=0.0)
            )
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
        pred, succ = self.ends
        layer = _layers(len(self.instrs), succ, pred)  # the reversed DAG's depth
        if layer is not None:
            return tuple(layer.tolist())
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
