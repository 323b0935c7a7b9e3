"""order_by_critical_path: a topological order by depth, then longest path ahead."""

from __future__ import annotations

import pytest
from codegen_helpers import stage_after

from codegen.examples import allpairs_allreduce, hierarchical_allreduce, ring_allreduce
from codegen.passes.order_by_critical_path import order_by_critical_path


@pytest.mark.parametrize(
    "prog",
    [ring_allreduce.program(6), allpairs_allreduce.program(4), hierarchical_allreduce.program("dgx-a100x2")],
    ids=["ring", "allpairs", "hierarchical"],
)
def test_order_is_topological_depth_major_and_critical_first(prog):
    dag = order_by_critical_path(stage_after(prog, "fuse_recv_send"))
    dag.verify()  # includes: every edge goes forward in the order
    keys = [(dag.depth[i], -dag.height[i]) for i in dag.order]
    assert keys == sorted(keys)
    assert sorted(dag.order) == list(range(len(dag.instrs)))


def test_ring_ranks_start_with_their_own_chunk():
    dag = order_by_critical_path(stage_after(ring_allreduce.program(4), "fuse_recv_send"))
    first = {}
    for i in dag.order:
        first.setdefault(dag.instrs[i].rank, dag.instrs[i])
    assert all(ins.type.value == "s" and ins.src.index == rank for rank, ins in first.items())
