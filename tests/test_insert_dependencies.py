"""insert_dependencies: every cross-threadblock predecessor is waited for, and no wait is redundant."""

from __future__ import annotations

from dataclasses import replace

import pytest
from codegen_helpers import map_ops, stage_after, unfolded
from ir_interpreter import ExecutionError, execute

from codegen.chunk_dag import DepKind
from codegen.errors import CodegenError
from codegen.examples import allpairs_allreduce, hierarchical_allreduce, two_step_alltoall
from codegen.ir import IR
from codegen.lower import lower_algorithm
from codegen.passes.insert_dependencies import insert_dependencies
from codegen.schedule import TbPlan
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load


def _relayed_alltoall():
    """A timed schedule whose relays make most ops wait for none between ops that wait (the
    512-rank hierarchical alltoall's shape, on two machines)."""
    topo = load("dgx-a100x2")
    algo = make_baseline("hierarchical", topo, make_collective("alltoall", topo.num_ranks))
    return lower_algorithm(algo, topo)


PROGRAMS = [
    allpairs_allreduce.program(4),
    hierarchical_allreduce.program("dgx-a100x2"),
    two_step_alltoall.program("dgx-a100x2"),
    _relayed_alltoall(),
]


def _known(ir: IR, rank: int) -> dict[tuple[int, int], dict[int, int]]:
    """Per op, the last step of every threadblock it is sure has completed (program order + waits)."""
    gpu = ir.gpu(rank)
    memo: dict[tuple[int, int], dict[int, int]] = {}

    def known(t: int, k: int) -> dict[int, int]:
        if (t, k) not in memo:
            out = dict(known(t, k - 1)) if k else {}
            out[t] = max(out.get(t, -1), k - 1)
            for d in gpu.threadblock(t).ops[k].deps:
                for u, s in [*known(d.tb, d.op).items(), (d.tb, d.op)]:
                    out[u] = max(out.get(u, -1), s)
            memo[(t, k)] = out
        return memo[(t, k)]

    for tb in gpu.threadblocks:
        for k in range(len(tb.ops)):
            known(tb.id, k)
    return memo


def _unmet(sched, ir: IR) -> list:
    dag = sched.dag
    place = sched.placement
    missing = []
    known = {r: _known(ir, r) for r in range(ir.num_ranks)}
    for i, ins in enumerate(dag.instrs):
        t, k = place[i]
        for e in dag.preds[i]:
            if e.kind is DepKind.MATCH:
                continue
            u, s = place[e.pred]
            if u != t and known[ins.rank][(t, k)].get(u, -1) < s:
                missing.append((ins.rank, t, k, u, s))
    return missing


@pytest.mark.parametrize("prog", PROGRAMS, ids=["allpairs", "hierarchical", "two-step", "relayed-alltoall"])
def test_every_predecessor_is_covered_and_every_wait_is_needed(prog):
    sched = stage_after(prog, "assign_threadblocks")
    ir = unfolded(insert_dependencies(sched))  # a step per instruction, as placed
    assert _unmet(sched, ir) == []
    waits = [
        (g.rank, tb.id, k) for g in ir.gpus for tb in g.threadblocks for k, op in enumerate(tb.ops) if op.deps
    ]
    assert waits, "the example should need cross-threadblock waits"
    for rank, t, k in waits:
        tb = ir.gpu(rank).threadblock(t)
        for d in tb.ops[k].deps:
            ops = list(tb.ops)
            ops[k] = replace(ops[k], deps=tuple(x for x in ops[k].deps if x != d))
            cut = _with_ops(ir, rank, t, tuple(ops))
            assert _unmet(sched, cut), f"rank {rank} tb {t} step {k}: the wait for {d} is redundant"


def test_an_instruction_in_no_threadblock_is_named():
    sched = stage_after(allpairs_allreduce.program(4), "assign_threadblocks")
    plans = list(sched.threadblocks[0])
    dropped = plans[0].instrs[-1]
    plans[0] = TbPlan(plans[0].send, plans[0].recv, plans[0].channel, plans[0].instrs[:-1])
    broken = replace(sched, threadblocks=(tuple(plans), *sched.threadblocks[1:]))
    with pytest.raises(CodegenError, match=f"instruction {dropped} is in no threadblock"):
        insert_dependencies(broken)


def _with_ops(ir: IR, rank: int, t: int, ops: tuple) -> IR:
    gpu = ir.gpu(rank)
    tbs = tuple(replace(tb, ops=ops) if tb.id == t else tb for tb in gpu.threadblocks)
    gpus = tuple(replace(g, threadblocks=tbs) if g.rank == rank else g for g in ir.gpus)
    return replace(ir, gpus=gpus)


def test_dropping_the_waits_breaks_the_result():
    """The waits matter: without them some interleaving reads data before it is written."""
    ir = stage_after(allpairs_allreduce.program(4), "size_buffers")
    execute(ir, seed=0)
    broken = map_ops(ir, lambda op: replace(op, deps=()))
    with pytest.raises(ExecutionError):
        for seed in range(20):
            execute(broken, seed=seed)


@pytest.mark.parametrize("last", ["insert_dependencies", "fold_deps_into_nops", "mark_has_dep", "size_buffers"])
def test_steps_written_alike_share_one_op(last):
    """One ``Op`` object per distinct op, from this pass to the IR written: the checks and the XML
    writer read each object once (a 512-rank schedule's million steps are some 300,000 ops)."""
    ir = stage_after(_relayed_alltoall(), last)
    ops = [op for g in ir.gpus for tb in g.threadblocks for op in tb.ops]
    assert len(set(map(id, ops))) == len(set(ops)) < len(ops)


@pytest.mark.parametrize("prog", PROGRAMS, ids=["allpairs", "hierarchical", "two-step", "relayed-alltoall"])
def test_the_steps_waited_for_are_marked_as_they_are_made(prog):
    """``has_dep`` exactly on the steps some wait names, from this pass on: ``mark_has_dep`` then
    keeps every op as it is (a third of a 512-rank IR's ops were copied there to mark them)."""
    ir = stage_after(prog, "insert_dependencies")
    for gpu in ir.gpus:
        awaited = {(d.tb, d.op) for tb in gpu.threadblocks for op in tb.ops for d in op.deps}
        marked = {(tb.id, k) for tb in gpu.threadblocks for k, op in enumerate(tb.ops) if op.has_dep}
        assert marked == awaited
    folded = stage_after(prog, "fold_deps_into_nops")
    marked = stage_after(prog, "mark_has_dep")
    ops = [op for g in folded.gpus for tb in g.threadblocks for op in tb.ops]
    assert [op for g in marked.gpus for tb in g.threadblocks for op in tb.ops] == ops
    assert any(op.has_dep for op in ops)
