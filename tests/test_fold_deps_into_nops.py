"""fold_deps_into_nops: at most one dependency per step; extras in nops just before it."""

from __future__ import annotations

from codegen_helpers import stage_after, unfolded
from ir_interpreter import execute

from codegen.examples import two_step_alltoall
from codegen.ir import OpType
from codegen.passes.fold_deps_into_nops import fold_deps_into_nops


def _real(tb):
    return [op for op in tb.ops if op.type is not OpType.NOP]


def test_insert_dependencies_folds_as_this_pass_does():
    folded = stage_after(two_step_alltoall.program("dgx-a100x2"), "insert_dependencies")
    assert all(len(op.deps) <= 1 for g in folded.gpus for tb in g.threadblocks for op in tb.ops)
    assert fold_deps_into_nops(folded) == folded
    assert fold_deps_into_nops(unfolded(folded)) == folded


def test_extra_dependencies_move_into_nops_that_point_at_the_same_steps():
    before = unfolded(stage_after(two_step_alltoall.program("dgx-a100x2"), "insert_dependencies"))
    multi = sum(max(len(op.deps) - 1, 0) for g in before.gpus for tb in g.threadblocks for op in tb.ops)
    assert multi > 0, "the example should have steps waiting on several threadblocks"
    after = fold_deps_into_nops(before)
    nops = sum(op.type is OpType.NOP for g in after.gpus for tb in g.threadblocks for op in tb.ops)
    assert nops == multi
    for gb, ga in zip(before.gpus, after.gpus, strict=True):
        for tb_b, tb_a in zip(gb.threadblocks, ga.threadblocks, strict=True):
            assert [(o.type, o.src, o.dst, o.count) for o in _real(tb_a)] == [
                (o.type, o.src, o.dst, o.count) for o in tb_b.ops
            ]
            pending = []
            for op in tb_a.ops:
                assert len(op.deps) <= 1
                if op.type is OpType.NOP:
                    pending += op.deps
                    continue
                # the real step plus the nops before it wait for what it waited for, renumbered
                waited = {(d.tb, _real_index(ga, d)) for d in [*pending, *op.deps]}
                original = tb_b.ops[_real(tb_a).index(op)].deps
                assert waited == {(d.tb, d.op) for d in original}
                assert not pending or op.deps
                pending = []


def _real_index(gpu, dep):
    tb = gpu.threadblock(dep.tb)
    assert tb.ops[dep.op].type is not OpType.NOP
    return sum(op.type is not OpType.NOP for op in tb.ops[: dep.op])


def test_folded_programs_run_the_same():
    ir = stage_after(two_step_alltoall.program("dgx-a100x2"), "size_buffers")
    for seed in (0, 1):
        execute(ir, seed=seed)


def test_single_dependencies_are_untouched():
    ir = stage_after(two_step_alltoall.program("dgx-a100x2"), "size_buffers")
    assert fold_deps_into_nops(ir) == ir
