"""Turn the scheduled DAG into the IR, with dependencies between threadblocks (scheduled DAG -> IR).

An op waits for each predecessor on its rank that runs in another threadblock. Waits already
implied are dropped: by program order (an earlier op of the same threadblock waited for as much or
more) or through another wait (the op it waits for itself waited, directly or not, for the same
step). Each op keeps a vector clock, per threadblock the last step known complete, to decide.
The IR may hold several dependencies per op; ``fold_deps_into_nops`` makes it one.
"""

from __future__ import annotations

from codegen.chunk_dag import DepKind
from codegen.ir import IR, Dep, Gpu, Op, Threadblock
from codegen.schedule import ScheduledDAG

__all__ = ["insert_dependencies"]


def insert_dependencies(sched: ScheduledDAG) -> IR:
    """Build the IR; each op depends on the last needed step of every other threadblock."""
    dag = sched.dag
    info = dag.info
    place = sched.placement
    # instruction -> {tb: last step known complete}, less its own threadblock (whose last step
    # known complete is its own; an entry for it is stale, never read). An op that keeps no new
    # wait shares the dict of the op before it in its threadblock: a copy per op cost a rank's
    # threadblocks per op (hundreds each at 512 ranks)
    clock: dict[int, dict[int, int]] = {}
    deps: dict[int, tuple[Dep, ...]] = {}
    empty: dict[int, int] = {}
    for i in dag.order:
        ins = dag.instrs[i]
        tb, step = place[i]
        plan = sched.threadblocks[ins.rank][tb]
        base = clock[plan.instrs[step - 1]] if step else empty
        wanted: dict[int, int] = {}
        for e in dag.preds[i]:
            if e.kind is DepKind.MATCH:
                continue
            t, s = place[e.pred]
            if t != tb and wanted.get(t, -1) < s:
                wanted[t] = s
        needed = {t: s for t, s in wanted.items() if base.get(t, -1) < s}
        kept = []
        for t, s in needed.items():
            implied = any(
                clock[sched.threadblocks[ins.rank][u].instrs[v]].get(t, -1) >= s
                for u, v in needed.items()
                if u != t
            )
            if not implied:
                kept.append(Dep(t, s))
        if kept:
            base = dict(base)
            for d in kept:
                for t, s in clock[sched.threadblocks[ins.rank][d.tb].instrs[d.op]].items():
                    if base.get(t, -1) < s:
                        base[t] = s
                if base.get(d.tb, -1) < d.op:
                    base[d.tb] = d.op
        clock[i] = base
        deps[i] = tuple(sorted(kept))
    gpus = []
    for rank, plans in enumerate(sched.threadblocks):
        tbs = []
        for t, plan in enumerate(plans):
            ops = tuple(
                Op(dag.instrs[i].type, dag.instrs[i].src, dag.instrs[i].dst, dag.instrs[i].count, deps[i])
                for i in plan.instrs
            )
            tbs.append(Threadblock(t, plan.send, plan.recv, plan.channel, ops))
        gpus.append(Gpu(rank, info.input_chunks, info.output_chunks, info.scratch_chunks[rank], tuple(tbs)))
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
