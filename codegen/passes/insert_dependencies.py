"""Turn the scheduled DAG into the IR, with dependencies between threadblocks (scheduled DAG -> IR).

An op waits for each predecessor on its rank that runs in another threadblock. Waits already
implied are dropped: by program order (an earlier op of the same threadblock waited for as much or
more) or through another wait (the op it waits for itself waited, directly or not, for the same
step). Each op keeps a vector clock, per threadblock the last step known complete, to decide.
The IR may hold several dependencies per op; ``fold_deps_into_nops`` makes it one.
"""

from __future__ import annotations

from codegen.chunk_dag import DepKind
from codegen.instr_dag import InstrDAG
from codegen.ir import IR, Dep, Gpu, Op, OpType, Threadblock, evolve
from codegen.schedule import ScheduledDAG
from common.memo import SameObjects

__all__ = ["awaited", "insert_dependencies"]


def insert_dependencies(sched: ScheduledDAG) -> IR:
    """Build the IR; each op depends on the last needed step of every other threadblock."""
    dag = sched.dag
    info = dag.info
    deps = _waits(sched)
    bare = _SAME_DAG.get([dag], "ops", lambda: _bare_ops(dag))
    gpus = []
    for rank, plans in enumerate(sched.threadblocks):
        tbs = []
        for t, plan in enumerate(plans):
            ops = tuple(evolve(bare[i], deps=deps[i]) if deps[i] else bare[i] for i in plan.instrs)
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


_SAME_DAG = SameObjects()
"""Each instruction's op without dependencies, for the last DAG (the compiler builds an IR from one
DAG for each width and layout it tries; ops are frozen, so the IRs share those that wait for none)."""


def _bare_ops(dag: InstrDAG) -> list[Op]:
    """Per instruction its op with no dependencies."""
    plain = Op(OpType.NOP)  # each a copy of it with its fields (a frozen __init__ per op was slower)
    return [evolve(plain, type=ins.type, src=ins.src, dst=ins.dst, count=ins.count) for ins in dag.instrs]


def _waits(sched: ScheduledDAG) -> list[tuple[Dep, ...]]:
    """Per instruction its dependencies: the last step it needs of each other threadblock, less
    those implied by its threadblock's earlier waits or through another of its waits."""
    dag = sched.dag
    place, instrs = sched.placement, dag.instrs
    preds = _SAME_DAG.get([dag], "preds", lambda: _preds(dag))
    before = [-1] * len(instrs)  # the instruction before each in its threadblock
    for plans in sched.threadblocks:
        for plan in plans:
            run = plan.instrs
            for k in range(1, len(run)):
                before[run[k]] = run[k - 1]
    # instruction -> {tb: last step known complete}, less its own threadblock (whose last step
    # known complete is its own; an entry for it is stale, never read). An op that keeps no new
    # wait shares the dict of the op before it in its threadblock: a copy per op cost a rank's
    # threadblocks per op (hundreds each at 512 ranks)
    none: dict[int, int] = {}
    clock: list[dict[int, int]] = [none] * len(instrs)
    deps: list[tuple[Dep, ...]] = [()] * len(instrs)
    made: dict[tuple[int, int], Dep] = {}  # one Dep per (threadblock, step): they are frozen
    for i in dag.order:
        k = before[i]
        base = none if k < 0 else clock[k]
        waits = preds[i]
        if not waits:
            clock[i] = base
            continue
        tb = place[i][0]
        wanted: dict[int, tuple[int, int]] = {}  # tb -> (its last step needed, that instruction)
        for p in waits:
            t, s = place[p]
            if t != tb and (t not in wanted or wanted[t][0] < s):
                wanted[t] = (s, p)
        needed = [(t, s, p) for t, (s, p) in wanted.items() if base.get(t, -1) < s]
        if not needed:
            clock[i] = base
            continue
        if len(needed) > 1:
            needed = [
                (t, s, p) for t, s, p in needed if not any(clock[q].get(t, -1) >= s for u, _, q in needed if u != t)
            ]
        for t, s, p in needed:
            other = clock[p]
            if len(other) > len(base):  # the larger copied whole, the smaller merged into it
                base, other = other, base
            base = dict(base)
            for u, v in other.items():
                if base.get(u, -1) < v:
                    base[u] = v
            if base.get(t, -1) < s:
                base[t] = s
        clock[i] = base
        kept = sorted((t, s) for t, s, _ in needed)
        deps[i] = tuple(made.get(d) or made.setdefault(d, Dep(*d)) for d in kept)
    return deps


def awaited(sched: ScheduledDAG) -> list[set[int]]:
    """Per rank the threadblocks that ops of :func:`insert_dependencies`' IR wait for, known once
    the threadblocks are placed (the compiler judges a layout by them): those holding a predecessor
    of an instruction in another threadblock. Exact: a clock learns of a threadblock only by a wait
    for it, so the first such instruction in the order knows nothing of it and keeps its wait."""
    dag = sched.dag
    place, ranks = sched.placement, [ins.rank for ins in dag.instrs]
    preds = _SAME_DAG.get([dag], "preds", lambda: _preds(dag))
    out: list[set[int]] = [set() for _ in sched.threadblocks]
    for i, waits in enumerate(preds):
        tb = place[i][0]
        for p in waits:
            t = place[p][0]
            if t != tb:
                out[ranks[i]].add(t)
    return out


def _preds(dag: InstrDAG) -> list[tuple[int, ...]]:
    """Per instruction the predecessors it may wait for (all but a receive's send), once per DAG
    (tuples: those with none share the empty one)."""
    match = DepKind.MATCH
    return [tuple(e.pred for e in edges if e.kind is not match) for edges in dag.preds]
