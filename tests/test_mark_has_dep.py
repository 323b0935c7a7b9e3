"""mark_has_dep: exactly the steps some other threadblock waits for publish their progress."""

from __future__ import annotations

from dataclasses import replace

import pytest
from codegen_helpers import map_ops, stage_after

from codegen.check import check_ir
from codegen.errors import IRCheckError
from codegen.examples import allpairs_allreduce
from codegen.passes.mark_has_dep import mark_has_dep


def test_marks_exactly_the_awaited_steps():
    ir = mark_has_dep(stage_after(allpairs_allreduce.program(4), "fold_deps_into_nops"))
    for gpu in ir.gpus:
        awaited = {(d.tb, d.op) for tb in gpu.threadblocks for op in tb.ops for d in op.deps}
        marked = {(tb.id, k) for tb in gpu.threadblocks for k, op in enumerate(tb.ops) if op.has_dep}
        assert marked == awaited and marked
    check_ir(ir, "azure", final=True)


def test_stale_marks_are_removed_and_missing_ones_are_caught():
    ir = mark_has_dep(stage_after(allpairs_allreduce.program(4), "fold_deps_into_nops"))
    every = map_ops(ir, lambda op: replace(op, has_dep=True))
    assert mark_has_dep(every) == ir
    none = map_ops(ir, lambda op: replace(op, has_dep=False))
    with pytest.raises(IRCheckError, match="waits for this step, but hasdep is not set"):
        check_ir(none)
