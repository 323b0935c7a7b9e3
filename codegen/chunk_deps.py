"""The chunk DAG in bulk, in NumPy, for the programs lowering makes.

:func:`recorded_dag` makes the DAG of what a :class:`~codegen.dsl.ChunkProgram` recorded: one
:class:`~codegen.chunk_dag.Loc` per slot and the ops, each made from columns
(:func:`codegen.slotted.made_all`), no Python call per op (half a million at 512 ranks).

:func:`codegen.chunk_dag.build_chunk_dag` walks the ops in order, keeping per slot its last writer
and the readers since. Where every op moves one chunk and no buffer is aliased (an out-of-place
lowered Algorithm: 262,144 ops of an allgather at 512 ranks, twice that for an allreduce) each op
touches at most three slots, and the same edges follow from sorting the ops' slot accesses by
slot: a read waits for the write before it (RAW), a write for the write before it (WAW) and every
read since that one (WAR, found from each read as the next write after it). :func:`plain_deps`
gives the edges that function gives, in its order, each with the first reason it finds.
"""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import eq, is_, is_not
from typing import TYPE_CHECKING

from codegen.chunk_dag import ChunkDAG, ChunkDep, ChunkOp, DepKind, Loc, ProgramInfo, Side, build_chunk_dag
from codegen.ir import Buffer
from codegen.slotted import made_all

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["plain_deps", "recorded_dag"]

_SIDES = (Side.DST, Side.SRC)  # by code: the order the sides' names sort in ("dst" < "src")
_KINDS = (DepKind.RAW, DepKind.RAW, DepKind.WAR, DepKind.WAW)  # by reason, in the order found
_NAMED = {"input": Buffer.INPUT, "output": Buffer.OUTPUT}  # any other buffer name: a scratch slice


def recorded_dag(info: ProgramInfo, ops: Sequence[tuple], offsets: Sequence[dict[str, int]]) -> ChunkDAG:
    """The chunk DAG of the ops a program recorded (``codegen.dsl_ops.Op`` tuples: ``kind, src,
    dst, count, operand, sendtb, recvtb, channel, time``, slots as ``(rank, buffer name, index)``),
    each rank's named scratch slices packed at ``offsets``. The dependencies of ops of one chunk
    each without aliased buffers (every lowered Algorithm out of place) are found by
    :func:`plain_deps`, the others by :func:`~codegen.chunk_dag.build_chunk_dag`."""
    n = len(ops)
    if not n:
        return ChunkDAG(info, (), ())
    kind, src, dst, count, operand, sendtb, recvtb, channel, time = zip(*ops, strict=True)
    has = list(map(is_not, operand, repeat(None)))
    given = list(compress(operand, has))
    slots = list(dict.fromkeys(chain(src, dst, given)))  # each slot once
    locs = _locs(slots, offsets)
    number = dict(zip(slots, range(len(slots)), strict=True)).__getitem__
    src_id, dst_id, given_id = list(map(number, src)), list(map(number, dst)), list(map(number, given))
    loc = locs.__getitem__
    operand_loc = [None] * n
    for k, j in zip(compress(range(n), has), given_id, strict=True):
        operand_loc[k] = loc(j)
    columns = {"kind": kind, "src": map(loc, src_id), "dst": map(loc, dst_id), "count": count}
    columns |= {"operand": operand_loc, "sendtb": sendtb, "recvtb": recvtb, "channel": channel}
    made = tuple(made_all(ChunkOp, n, columns | {"instance": repeat(0, n), "time": time}))
    if count.count(1) < n or (info.inplace and any(info.aliases)):
        return build_chunk_dag(info, made)
    reduces = list(map(eq, kind, repeat("reduce")))
    # the slot each op reads on its destination side: a reduce's operand (dst where not given)
    read = [j if r else -1 for j, r in zip(dst_id, reduces, strict=True)]
    for k, j in zip(compress(range(n), has), given_id, strict=True):
        if reduces[k]:
            read[k] = j
    return ChunkDAG(info, made, plain_deps(src_id, dst_id, read))


def _locs(slots: list[tuple[int, str, int]], offsets: Sequence[dict[str, int]]) -> list[Loc]:
    """The :class:`Loc` of each slot: a scratch slice's index at its offset in the scratch buffer."""
    ranks, names, indexes = (list(column) for column in zip(*slots, strict=True))
    buffers = list(map(_NAMED.get, names))
    for k in compress(range(len(slots)), map(is_, buffers, repeat(None))):
        buffers[k] = Buffer.SCRATCH
        indexes[k] += offsets[ranks[k]][names[k]]
    return made_all(Loc, len(slots), {"rank": ranks, "buffer": buffers, "index": indexes})


def plain_deps(src: Sequence[int], dst: Sequence[int], operand: Sequence[int]) -> tuple[ChunkDep, ...]:
    """The dependencies of ops of one chunk each, given per op the ids of the slots it reads
    (``src``; ``operand``: a reduce's local operand, -1 for a copy) and writes (``dst``)."""
    import numpy as np

    n = len(src)
    if n == 0:
        return ()
    ops = np.repeat(np.arange(n, dtype=np.int64), 3)
    slots = np.stack([np.asarray(src), np.asarray(operand), np.asarray(dst)], axis=1).astype(np.int64).ravel()
    what = np.tile(np.array([0, 1, 2], np.int64), n)  # 0: read (src side), 1: read (dst side), 2: write
    keep = slots >= 0
    ops, slots, what = ops[keep], slots[keep], what[keep]
    by_slot = np.argsort(slots, kind="stable")  # each slot's accesses in program order
    ops, slots, what = ops[by_slot], slots[by_slot], what[by_slot]
    edges = _edges(ops, slots, what)
    pred, succ, pred_side, succ_side, reason = (np.concatenate(column) for column in zip(*edges, strict=True))
    key = ((pred * n + succ) * 2 + pred_side) * 2 + succ_side
    order = np.lexsort((reason, key))  # by key, and each key's first reason first
    first = np.ones(len(order), bool)
    first[1:] = key[order][1:] != key[order][:-1]
    kept = order[first]
    columns = (pred[kept], succ[kept], pred_side[kept], succ_side[kept], reason[kept])
    p, s, a, b, k = (c.tolist() for c in columns)
    side, kind = _SIDES.__getitem__, _KINDS.__getitem__
    columns = {
        "pred": p,
        "succ": s,
        "pred_side": map(side, a),
        "succ_side": map(side, b),
        "kind": map(kind, k),
    }
    return tuple(made_all(ChunkDep, len(p), columns))


def _edges(ops, slots, what) -> list[tuple]:
    """``(pred, succ, pred_side, succ_side, reason)`` arrays of the RAW, WAW and WAR edges of the
    accesses ``ops``/``slots``/``what``, sorted by slot and, within a slot, in program order."""
    import numpy as np

    m = len(ops)  # at least 2: every op reads one slot and writes one
    pos = np.arange(m, dtype=np.int64)
    start = np.r_[True, slots[1:] != slots[:-1]]  # the first access of each slot
    seg_start = np.maximum.accumulate(np.where(start, pos, 0))
    seg_end = np.minimum.accumulate(np.where(np.r_[start[1:], True], pos, m)[::-1])[::-1]
    writes = what == 2
    before = np.r_[-1, np.maximum.accumulate(np.where(writes, pos, -1))[:-1]]  # the write before each access
    before = np.where(before >= seg_start, before, -1)  # ... of the same slot
    after = np.r_[np.minimum.accumulate(np.where(writes, pos, m)[::-1])[::-1][1:], m]  # the write after it
    after = np.where(after <= seg_end, after, m)
    side = np.where(what == 0, 1, 0)  # a read's side: src (1) for the source, dst (0) for an operand
    found = []
    raw = ~writes & (before >= 0)
    raw &= ops[np.where(raw, before, 0)] != ops
    found.append((ops[before[raw]], ops[raw], np.zeros(int(raw.sum()), np.int64), side[raw], what[raw]))
    war = ~writes & (after < m)
    war &= ops[np.where(war, after, 0)] != ops
    found.append(
        (ops[war], ops[after[war]], side[war], np.zeros(int(war.sum()), np.int64), np.full(int(war.sum()), 2))
    )
    waw = writes & (before >= 0)
    waw &= ops[np.where(waw, before, 0)] != ops
    zeros = np.zeros(int(waw.sum()), np.int64)
    found.append((ops[before[waw]], ops[waw], zeros, zeros, np.full(int(waw.sum()), 3)))
    return found
