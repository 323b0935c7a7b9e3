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

from typing import TYPE_CHECKING

from codegen.columns import TYPE_CODE, instr_columns
from codegen.instr_dag import Instr, InstrDAG, InstrEdge, new_edge
from codegen.ir import OpType
from codegen.rules import MAX_COUNT
from codegen.slotted import copies

if TYPE_CHECKING:
    import numpy as np

__all__ = ["aggregate_chunks"]

WINDOW = 0.02
"""Default time window of a run in a timed program, as a fraction of the schedule's span."""


def aggregate_chunks(dag: InstrDAG, max_count: int = MAX_COUNT, window: float = WINDOW) -> InstrDAG:
    """Merge same-height transfers (and local copies/reductions) of contiguous chunks, close in
    time in a timed program."""
    return Aggregation(dag, max_count).merged(window)


class Aggregation:
    """The runs :func:`aggregate_chunks` merges in ``dag``, at any window: the candidates are
    grouped once, and where two can never share a run, whatever the window, cut once
    (:func:`_kinds`); each window then only cuts its runs (:func:`_runs`). ``fit_xml_reader``
    asks what each window of its ladder leaves per rank (:meth:`steps`) and builds the merged DAG
    once, at the window it keeps (:meth:`merged`): the 128-rank ``synth trees`` allreduce built it
    at eight windows, 55 s of its 116 s compile under the profiler."""

    def __init__(self, dag: InstrDAG, max_count: int = MAX_COUNT) -> None:
        c = _Columns(dag)
        self.dag, self.max_count, self.rank = dag, max_count, c.rank
        self.kinds = _kinds(c, max_count, hold=dag.info.model_timed)

    def span(self, window: float) -> float:
        """``window`` in the schedule's time units (0 for an untimed program)."""
        times = self.dag.times
        return window * max(times, default=0.0) if times is not None else 0.0

    def steps(self, window: float) -> np.ndarray:
        """Each rank's instructions once merged over ``window`` (as ``np.bincount`` of the ranks)."""
        import numpy as np  # here, not at the top: building the CLI's parser loads every pass

        steps = np.bincount(self.rank)
        span = self.span(window)
        for kind in self.kinds:
            gone = kind.members[:, _joined(kind, *_runs(kind, span, self.max_count))]
            steps -= np.bincount(self.rank[gone.ravel()], minlength=steps.size)
        return steps

    def merged(self, window: float) -> InstrDAG:
        """The DAG with every run at ``window`` merged into its first member."""
        import numpy as np

        dag = self.dag
        head = np.arange(len(dag.instrs))
        firsts, counts, times = [], [], []
        span = self.span(window)
        for kind in self.kinds:
            lo, hi = _runs(kind, span, self.max_count)
            if not lo.size:
                continue
            joined = _joined(kind, lo, hi)
            first = np.maximum.accumulate(np.where(joined, 0, np.arange(joined.size)))  # each one's run's
            for row, column in enumerate(kind.members):
                head[column[joined]] = column[first[joined]]
                firsts.append(column[lo])
                total = np.concatenate(([0], np.cumsum(kind.count[column])))
                counts.append(total[hi] - total[lo])
                if kind.times is not None:
                    times.append(_latest(kind.times[row], lo, hi))
        if not firsts:
            return dag
        cat = np.concatenate
        return _rebuild(dag, head, cat(firsts), cat(counts), cat(times) if times else None)


class _Kind:
    """One kind of candidate (transfers, local ops) in the order :func:`_grouped` gives it, a
    member per column of ``members`` (a row per instruction of a member); per member, whether it
    may extend a run ending at the one before (``link``: same group, contiguous with it on both
    sides, within ``max_count`` with it), its count, and where timed (``times``: a row per
    instruction, as ``members``) the widest gap in time to the one before (``gap``); where
    transfers held by the Algorithm model may not share an op, when each holds its connection
    (``hold``: :meth:`InstrDAG.holds`, from its send's start to halfway to its arrival)."""

    def __init__(self, c: _Columns, members: np.ndarray, new: np.ndarray, max_count: int, hold: bool) -> None:
        import numpy as np

        a, b = members[:, :-1], members[:, 1:]  # each member with the next, column by column
        link = ~new[1:] & (c.count[a[0]] + c.count[b[0]] <= max_count) & _contiguous_at(c, a, b).all(axis=0)
        self.members, self.link = members, np.concatenate(([False], link, [False]))  # and after the last
        self.count = c.count
        self.times = self.gap = self.hold = None
        if c.times is not None:
            self.times = c.times[members]
            self.gap = np.concatenate(([0.0], np.abs(self.times[:, 1:] - self.times[:, :-1]).max(axis=0)))
            if hold and len(members) > 1:
                start = self.times[0]
                self.hold = start, (start + self.times[1]) / 2


def _kinds(c: _Columns, max_count: int, hold: bool) -> list[_Kind]:
    """Each kind of candidate (:func:`_grouped`), with where no window joins two members."""
    return [_Kind(c, members, new, max_count, hold) for members, new in _grouped(c)]


def _runs(kind: _Kind, span: float, max_count: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs of two members or more that ``kind``'s groups are cut into at ``span`` (in time
    units), each as its first member and the one after its last: from each group's first member,
    in the order of its chunks, a run takes the next member while it fits (:func:`_ends`) and
    else ends, and the next run starts there. Members no window of ``span`` joins to the one
    before (:class:`_Kind`, and a gap over ``span``) end a run anyway: cut there first, what is
    left are the stretches of two members or more (none at 512 ranks: a million candidates, not
    one tried)."""
    import numpy as np

    ok = kind.link if kind.gap is None else kind.link & np.append(kind.gap <= span, False)
    starts = np.flatnonzero(~ok[:-1] & ok[1:])  # of the stretches of two or more
    if not starts.size:
        return starts, starts
    end = _ends(kind, ok, span, max_count).tolist()
    ok_, lo, hi = ok.tolist(), [], []
    for p in starts.tolist():
        while True:
            q = end[p]
            if q - p > 1:
                lo.append(p)
                hi.append(q)
            if not ok_[q]:
                break
            p = q
    return np.asarray(lo, np.int64), np.asarray(hi, np.int64)


def _ends(kind: _Kind, ok: np.ndarray, span: float, max_count: int) -> np.ndarray:
    """Per member, the first member after it that a run starting at it cannot take (its own
    stretch's end at most): with it, the run holds over ``max_count`` chunks, or spans more than
    ``span`` in some column's times, or (``hold``) it holds its connection while a member of the
    run does. All runs grow at once, a member a round, as many rounds as the longest run has
    members. Member ``j`` meets the one ``d`` before it in round ``d``, after those nearer in the
    rounds before (the runs that reached ``j`` from there), so ``near[j]``, whether one of them
    overlaps ``j``, is whether a member of the run reaching ``j`` in this round does."""
    import numpy as np

    n = ok.size - 1
    end = np.arange(1, n + 1)  # a run of one member ends after it
    count = kind.count[kind.members[0]]
    total = count.copy()  # per run, by its first member: its chunks so far
    times = kind.times
    low, high = (None, None) if times is None else (times.copy(), times.copy())
    near = np.zeros(n, bool)
    at, d = np.flatnonzero(ok[1:]), 1  # the runs still growing
    while at.size:
        j = at + d
        inside = ok[j]  # in the run's stretch
        end[at[~inside]] = j[~inside]
        at, j = at[inside], j[inside]
        total[at] += count[j]
        fits = total[at] <= max_count
        if times is not None:
            low[:, at], high[:, at] = np.minimum(low[:, at], times[:, j]), np.maximum(high[:, at], times[:, j])
            fits &= (high[:, at] - low[:, at] <= span).all(axis=0)
        if kind.hold is not None:
            start, done = kind.hold
            near[j] |= (start[at] < done[j]) & (start[j] < done[at])
            fits &= ~near[j]
        end[at[~fits]] = j[~fits]
        at, d = at[fits], d + 1
    return end


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
    (:func:`codegen.columns.instr_columns`, shared with the later passes): a location as whether
    it is set, its buffer and its index; a hint as whether it is set and its value (no hint, and
    instance 0, where no instruction has one, nor an instance but the first)."""

    def __init__(self, dag: InstrDAG) -> None:
        import numpy as np

        n, c = len(dag.instrs), instr_columns(dag)
        self.rank, self.type, self.count = c.rank, c.type, c.count
        self.has_src, self.src_buffer, self.src_index = c.src
        self.has_dst, self.dst_buffer, self.dst_index = c.dst
        self.match = np.maximum(c.send_match, 0)  # 0 where none, as codegen.columns.optional
        if c.plain:  # a lowered Algorithm's: one pass
            self.instance, unset = np.zeros(n, np.int64), np.zeros(n, bool)
            self.tb_hint = self.channel_hint = unset, self.instance
        else:
            self.instance, self.tb_hint, self.channel_hint = c.instance, c.tb_hint, c.channel_hint
        self.height = np.asarray(dag.height, np.int64)
        self.times = None if dag.times is None else np.asarray(dag.times, np.float64)




def _grouped(c: _Columns) -> list[tuple[np.ndarray, np.ndarray]]:
    """Instructions that may merge: a send with its receive (``s`` + ``r`` or ``s`` + ``rrc``)
    between the same ranks and buffers, or a local ``cpy``/``re``, with the same hints, instance
    and height; each kind's members as an array of their columns (a row per instruction of a
    member), by group and within one in the order of its chunks (the first column's source index,
    then the member), and whether each member starts a group."""
    import numpy as np
    send = np.flatnonzero(c.type == TYPE_CODE[OpType.SEND])
    recv = c.match[send]
    received = np.isin(c.type[recv], [TYPE_CODE[OpType.RECV], TYPE_CODE[OpType.RECV_REDUCE_COPY]])
    send, recv = send[received], recv[received]
    offset = c.has_src[recv] & c.has_dst[recv]  # _offset(r.src, r.dst): None unless both are set
    transfers = [c.rank[send], c.rank[recv], c.type[recv], c.src_buffer[send], c.dst_buffer[recv], offset]
    shift = np.where(offset, c.src_index[recv] - c.dst_index[recv], 0)
    transfers += [np.where(offset, c.src_buffer[recv], 0), shift]
    transfers += [*_hints(c, send), *_hints(c, recv)[:2], c.height[send], c.height[recv]]
    local = np.flatnonzero(np.isin(c.type, [TYPE_CODE[OpType.COPY], TYPE_CODE[OpType.REDUCE]]))
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


def _joined(kind: _Kind, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per member of ``kind``, whether it joins a run of :func:`_runs` (every member but a first)."""
    import numpy as np

    mark = np.zeros(kind.members.shape[1] + 1, np.int64)
    mark[lo + 1], mark[hi] = 1, -1  # runs are apart: no first's next is another run's end
    return np.cumsum(mark[:-1]) > 0


def _latest(times: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The latest of ``times`` in each run (``lo`` to before ``hi``)."""
    import numpy as np

    return np.maximum.reduceat(np.append(times, 0.0), np.column_stack((lo, hi)).ravel())[::2]


def _rebuild(
    dag: InstrDAG, head: np.ndarray, firsts: np.ndarray, counts: np.ndarray, latest: np.ndarray | None
) -> InstrDAG:
    """The DAG with each instruction as its run's first member (``head``), each run's first
    (``firsts``) given its run's count and (timed) its latest time; matches, edges and positions
    mapped onto the members kept. Fields and edges are mapped as arrays, and only what changed is
    made anew (instructions are immutable: one whose index and matches stay is kept as it is, as
    is an edge between such): an ``evolve`` and an ``InstrEdge`` per instruction and per edge were
    most of this pass at 128 ranks, and few runs leave most indices as they were."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass

    n = len(dag.instrs)
    keep = head == np.arange(n)
    index = (np.cumsum(keep) - 1)[head]  # each instruction's new index: its run's first member's
    kept = np.flatnonzero(keep)
    instrs = list(map(dag.instrs.__getitem__, kept.tolist()))
    changed = index[kept] != kept
    c = instr_columns(dag)
    matches = [(m >= 0, np.maximum(m, 0)) for m in (c.send_match[kept], c.recv_match[kept])]
    for has, match in matches:
        changed |= has & (index[match] != match)
    changed[index[firsts]] = True
    _remap(instrs, np.flatnonzero(changed).tolist(), index, matches)
    # each run's first is among the changed: a copy made just now, so its count and time are set in place
    heads = [instrs[i] for i in index[firsts].tolist()]
    for ins, count in zip(heads, counts.tolist(), strict=True):
        object.__setattr__(ins, "count", count)
    if latest is not None:
        for ins, time in zip(heads, latest.tolist(), strict=True):
            object.__setattr__(ins, "time", time)
    first = np.full(kept.size, n, np.int64)
    np.minimum.at(first, index, np.asarray(dag.position, np.int64))
    return InstrDAG.build(dag.info, instrs, _edges(dag, index), first)


def _remap(
    instrs: list[Instr], changed: list[int], index: np.ndarray, matches: list[tuple[np.ndarray, np.ndarray]]
) -> None:
    """Replace each ``changed`` one of ``instrs`` by a copy with its matches (``send_match`` and
    ``recv_match``: whether set, and their values) renumbered by ``index``."""
    send, recv = (_renumbered(has, match, index, changed) for has, match in matches)
    renumbered = copies(list(map(instrs.__getitem__, changed)), send_match=send, recv_match=recv)
    for k, ins in zip(changed, renumbered, strict=True):
        instrs[k] = ins


def _renumbered(has: np.ndarray, value: np.ndarray, index: np.ndarray, at: list[int]) -> list[int | None]:
    """``index`` of each value ``at`` the places given that is set (None stays None)."""
    out = index[value[at]].tolist()
    for k in (~has[at]).nonzero()[0].tolist():
        out[k] = None
    return out


def _edges(dag: InstrDAG, index: np.ndarray) -> list[InstrEdge]:
    """``dag``'s edges between the new indices, sorted and unique as :meth:`InstrDAG.build` keeps
    them (no self-loop; of equal ends the first in ``dag.edges``, with its kind); an edge whose
    ends keep their indices is the same edge."""
    import numpy as np

    pred, succ = dag.ends
    by = np.lexsort((index[succ], index[pred]))  # stable: the first of equal ends first
    new_pred, new_succ = index[pred[by]], index[succ[by]]
    keep = new_pred != new_succ
    keep[1:] &= (new_pred[1:] != new_pred[:-1]) | (new_succ[1:] != new_succ[:-1])
    by, new_pred, new_succ = by[keep], new_pred[keep], new_succ[keep]
    edges = list(map(dag.edges.__getitem__, by.tolist()))
    moved = np.flatnonzero((new_pred != pred[by]) | (new_succ != succ[by]))
    for k, p, s in zip(moved.tolist(), new_pred[moved].tolist(), new_succ[moved].tolist(), strict=True):
        edges[k] = new_edge(p, s, edges[k].kind)
    return edges
