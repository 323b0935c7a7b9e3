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

from collections import defaultdict

from codegen.instr_dag import Instr, InstrDAG, InstrEdge
from codegen.ir import OpType, Ref, evolve
from codegen.rules import MAX_COUNT

__all__ = ["aggregate_chunks"]

WINDOW = 0.02
"""Default time window of a run in a timed program, as a fraction of the schedule's span."""


def _contiguous(a: Ref | None, count: int, b: Ref | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.buffer is b.buffer and a.index + count == b.index


def _offset(ref: Ref | None, base: Ref | None) -> tuple | None:
    """How ``ref`` sits relative to ``base`` (its lockstep partner), for grouping."""
    if ref is None or base is None:
        return None
    return (ref.buffer, ref.index - base.index)


def aggregate_chunks(dag: InstrDAG, max_count: int = MAX_COUNT, window: float = WINDOW) -> InstrDAG:
    """Merge same-height transfers (and local copies/reductions) of contiguous chunks, close in
    time in a timed program."""
    merged_into: dict[int, int] = {}  # member -> the run's first member (same position in the tuple)
    counts: dict[int, int] = {}
    span = window * max(dag.times, default=0.0) if dag.times is not None else 0.0
    for members in _candidates(dag).values():
        if len(members) > 1:
            _merge_runs(dag, members, max_count, span, merged_into, counts)
    if not merged_into:
        return dag
    return _rebuild(dag, merged_into, counts)


def _candidates(dag: InstrDAG) -> dict[tuple, list[tuple[int, ...]]]:
    """Instructions that may merge, grouped: a send with its receive (``s`` + ``r`` or ``s`` +
    ``rrc``) between the same ranks and buffers, or a local ``cpy``/``re``, with the same hints,
    instance and height."""
    instrs, height = dag.instrs, dag.height
    groups: dict[tuple, list[tuple[int, ...]]] = defaultdict(list)
    for i, ins in enumerate(instrs):
        if ins.type is OpType.SEND:
            r = instrs[ins.send_match]
            if r.type not in (OpType.RECV, OpType.RECV_REDUCE_COPY):
                continue
            ends = (ins.rank, r.rank, r.type, ins.src.buffer, r.dst.buffer, _offset(r.src, r.dst))
            hints = (ins.tb_hint, r.tb_hint, ins.channel_hint, ins.instance)
            groups[("transfer", *ends, *hints, height[i], height[ins.send_match])].append((i, ins.send_match))
        elif ins.type in (OpType.COPY, OpType.REDUCE):
            ends = (ins.rank, ins.type, ins.src.buffer, ins.dst.buffer)
            hints = (ins.tb_hint, ins.channel_hint, ins.instance)
            groups[("local", *ends, *hints, height[i])].append((i,))
    return groups


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
    positions mapped onto the members kept."""
    instrs, times = dag.instrs, dag.times
    new_index: dict[int, int] = {}
    kept: list[int] = []
    for i in range(len(instrs)):
        if merged_into.get(i, i) == i:
            new_index[i] = len(kept)
            kept.append(i)
    for i, head in merged_into.items():
        new_index[i] = new_index[head]

    def remap(x: int | None) -> int | None:
        return None if x is None else new_index[x]

    latest: dict[int, float] = {}
    if times is not None:
        for i, head in merged_into.items():
            latest[head] = max(latest.get(head, times[head]), times[i])
    new_instrs = [
        evolve(
            instrs[i],
            count=counts.get(i, instrs[i].count),
            time=latest.get(i, instrs[i].time),
            send_match=remap(instrs[i].send_match),
            recv_match=remap(instrs[i].recv_match),
        )
        for i in kept
    ]
    edges = [InstrEdge(new_index[e.pred], new_index[e.succ], e.kind) for e in dag.edges]
    first = [len(instrs)] * len(kept)
    for i, p in enumerate(dag.position):
        first[new_index[i]] = min(first[new_index[i]], p)
    return InstrDAG.build(dag.info, new_instrs, edges, first)


def _close(run: list[tuple[int, ...]], instrs: tuple[Instr, ...], merged_into: dict, counts: dict) -> None:
    if len(run) < 2:
        return
    for column in zip(*run, strict=True):
        head = column[0]
        counts[head] = sum(instrs[x].count for x in column)
        for x in column[1:]:
            merged_into[x] = head
