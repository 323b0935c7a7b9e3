"""Aggregate transfers of contiguous chunks into one op with ``cnt > 1`` (instruction DAG -> itself).

Candidates are sends with their receives (``s`` + ``r`` or ``s`` + ``rrc``) between the same two
ranks, and local ``cpy``/``re``, whose chunks are contiguous on both sides and whose hints agree.
Only instructions with the same critical-path height are merged: every edge strictly lowers the
height, so merging instructions of equal height can never close a cycle, and instructions that
could run at the same time are the ones merged. Runs before fusion, on ``s r rrc cpy re`` only.

A program lowered from a timed schedule (``InstrDAG.times``) says when they run: there, equal
height is not enough (the pieces a synthesizer split a chunk into to pipeline it have one height
but follow each other over the link), so a run also keeps every column's times within ``window``
(a fraction of the schedule's span) of each other. A merged op starts when its last piece is ready
and its receiver sees no piece before the last has landed, so a wider run costs every hop after
it the run's length; ``window`` bounds that cost. Where the times are the Algorithm model's
(``ProgramInfo.model_timed``), transfers it runs side by side (``InstrDAG.overlap``: over a
connection of several links) are not merged either: one op moves its chunks one after the other on
one threadblock, while apart they can take a channel each. (A MILP's times are not the model's:
its pieces that start together on a link are merged, as before.) The merged
instruction takes the run's latest time.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from codegen.columns import ints, optional, refs
from codegen.instr_dag import Instr, InstrDAG, new_edge
from codegen.ir import OpType, Ref, made
from codegen.rules import MAX_COUNT

if TYPE_CHECKING:
    import numpy as np

__all__ = ["aggregate_chunks"]

WINDOW = 0.02
"""Default time window of a run in a timed program, as a fraction of the schedule's span."""


def _contiguous(a: Ref | None, count: int, b: Ref | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.buffer is b.buffer and a.index + count == b.index


def aggregate_chunks(dag: InstrDAG, max_count: int = MAX_COUNT, window: float = WINDOW) -> InstrDAG:
    """Merge same-height transfers (and local copies/reductions) of contiguous chunks, close in
    time in a timed program."""
    merged_into: dict[int, int] = {}  # member -> the run's first member (same position in the tuple)
    counts: dict[int, int] = {}
    span = window * max(dag.times, default=0.0) if dag.times is not None else 0.0
    for members in _chains(dag, max_count, span):
        _merge_runs(dag, members, max_count, span, merged_into, counts)
    if not merged_into:
        return dag
    return _rebuild(dag, merged_into, counts)


def _chains(dag: InstrDAG, max_count: int, span: float) -> list[list[tuple[int, ...]]]:
    """The candidates that may merge (:func:`_grouped`), each group in the order of its chunks,
    cut between two members where the second cannot extend a run ending at the first: not
    contiguous with it on both sides, over ``max_count`` with it, or (timed) further than ``span``
    from it in time. :func:`_merge_runs` ends a run there anyway (a run's last member is the member
    before), so cutting there changes nothing; left are the stretches of two members or more
    (none at 512 ranks: a million candidates, not one tried)."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass
    c = _Columns(dag)
    out = []
    for members, new in _grouped(c):
        a, b = members[:, :-1], members[:, 1:]  # each member with the next, column by column
        ok = ~new[1:] & (c.count[a[0]] + c.count[b[0]] <= max_count) & _contiguous_at(c, a, b).all(axis=0)
        if c.times is not None:
            ok &= (np.abs(c.times[a] - c.times[b]) <= span).all(axis=0)
        starts = np.flatnonzero(np.concatenate(([True], ~ok, [True])))  # of stretches, and the end
        long = np.flatnonzero(np.diff(starts) > 1)
        for lo, hi in zip(starts[long].tolist(), starts[long + 1].tolist(), strict=True):
            out.append(list(map(tuple, members[:, lo:hi].T.tolist())))
    return out


def _contiguous_at(c: _Columns, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`_contiguous` of instructions ``a`` and ``b`` (arrays of equal shape) on both sides."""
    import numpy as np
    out = np.ones(a.shape, bool)
    sides = ((c.has_src, c.src_buffer, c.src_index), (c.has_dst, c.dst_buffer, c.dst_index))
    for has, buffer, index in sides:
        both = has[a] & has[b]
        joined = (buffer[a] == buffer[b]) & (index[a] + c.count[a] == index[b])
        out &= (both & joined) | (~has[a] & ~has[b])
    return out


class _Columns:
    """The fields of ``dag``'s instructions that aggregation reads, as arrays
    (:mod:`codegen.columns`): a location as whether it is set, its buffer and its index; a hint as
    whether it is set and its value."""

    def __init__(self, dag: InstrDAG) -> None:
        import numpy as np
        instrs = dag.instrs
        n = len(instrs)
        self.rank = ints(map(_RANK, instrs), n)
        self.type = ints(map(_TYPE_CODE.__getitem__, map(_TYPE, instrs)), n)
        self.count = ints(map(_COUNT, instrs), n)
        self.instance = ints(map(_INSTANCE, instrs), n)
        self.has_src, self.src_buffer, self.src_index = refs(list(map(_SRC, instrs)))
        self.has_dst, self.dst_buffer, self.dst_index = refs(list(map(_DST, instrs)))
        self.match = optional(list(map(_SEND_MATCH, instrs)))[1]
        self.tb_hint = optional(list(map(_TB_HINT, instrs)))
        self.channel_hint = optional(list(map(_CHANNEL_HINT, instrs)))
        self.height = np.asarray(dag.height, np.int64)
        self.times = None if dag.times is None else np.asarray(dag.times, np.float64)


_RANK, _TYPE, _COUNT, _INSTANCE = map(attrgetter, ("rank", "type", "count", "instance"))
_SRC, _DST, _SEND_MATCH = map(attrgetter, ("src", "dst", "send_match"))
_TB_HINT, _CHANNEL_HINT = map(attrgetter, ("tb_hint", "channel_hint"))
_TYPE_CODE = {t: k for k, t in enumerate(OpType)}


def _grouped(c: _Columns) -> list[tuple[np.ndarray, np.ndarray]]:
    """Instructions that may merge: a send with its receive (``s`` + ``r`` or ``s`` + ``rrc``)
    between the same ranks and buffers, or a local ``cpy``/``re``, with the same hints, instance
    and height; each kind's members as an array of their columns (a row per instruction of a
    member), by group and within one in the order of its chunks (the first column's source index,
    then the member), and whether each member starts a group."""
    import numpy as np
    send = np.flatnonzero(c.type == _TYPE_CODE[OpType.SEND])
    recv = c.match[send]
    received = np.isin(c.type[recv], [_TYPE_CODE[OpType.RECV], _TYPE_CODE[OpType.RECV_REDUCE_COPY]])
    send, recv = send[received], recv[received]
    offset = c.has_src[recv] & c.has_dst[recv]  # _offset(r.src, r.dst): None unless both are set
    transfers = [c.rank[send], c.rank[recv], c.type[recv], c.src_buffer[send], c.dst_buffer[recv], offset]
    shift = np.where(offset, c.src_index[recv] - c.dst_index[recv], 0)
    transfers += [np.where(offset, c.src_buffer[recv], 0), shift]
    transfers += [*_hints(c, send), *_hints(c, recv)[:2], c.height[send], c.height[recv]]
    local = np.flatnonzero(np.isin(c.type, [_TYPE_CODE[OpType.COPY], _TYPE_CODE[OpType.REDUCE]]))
    locals_ = [c.rank[local], c.type[local], c.src_buffer[local], c.dst_buffer[local], *_hints(c, local)]
    locals_.append(c.height[local])
    members = (np.stack([send, recv]), local[np.newaxis])
    return [_sorted(m, key, c) for m, key in zip(members, (transfers, locals_), strict=True) if m.shape[1]]


def _hints(c: _Columns, i: np.ndarray) -> list[np.ndarray]:
    """Instruction ``i``'s threadblock hint (set, value), channel hint (set, value), instance."""
    return [c.tb_hint[0][i], c.tb_hint[1][i], c.channel_hint[0][i], c.channel_hint[1][i], c.instance[i]]


def _sorted(members: np.ndarray, key: list[np.ndarray], c: _Columns) -> tuple[np.ndarray, np.ndarray]:
    """``members`` (a column per member) sorted by the ``key`` columns, then by the first column's
    source index and the member (its first instruction: distinct), and where a new key starts."""
    import numpy as np
    first = members[0]
    by = np.lexsort((first, c.src_index[first], *reversed(key)))
    new = np.zeros(len(by), bool)
    new[0] = True
    for k in key:
        k = k[by]
        new[1:] |= k[1:] != k[:-1]
    return members[:, by], new


def _merge_runs(
    dag: InstrDAG, members: list[tuple[int, ...]], max_count: int, span: float, merged_into: dict, counts: dict
) -> None:
    """Cut one group, in the order of its chunks, into runs that fit (:func:`_fits`: ``span`` is the
    window in time units, computed once per DAG) and merge each."""
    instrs = dag.instrs
    members.sort(key=lambda m: (instrs[m[0]].src.index, m))
    run = [members[0]]
    for m in members[1:]:
        if _fits(dag, run, m, max_count, span):
            run.append(m)
            continue
        _close(run, instrs, merged_into, counts)
        run = [m]
    _close(run, instrs, merged_into, counts)


def _fits(dag: InstrDAG, run: list[tuple[int, ...]], m: tuple[int, ...], max_count: int, span: float) -> bool:
    """Whether ``m`` extends ``run``: within the count limit, contiguous with its last member on
    both sides, and in a timed program within ``span`` of it in time and (where the times are the
    Algorithm model's) not run side by side with it."""
    instrs, times = dag.instrs, dag.times
    last = run[-1]
    total = sum(instrs[x[0]].count for x in run)
    fits = total + instrs[m[0]].count <= max_count and all(
        _contiguous(instrs[a].src, instrs[a].count, instrs[b].src)
        and _contiguous(instrs[a].dst, instrs[a].count, instrs[b].dst)
        for a, b in zip(last, m, strict=True)
    )
    if not fits or times is None:
        return fits
    close = all(
        max(times[x[c]] for x in (*run, m)) - min(times[x[c]] for x in (*run, m)) <= span for c in range(len(m))
    )
    apart = len(m) == 1 or not dag.info.model_timed or not any(dag.overlap(x[0], m[0]) for x in run)
    return close and apart


def _rebuild(dag: InstrDAG, merged_into: dict[int, int], counts: dict[int, int]) -> InstrDAG:
    """The DAG with every run as its first member (the run's count and latest time), edges and
    positions mapped onto the members kept (indices mapped as arrays; each kept instruction
    copied once, its changed fields set in its copy: ``evolve`` with keywords per instruction,
    and an ``InstrEdge.__init__`` per edge, were most of this pass at 128 ranks)."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass

    instrs, times = dag.instrs, dag.times
    head = np.arange(len(instrs))
    head[np.fromiter(merged_into, np.int64, len(merged_into))] = np.fromiter(
        merged_into.values(), np.int64, len(merged_into)
    )
    keep = head == np.arange(len(instrs))
    kept = np.flatnonzero(keep).tolist()
    index = (np.cumsum(keep) - 1)[head]  # each instruction's new index: its run's first member's
    latest: dict[int, float] = {}
    if times is not None:
        for i, first in merged_into.items():
            latest[first] = max(latest.get(first, times[first]), times[i])
    new_index = index.tolist()
    new_instrs = [_remapped(instrs[i], counts.get(i), latest.get(i), new_index) for i in kept]
    edges = [new_edge(new_index[e.pred], new_index[e.succ], e.kind) for e in dag.edges]
    first = np.full(len(kept), len(instrs), np.int64)
    np.minimum.at(first, index, np.asarray(dag.position, np.int64))
    return InstrDAG.build(dag.info, new_instrs, edges, first)



def _remapped(ins: Instr, count: int | None, time: float | None, new_index: list[int]) -> Instr:
    """``evolve(ins, ...)`` with its count and time where given and its matches renumbered."""
    fields = dict(ins.__dict__)
    if count is not None:
        fields["count"] = count
    if time is not None:
        fields["time"] = time
    if fields["send_match"] is not None:
        fields["send_match"] = new_index[fields["send_match"]]
    if fields["recv_match"] is not None:
        fields["recv_match"] = new_index[fields["recv_match"]]
    return made(Instr, fields)


def _close(run: list[tuple[int, ...]], instrs: tuple[Instr, ...], merged_into: dict, counts: dict) -> None:
    if len(run) < 2:
        return
    for column in zip(*run, strict=True):
        head = column[0]
        counts[head] = sum(instrs[x].count for x in column)
        for x in column[1:]:
            merged_into[x] = head
