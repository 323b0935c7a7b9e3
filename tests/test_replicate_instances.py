"""replicate_instances: every chunk split into interleaved slices, one per instance."""

from __future__ import annotations

import pytest
from codegen_helpers import compile_and_run

from codegen.errors import CodegenError
from codegen.examples import recursive_doubling_allgather, ring_allreduce
from codegen.passes.replicate_instances import replicate_instances


def test_one_instance_is_the_identity():
    dag = ring_allreduce.program(4).chunk_dag()
    assert replicate_instances(dag, 1) is dag


def test_instances_own_interleaved_slots_and_buffers_grow():
    dag = ring_allreduce.program(4).chunk_dag()
    rep = replicate_instances(dag, 3)
    assert len(rep.ops) == 3 * len(dag.ops)
    assert rep.info.nchunksperloop == 12 and rep.info.input_chunks == 12 and rep.info.instances == 3
    for op in rep.ops:
        for loc in (op.src, op.dst):
            assert loc.index % 3 == op.instance
    # the instances touch disjoint slots: no dependency crosses instances
    assert all(rep.ops[d.pred].instance == rep.ops[d.succ].instance for d in rep.deps)
    rep.verify()


def test_multi_chunk_ops_become_one_op_per_chunk():
    dag = recursive_doubling_allgather.program(4).chunk_dag()
    assert max(op.count for op in dag.ops) == 2
    rep = replicate_instances(dag, 2)
    assert {op.count for op in rep.ops} == {1}
    assert sum(op.count for op in rep.ops) == 2 * sum(op.count for op in dag.ops)
    assert rep.info.aliases[3].offset == 2 * dag.info.aliases[3].offset


def test_replicated_programs_compute_the_collective():
    ir = compile_and_run(ring_allreduce.program(4, instances=2))
    assert ir.nchunksperloop == 8 and ir.nchannels == 2
    ir = compile_and_run(recursive_doubling_allgather.program(4, instances=3))
    assert ir.nchunksperloop == 12


def test_replicating_twice_or_zero_times_is_refused():
    dag = replicate_instances(ring_allreduce.program(4).chunk_dag(), 2)
    with pytest.raises(CodegenError, match="already replicated"):
        replicate_instances(dag, 2)
    with pytest.raises(CodegenError, match="at least 1"):
        replicate_instances(dag, 0)
