"""Turn the scheduled DAG into the IR, with dependencies between threadblocks (scheduled DAG -> IR).

An op waits for each predecessor on its rank that runs in another threadblock. Waits already
implied are dropped: by program order (an earlier op of the same threadblock waited for as much or
more) or through another wait (the op it waits for itself waited, directly or not, for the same
step). Each op keeps a vector clock, per threadblock the last step known complete, to decide; an
op with no predecessor to wait for has the clock of the last op before it in its threadblock that
has one, so only those (a fifth of a 512-rank alltoall's million) are visited one by one, and where
each instruction sits is found by NumPy over all threadblocks at once. A rank's clocks are rows of
one NumPy table, merged in C. The instructions written alike share one ``Op`` object.
The IR may hold several dependencies per op; ``fold_deps_into_nops`` makes it one.
"""

from __future__ import annotations

import itertools
from itertools import islice, repeat
from operator import attrgetter

from codegen.chunk_dag import DepKind
from codegen.errors import CodegenError
from codegen.instr_dag import InstrDAG
from codegen.ir import IR, Dep, Gpu, Op, OpType, Threadblock, evolve
from codegen.schedule import ScheduledDAG
from common.memo import SameObjects

__all__ = ["awaited", "insert_dependencies"]


def insert_dependencies(sched: ScheduledDAG) -> IR:
    """Build the IR; each op depends on the last needed step of every other threadblock."""
    dag = sched.dag
    info = dag.info
    laid = _laid_out(sched)  # the instructions of all threadblocks end to end, their sizes
    ops = _ops(sched, laid[0], _waits(sched, laid))
    bounds = [0, *itertools.accumulate(laid[1].tolist())]
    each = (tuple(ops[a:b]) for a, b in itertools.pairwise(bounds))  # threadblock by threadblock
    gpus = []
    for rank, plans in enumerate(sched.threadblocks):
        tbs = tuple(Threadblock(t, plan.send, plan.recv, plan.channel, next(each)) for t, plan in enumerate(plans))
        gpus.append(Gpu(rank, info.input_chunks, info.output_chunks, info.scratch_chunks[rank], tbs))
    return IR(
        name=info.name,
        collective=info.collective,
        num_ranks=info.num_ranks,
        nchunksperloop=info.nchunksperloop,
        gpus=tuple(gpus),
        protocol=info.protocol,
        inplace=info.inplace,
        outofplace=not info.inplace,
        root=info.root,
    )


_SAME_DAG = SameObjects()
"""Per DAG what every IR built from it reads (the compiler builds one for each width and layout it
tries): each instruction's op without dependencies (ops are frozen, so the IRs share those that
wait for none), the predecessors each may wait for, and which have any, in order."""


def _ops(sched: ScheduledDAG, run, waits: dict[int, tuple[Dep, ...]]) -> list[Op]:
    """The op of each instruction of ``run`` (the threadblocks laid end to end), with its
    dependencies, in that order. Ops are frozen: one object serves every instruction written alike
    (a few thousand for the million instructions of a 512-rank schedule, where an op each took
    seconds to make, and again in every pass and check after this one), those that wait for none
    shared by every IR of the DAG."""
    ops = list(_SAME_DAG.get([sched.dag], "ops", lambda: _bare_ops(sched.dag)))
    alike: dict[tuple[int, int], Op] = {}  # by the ids of the op without them and of the dependencies
    for i, deps in waits.items():
        key = (id(ops[i]), id(deps))
        op = alike.get(key)
        if op is None:
            op = alike[key] = evolve(ops[i], deps=deps)
        ops[i] = op
    return list(map(ops.__getitem__, run.tolist()))


def _bare_ops(dag: InstrDAG) -> list[Op]:
    """Per instruction its op with no dependencies, one object for the instructions written alike
    (by type, count and the ids of their operands, which the instructions hold alive)."""
    instrs = dag.instrs
    plain = Op(OpType.NOP)  # each a copy of it with its fields (a frozen __init__ per op was slower)
    srcs, dsts = map(_SRC, instrs), map(_DST, instrs)
    keys = list(zip(map(_TYPE, instrs), map(id, srcs), map(id, dsts), map(_COUNT, instrs), strict=True))
    alike = {  # the keys made and the ops looked up in C, one op made per distinct key
        key: evolve(plain, type=ins.type, src=ins.src, dst=ins.dst, count=ins.count)
        for key, ins in dict(zip(keys, instrs, strict=True)).items()
    }
    return list(map(alike.__getitem__, keys))


def _waits(sched: ScheduledDAG, laid: tuple) -> dict[int, tuple[Dep, ...]]:
    """The instructions that wait for some other threadblock, and their dependencies: the last step
    each needs of another threadblock, less those implied by its threadblock's earlier waits or
    through another of its waits (``laid``: :func:`_laid_out`). Rank by rank: an instruction waits
    only for others on its rank."""
    dag = sched.dag
    preds = _SAME_DAG.get([dag], "preds", lambda: _preds(dag))
    has_waits = _SAME_DAG.get([dag], "waits", lambda: _has_waits(preds))
    by_rank = _SAME_DAG.get([dag], "waiting", lambda: _waiting(dag, has_waits))
    layout = _layout(sched, laid, has_waits)
    row_of = [0] * (len(dag.instrs) + 1)  # per instruction its clock's row on its rank; [-1]: none's
    deps: dict[int, tuple[Dep, ...]] = {}
    made: dict[tuple, tuple[Dep, ...]] = {}  # one tuple per list of waits: they are frozen (see _ops)
    for rank, waiting in by_rank:
        width = len(sched.threadblocks[rank])
        for i, kept in _rank_waits(waiting, width, preds, layout, row_of):
            found = made.get(kept)
            if found is None:
                found = made[kept] = tuple(Dep(*d) for d in kept)
            deps[i] = found
    return deps


def _rank_waits(waiting: list[int], width: int, preds, layout: tuple, row_of: list[int]):
    """Per instruction of ``waiting`` (one rank's, in order) that keeps a wait, its waits as
    sorted (threadblock, step) pairs. Each keeps a vector clock, per threadblock of the rank the
    last step known complete (-1: none; its own threadblock's entry is stale, never read): a row of
    a table, ``row_of`` per instruction (row 0 knows nothing), shared with the op before it in its
    threadblock where it keeps no new wait. Clocks merge by NumPy (as dicts merged in Python they
    were most of a 512-rank allreduce's compile tail: 22 s of 38), on row views made once per
    table; single entries are read and written through a ``memoryview`` as Python ints (a NumPy
    scalar and a view per access were most of this loop)."""
    import numpy as np

    tb_of, step_of, anchor, prior = layout
    table = np.full((len(waiting) + 1, width), -1, dtype=np.int32)
    clocks, known, maximum = list(table), memoryview(table), np.maximum
    rows = 1
    for i in waiting:
        b = row_of[prior[i]]
        ps = preds[i]
        if len(ps) == 1:  # most instructions: as below, without the lists and the dict of _wanted
            p = ps[0]
            t, s = tb_of[p], step_of[p]
            if t == tb_of[i] or known[b, t] >= s:
                row_of[i] = b
                continue
            maximum(clocks[b], clocks[row_of[anchor[p]]], out=clocks[rows])
            if known[rows, t] < s:
                known[rows, t] = s
            row_of[i] = rows
            rows += 1
            yield i, ((t, s),)
            continue
        needed = [(t, s, p) for t, (s, p) in _wanted(tb_of[i], ps, tb_of, step_of).items() if known[b, t] < s]
        if not needed:
            row_of[i] = b
            continue
        if len(needed) > 1:
            needed = [
                (t, s, p)
                for t, s, p in needed
                if not any(known[row_of[anchor[q]], t] >= s for u, _, q in needed if u != t)
            ]
            if not needed:  # each implied by another (none in a DAG): as the clock before
                row_of[i] = b
                yield i, ()
                continue
        base = clocks[b]
        for _, _, p in needed:
            maximum(base, clocks[row_of[anchor[p]]], out=clocks[rows])
            base = clocks[rows]
        for t, s, _ in needed:
            if known[rows, t] < s:
                known[rows, t] = s
        row_of[i] = rows
        rows += 1
        yield i, tuple(sorted((t, s) for t, s, _ in needed))


def _wanted(tb: int, preds: tuple[int, ...], tb_of: list[int], step_of: list[int]) -> dict[int, tuple[int, int]]:
    """Per other threadblock than ``tb`` holding some of ``preds``: the last step of it they need,
    and that instruction."""
    wanted: dict[int, tuple[int, int]] = {}
    for p in preds:
        t = tb_of[p]
        if t != tb:
            s = step_of[p]
            if t not in wanted or wanted[t][0] < s:
                wanted[t] = (s, p)
    return wanted


def _waiting(dag: InstrDAG, has_waits) -> list[tuple[int, list[int]]]:
    """Per rank with instructions that have predecessors to wait for (``has_waits``: per
    instruction, :func:`_has_waits`), those in the DAG's order: picked and grouped by rank by NumPy
    (a million instructions at 512 ranks)."""
    import numpy as np

    order = np.asarray(dag.order, dtype=np.int64).reshape(len(dag.order))
    picked = order[has_waits[order]]
    ranks = _ranks(dag)[picked]
    by_rank = np.argsort(ranks, kind="stable")  # each rank's in the DAG's order
    ranks, picked = ranks[by_rank], picked[by_rank].tolist()
    if not picked:
        return []
    starts = np.flatnonzero(np.diff(ranks, prepend=-1)).tolist()  # where each rank's begin
    ends = [*starts[1:], len(picked)]
    return [(r, picked[a:b]) for r, a, b in zip(ranks[starts].tolist(), starts, ends, strict=True)]


def _ranks(dag: InstrDAG):
    """Each instruction's rank, as a NumPy array (read through ``map``)."""
    import numpy as np

    return np.fromiter(map(_RANK, dag.instrs), dtype=np.int64, count=len(dag.instrs))


def _layout(sched: ScheduledDAG, laid: tuple, has_waits) -> tuple[list[int], ...]:
    """Per instruction its threadblock id and its step in it, its anchor (itself if it has
    predecessors to wait for, else the last op before it in its threadblock that has, -1: none)
    and its prior (the anchor of the op before it, -1: none): flat lists made by NumPy over the
    threadblocks laid end to end (``ScheduledDAG.placement`` makes a tuple per instruction, a
    million per tail at 512 ranks)."""
    import numpy as np  # not loaded by building the CLI's parser

    n = len(sched.dag.instrs)
    run, sizes, tb_of = laid
    if not n:
        return [], [], [], []
    begin = np.repeat(np.cumsum(sizes) - sizes, sizes)  # where each one's threadblock begins in ``run``
    at = np.arange(run.size, dtype=np.int64)
    step_of = np.empty(n, dtype=np.int64)
    step_of[run] = at - begin
    waits = has_waits[run]
    last = np.maximum.accumulate(np.where(waits, at, -1))  # the last with waits at or before each
    last[last < begin] = -1
    before = np.concatenate(([-1], last[:-1]))
    before[before < begin] = -1
    anchor, prior = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    anchor[run] = np.where(last >= 0, run[last], -1)
    prior[run] = np.where(before >= 0, run[before], -1)
    return tb_of.tolist(), step_of.tolist(), anchor.tolist(), prior.tolist()


def _laid_out(sched: ScheduledDAG):
    """The instructions of all threadblocks laid end to end, each threadblock's size and each
    instruction's threadblock id, as NumPy arrays (refused where an instruction is in none)."""
    import numpy as np

    n = len(sched.dag.instrs)
    plans = [plan for tbs in sched.threadblocks for plan in tbs]
    run = np.fromiter(itertools.chain.from_iterable(plan.instrs for plan in plans), dtype=np.int64)
    sizes = np.fromiter((len(plan.instrs) for plan in plans), dtype=np.int64, count=len(plans))
    ids = np.fromiter((t for tbs in sched.threadblocks for t in range(len(tbs))), dtype=np.int64, count=len(plans))
    tb_of = np.full(n, -1, dtype=np.int64)
    tb_of[run] = np.repeat(ids, sizes)
    if run.size != n or (tb_of < 0).any():
        missing = int(np.flatnonzero(tb_of < 0)[0]) if (tb_of < 0).any() else 0
        raise CodegenError(f"scheduled DAG: instruction {missing} is in no threadblock")
    return run, sizes, tb_of


def _has_waits(preds: list[tuple[int, ...]]):
    """Whether each instruction has predecessors it may wait for, as a NumPy array."""
    import numpy as np

    return np.fromiter(map(bool, preds), dtype=bool, count=len(preds))


def awaited(sched: ScheduledDAG) -> list[set[int]]:
    """Per rank the threadblocks that ops of :func:`insert_dependencies`' IR wait for, known once
    the threadblocks are placed (the compiler judges a layout by them): those holding a predecessor
    of an instruction in another threadblock. Exact: a clock learns of a threadblock only by a wait
    for it, so the first such instruction in the order knows nothing of it and keeps its wait.
    Found by NumPy over the DAG's edges (a tuple per instruction cost a second per layout judged
    at 512 ranks)."""
    from topologies.numeric import distinct

    dag = sched.dag
    _, _, tb_of = _laid_out(sched)
    pred, succ, ranks = _SAME_DAG.get([dag], "wait edges", lambda: _wait_edges(dag))
    crossing = tb_of[pred] != tb_of[succ]
    width = int(tb_of.max(initial=0)) + 1
    out: list[set[int]] = [set() for _ in sched.threadblocks]
    for code in distinct(ranks[succ[crossing]] * width + tb_of[pred[crossing]]).tolist():
        out[code // width].add(code % width)
    return out


def _wait_edges(dag: InstrDAG):
    """The edges an instruction may wait on (all but a receive's on its send): their ends, and each
    instruction's rank, as NumPy arrays."""
    pred, succ = dag.ends
    kept = _waitable(dag)
    return pred[kept], succ[kept], _ranks(dag)


def _waitable(dag: InstrDAG):
    """Per edge of ``dag``, whether its successor may wait on it (all but a receive's on its send),
    as a NumPy array: the kinds compared in C (``DepKind`` is a ``str``)."""
    import numpy as np

    return np.fromiter(map(DepKind.MATCH.__ne__, map(_KIND, dag.edges)), dtype=bool, count=len(dag.edges))


def _preds(dag: InstrDAG) -> list[tuple[int, ...]]:
    """Per instruction the predecessors it may wait for (all but a receive's send), in the order of
    the DAG's edges, once per DAG (tuples: those with none share the empty one). Grouped by NumPy,
    and each tuple cut from one run of them in C (a million instructions at 512 ranks)."""
    import numpy as np

    pred, succ = _wait_edges(dag)[:2]
    by_succ = np.argsort(succ, kind="stable")
    run = iter(pred[by_succ].tolist())
    counts = np.bincount(succ, minlength=len(dag.instrs)).tolist()
    return list(map(tuple, map(islice, repeat(run), counts)))


_TYPE, _SRC, _DST, _COUNT = attrgetter("type"), attrgetter("src"), attrgetter("dst"), attrgetter("count")
_RANK, _KIND = attrgetter("rank"), attrgetter("kind")
