"""Turn the scheduled DAG into the IR, with dependencies between threadblocks (scheduled DAG -> IR).

An op waits for each predecessor on its rank that runs in another threadblock. Waits already
implied are dropped: by program order (an earlier op of the same threadblock waited for as much or
more) or through another wait (the op it waits for itself waited, directly or not, for the same
step). Each op keeps a vector clock, per threadblock the last step known complete, to decide; an
op with no predecessor to wait for has the clock of the last op before it in its threadblock that
has one, so only those are judged, and where each instruction sits is found by NumPy over all
threadblocks at once. The ranks are independent: the k-th such instruction of every rank is judged
in one NumPy round, its clock a row of one table (a thousand rounds where a Python step per
instruction took a second at 512 ranks). The instructions written alike share one ``Op`` object,
made with its final ``has_dep`` (``mark_has_dep`` then copies none).
An op that keeps several waits gets all but its last on nops in front of it, as the runtimes need
(what ``fold_deps_into_nops`` would make of it, in bulk: that pass then finds nothing to fold, and
folds IRs read from files or written by hand).
"""

from __future__ import annotations

import itertools
from operator import attrgetter

from codegen.chunk_dag import DepKind
from codegen.columns import instr_columns
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
    ops, sizes = _with_nops(sched, laid, _waits(sched, laid))
    bounds = [0, *itertools.accumulate(sizes.tolist())]
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
wait for none), the edges an instruction may wait on, and the instructions with any, in order."""


def _with_nops(sched: ScheduledDAG, laid: tuple, waits: tuple) -> tuple[list[Op], object]:
    """The ops of the threadblocks laid end to end, each with one dependency at most: an op that
    waits on ``k > 1`` steps gets ``k - 1`` nops in front of it, each carrying one of them in
    order, and keeps the last, every step renumbered past the nops before it in its threadblock
    (what ``fold_deps_into_nops`` makes of the IR, which then finds nothing to fold: at 512 ranks
    it rebuilt every threadblock, 0.9 s); and each threadblock's size. Found by NumPy over the
    waits (``waits``: :func:`_waits`)."""
    import numpy as np

    from topologies.numeric import distinct

    run, sizes, _ = laid
    at, code, tuples, awaited = waits
    k = np.fromiter(map(len, tuples), np.int64, len(tuples))[code]  # per waiting one, its waits
    if not (k > 1).any():
        return _ops(sched, run, waits), sizes
    at, code, k = at[k > 0], code[k > 0], k[k > 0]  # (none waits on nothing in a DAG)
    nops = np.zeros(len(sched.dag.instrs), np.int64)
    nops[at] = k - 1
    shift = np.cumsum(nops[run])  # per place in ``run``: the nops up to it (its own too)
    tb_nops = np.bincount(np.repeat(np.arange(sizes.size), sizes), weights=nops[run], minlength=sizes.size)
    tb_nops = tb_nops.astype(np.int64)
    within = shift - np.repeat(np.cumsum(tb_nops) - tb_nops, sizes)  # ... in its threadblock
    dep_code, span = _renumbered(sched, sizes, (at, code, tuples, k), within)
    last = np.cumsum(k) - 1  # each waiting one's last wait, in the rows of ``dep_code``
    codes = distinct(dep_code[last])
    single = [(Dep(c // span, c % span),) for c in codes.tolist()]
    real = _ops(sched, run, (at, np.searchsorted(codes, dep_code[last]), single, awaited))
    return _interleaved(real, run, shift, (at, k, dep_code, span)), sizes + tb_nops


def _renumbered(sched: ScheduledDAG, sizes, waiting: tuple, within) -> tuple[object, int]:
    """Every wait of the waiting ones (``waiting``: each one, its tuple's number, the tuples and
    its count of waits), in the order of their tuples, as ``threadblock * span + step`` with the
    step past the nops before it in its threadblock (``sizes``: the threadblocks' laid end to end;
    ``within``: per place there, the nops up to it in its threadblock); and ``span``."""
    import numpy as np

    from topologies.numeric import ranges

    at, code, tuples, k = waiting
    flat = [d for t in tuples for d in t]
    tup_tb = np.fromiter((d.tb for d in flat), np.int64, len(flat))
    tup_op = np.fromiter((d.op for d in flat), np.int64, len(flat))
    rows = ranges(np.cumsum([0, *map(len, tuples)])[:-1][code], k)
    rank = instr_columns(sched.dag).rank[np.repeat(at, k)]
    first_tb = np.cumsum([0, *map(len, sched.threadblocks)])[:-1]  # each rank's first threadblock
    first_step = np.cumsum(sizes) - sizes  # each threadblock's first place in ``run``
    tb, step = tup_tb[rows], tup_op[rows]
    step = step + within[first_step[first_tb[rank] + tb] + step]
    span = int(step.max(initial=0)) + 1
    return tb * span + step, span


def _interleaved(real: list[Op], run, shift, waits: tuple) -> list[Op]:
    """``real`` (an op per place in ``run``) with the nops in front of each op that keeps several
    waits (``shift``: per place, the nops up to it; ``waits``: the waiting ones, their counts of
    waits and the waits' codes of :func:`_renumbered`, and its ``span``): one nop object per
    distinct wait."""
    import numpy as np

    from topologies.numeric import distinct

    at, k, dep_code, span = waits
    placed = np.arange(run.size) + shift  # each op's place once the nops are in
    of_run = np.empty(run.size, np.int64)
    of_run[run] = np.arange(run.size)
    front = np.ones(dep_code.size, bool)
    front[np.cumsum(k) - 1] = False  # all but each one's last wait
    nop_code = dep_code[front]
    owner = np.repeat(np.arange(at.size), k)[front]  # the waiting one each nop is in front of
    nth = np.arange(dep_code.size) - np.repeat(np.cumsum(k) - k, k)  # each wait's place in its tuple
    where = placed[of_run[at[owner]]] - (k[owner] - 1) + nth[front]
    kinds = distinct(nop_code)
    made = np.empty(kinds.size, object)
    made[:] = [Op(OpType.NOP, count=0, deps=(Dep(c // span, c % span),)) for c in kinds.tolist()]
    out = np.empty(run.size + int(shift[-1]), object)
    out[placed] = np.fromiter(real, object, len(real))
    out[where] = made[np.searchsorted(kinds, nop_code)]
    return out.tolist()


def _ops(sched: ScheduledDAG, run, waits: tuple) -> list[Op]:
    """The op of each instruction of ``run`` (the threadblocks laid end to end), with its
    dependencies and, where another waits for it, ``has_dep`` (``waits``: :func:`_waits`), in that
    order: ``mark_has_dep`` then copies none (a third of a 512-rank IR's ops). Ops are frozen:
    one object serves every instruction written alike (a few thousand for the million instructions
    of a 512-rank schedule, where an op each took seconds to make, and again in every pass and check
    after this one), those that wait for none shared by every IR of the DAG. The ops alike are found
    by NumPy, by the numbers of the op without dependencies, of its mark and of its dependencies'
    tuple."""
    import numpy as np

    from topologies.numeric import distinct

    bare, which = _SAME_DAG.get([sched.dag], "ops", lambda: _bare_ops(sched.dag))
    at, code, tuples, awaited = waits
    span = len(tuples) + 1
    dep = np.zeros(which.size, dtype=np.int64)  # per instruction its tuple's number + 1, 0: none
    dep[at] = code + 1
    mark = np.zeros(which.size, dtype=np.int64)
    mark[awaited] = 1
    some = np.flatnonzero(dep + mark)
    key = (which[some] * 2 + mark[some]) * span + dep[some]
    keys = distinct(key)
    made = [_op(bare[k // span // 2], k // span % 2, tuples, k % span) for k in keys.tolist()]
    which = which.copy()
    which[some] = len(bare) + np.searchsorted(keys, key)
    return list(map([*bare, *made].__getitem__, which[run].tolist()))


def _op(bare: Op, mark: int, tuples: list[tuple[Dep, ...]], dep: int) -> Op:
    """``bare`` with ``has_dep`` ``mark`` and its dependencies the tuple numbered ``dep - 1``
    (0: none): :func:`~codegen.ir.evolve` without its keywords, half its time (a third of a
    512-rank IR's million ops are made here)."""
    op = object.__new__(Op)
    fields = op.__dict__
    fields.update(bare.__dict__)
    fields["has_dep"] = bool(mark)
    if dep:
        fields["deps"] = tuples[dep - 1]
    return op


def _bare_ops(dag: InstrDAG) -> tuple[list[Op], object]:
    """The ops with no dependencies of the instructions, one object for those written alike (by
    type, count and the ids of their operands, which the instructions hold alive), and per
    instruction its op's place there, as a NumPy array."""
    import numpy as np

    instrs = dag.instrs
    plain = Op(OpType.NOP)  # each a copy of it with its fields (a frozen __init__ per op was slower)
    srcs, dsts = map(_SRC, instrs), map(_DST, instrs)
    keys = list(zip(map(_TYPE, instrs), map(id, srcs), map(id, dsts), map(_COUNT, instrs), strict=True))
    alike = {  # the keys made and the ops looked up in C, one op made per distinct key
        key: evolve(plain, type=ins.type, src=ins.src, dst=ins.dst, count=ins.count)
        for key, ins in dict(zip(keys, instrs, strict=True)).items()
    }
    number = {key: k for k, key in enumerate(alike)}
    return list(alike.values()), np.fromiter(map(number.__getitem__, keys), np.int64, len(keys))


def _waits(sched: ScheduledDAG, laid: tuple) -> tuple:
    """The instructions that wait for some other threadblock, per one the number of its
    dependencies' tuple in a list of them, that list, and the instructions waited for (NumPy
    arrays but the list): the last step each needs of another threadblock, less those implied by
    its threadblock's earlier waits or through another of its waits (``laid``: :func:`_laid_out`)."""
    import numpy as np

    dag = sched.dag
    waiting, bounds = _SAME_DAG.get([dag], "waiting", lambda: _waiting(dag))
    tb_of, step_of, anchor, prior = _layout(sched, laid, waiting)
    row = np.zeros(len(dag.instrs) + 1, dtype=np.int64)  # per instruction its clock's row, [-1]: none's
    row[waiting] = np.arange(1, waiting.size + 1)
    cand = _candidates(dag, waiting, tb_of, step_of, row[anchor])
    found, kept = _clocks(cand, row[prior[waiting]], bounds, max(map(len, sched.threadblocks), default=1))
    f, c = np.nonzero(kept)
    rank = _SAME_DAG.get([dag], "wait edges", lambda: _wait_edges(dag))[2][waiting[f]]
    tb = np.cumsum([0, *map(len, sched.threadblocks)])[rank] + cand[0][f, c]  # each awaited step's
    first = np.cumsum(laid[1]) - laid[1]  # where each threadblock begins in the instructions laid
    awaited = laid[0][first[tb] + cand[1][f, c]]
    return (waiting[found], *_made(cand[0][found], cand[1][found], kept[found]), awaited)


def _candidates(dag: InstrDAG, waiting, tb_of, step_of, anchor_row) -> tuple:
    """Per instruction of ``waiting``, the waits it may keep: per other threadblock holding some
    of its predecessors, the last step of it they need, as rows of NumPy tables in threadblock
    order, padded (threadblock 0, step -2: a wait no clock lacks): the threadblocks, the steps, the
    rows of the clocks of those steps' anchors (see :func:`_layout`)."""
    import numpy as np

    pred, succ, _ = _SAME_DAG.get([dag], "wait edges", lambda: _wait_edges(dag))
    at = np.full(len(dag.instrs), -1, dtype=np.int64)
    at[waiting] = np.arange(waiting.size)
    f, t, s = at[succ], tb_of[pred], step_of[pred]
    other = t != tb_of[succ]
    f, t, s, pred = f[other], t[other], s[other], pred[other]
    order = np.lexsort((-s, t, f))  # per (instruction, threadblock) the last step first
    f, t, s, pred = f[order], t[order], s[order], pred[order]
    head = np.ones(f.size, dtype=bool)
    head[1:] = (f[1:] != f[:-1]) | (t[1:] != t[:-1])
    f, t, s, pred = f[head], t[head], s[head], pred[head]
    counts = np.bincount(f, minlength=waiting.size)
    col = np.arange(f.size) - np.repeat(np.cumsum(counts) - counts, counts)
    width = int(counts.max(initial=0))
    tbs, steps = np.zeros((waiting.size, width), np.int64), np.full((waiting.size, width), -2, np.int64)
    rows = np.zeros((waiting.size, width), np.int64)
    tbs[f, col], steps[f, col], rows[f, col] = t, s, anchor_row[pred]
    return tbs, steps, rows, counts


def _clocks(cand: tuple, prior_row, bounds: list[tuple[int, int]], width: int):
    """Per instruction of the waiting ones (rank by rank, in order; ``bounds`` each rank's), whether
    it needs any of its candidate waits (:func:`_candidates`), and which it keeps. Each keeps a
    vector clock, per threadblock of its rank the last step known complete (-1: none; its own
    threadblock's entry is stale, never read), its row in a table (row 0 knows nothing; those
    before it in its threadblock: ``prior_row``): a wait is kept unless that clock or the clock of
    another kept wait's step knows of it. The ranks are independent: their k-th instructions are
    judged at once, by NumPy, a thousand rounds at 128 or 512 ranks where a Python step per
    instruction took seconds."""
    import numpy as np

    n, k_max = cand[0].shape
    order, place, offsets = _rounds(bounds, n)  # the instructions round by round, their rows then
    tbs, steps, counts = cand[0][order], cand[1][order], cand[3][order]
    rows, prior = place[cand[2][order]], place[prior_row[order]]
    kept = np.zeros((n, k_max), dtype=bool)
    needs = np.zeros(n, dtype=bool)
    last = int(steps.max(initial=0))  # the table as narrow as the steps allow: its pages are most of the time
    dtype = np.int8 if last < 1 << 7 else np.int16 if last < 1 << 15 else np.int64
    table = np.full((n + 1, width), -1, dtype=dtype)
    apart = ~np.eye(k_max, dtype=bool)
    lines, cols = np.arange(len(bounds))[:, None], np.arange(k_max)[None, :, None]
    wides = np.maximum.reduceat(counts, offsets[:-1]).tolist() if n else []
    for (a, b), wide in zip(itertools.pairwise(offsets.tolist()), wides, strict=True):
        clock = table[prior[a:b]]
        if wide:
            t, s, r, line = tbs[a:b, :wide], steps[a:b, :wide], rows[a:b, :wide], lines[: b - a]
            need = clock[line, t] < s
            if need.any():
                theirs = table[r]  # the clocks of the steps waited for
                keep = need
                if wide > 1:  # those another needed wait's clock knows of are implied by it
                    known = theirs[line[:, :, None], cols[:, :wide], t[:, None, :]]
                    keep = need & ~(need[:, :, None] & (known >= s[:, None, :]) & apart[:wide, :wide]).any(1)
                np.maximum(clock, np.where(keep[:, :, None], theirs, -1).max(1), out=clock)
                i, j = np.nonzero(keep)
                clock[i, t[i, j]] = np.maximum(clock[i, t[i, j]], s[i, j])
                kept[a:b, :wide] = keep
                needs[a:b] = need.any(1)
        table[a + 1 : b + 1] = clock
    kept[order], needs[order] = kept.copy(), needs.copy()
    return np.flatnonzero(needs), kept


def _rounds(bounds: list[tuple[int, int]], n: int) -> tuple:
    """The order that puts each round's instructions together (the k-th of every rank that has
    one, by rank; ``bounds``: each rank's in the ``n`` waiting), each row of the table of clocks
    by place in it +1 there (0: none's), and where each round begins (and the last ends)."""
    import numpy as np

    starts = np.array([a for a, _ in bounds], np.int64).reshape(len(bounds))
    lens = np.array([b - a for a, b in bounds], np.int64).reshape(len(bounds))
    k = np.arange(n) - np.repeat(starts, lens)  # each one's round
    order = np.lexsort((np.repeat(np.arange(len(bounds)), lens), k))
    place = np.zeros(n + 1, dtype=np.int64)
    place[order + 1] = np.arange(1, n + 1)
    return order, place, np.concatenate(([0], np.cumsum(np.bincount(k, minlength=0))))


def _made(tbs, steps, kept) -> tuple:
    """Per row of ``kept`` (the waits kept, of ``tbs`` and ``steps``) the number of its
    dependencies' tuple, as a NumPy array, and those tuples, one per list of waits: they are frozen
    (see :func:`_ops`). The lists of one wait, nearly all, are numbered by NumPy."""
    import numpy as np

    from topologies.numeric import distinct

    one = kept.sum(1) == 1
    col = kept[one].argmax(1) if kept.shape[1] else np.zeros(0, np.int64)
    span = int(steps.max(initial=0)) + 1
    code = tbs[one, col] * span + steps[one, col]
    codes = distinct(code)
    made: list[tuple[Dep, ...]] = [(Dep(c // span, c % span),) for c in codes.tolist()]
    which = np.empty(kept.shape[0], dtype=np.int64)
    which[one] = np.searchsorted(codes, code)
    others: dict[tuple, int] = {}
    for f in np.flatnonzero(~one).tolist():  # several or none (each implied by another: none in a DAG)
        key = tuple(zip(tbs[f][kept[f]].tolist(), steps[f][kept[f]].tolist(), strict=True))
        if key not in others:
            others[key] = len(made)
            made.append(tuple(Dep(*d) for d in key))
        which[f] = others[key]
    return which, made


def _waiting(dag: InstrDAG) -> tuple[object, list[tuple[int, int]]]:
    """The instructions that have predecessors to wait for, rank by rank, each rank's in the DAG's
    order, as a NumPy array, and where each rank's begin and end there: picked and grouped by
    NumPy (a million instructions at 512 ranks)."""
    import numpy as np

    succ = _SAME_DAG.get([dag], "wait edges", lambda: _wait_edges(dag))[1]
    order = np.asarray(dag.order, dtype=np.int64).reshape(len(dag.order))
    picked = order[np.bincount(succ, minlength=len(dag.instrs))[order] > 0]
    ranks = _SAME_DAG.get([dag], "wait edges", lambda: _wait_edges(dag))[2][picked]
    by_rank = np.argsort(ranks, kind="stable")  # each rank's in the DAG's order
    ranks, picked = ranks[by_rank], picked[by_rank]
    starts = np.flatnonzero(np.diff(ranks, prepend=-1)).tolist()  # where each rank's begin
    return picked, list(zip(starts, [*starts[1:], picked.size][: len(starts)], strict=True))


def _layout(sched: ScheduledDAG, laid: tuple, waiting) -> tuple:
    """Per instruction its threadblock id and its step in it, its anchor (itself if it has
    predecessors to wait for, else the last op before it in its threadblock that has, -1: none)
    and its prior (the anchor of the op before it, -1: none) (``waiting``: those with predecessors
    to wait for): NumPy arrays made over the threadblocks laid end to end
    (``ScheduledDAG.placement`` makes a tuple per instruction, a million per tail at 512 ranks)."""
    import numpy as np  # not loaded by building the CLI's parser

    n = len(sched.dag.instrs)
    run, sizes, tb_of = laid
    has_waits = np.zeros(n, dtype=bool)
    has_waits[waiting] = True
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
    return tb_of, step_of, anchor, prior


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
    return pred[kept], succ[kept], instr_columns(dag).rank


def _waitable(dag: InstrDAG):
    """Per edge of ``dag``, whether its successor may wait on it (all but a receive's on its send),
    as a NumPy array: the kinds compared in C (``DepKind`` is a ``str``)."""
    import numpy as np

    return np.fromiter(map(DepKind.MATCH.__ne__, map(_KIND, dag.edges)), dtype=bool, count=len(dag.edges))


_TYPE, _SRC, _DST, _COUNT = attrgetter("type"), attrgetter("src"), attrgetter("dst"), attrgetter("count")
_KIND = attrgetter("kind")
