"""Every shipped DSL example: checks, compiles for both runtimes, passes the independent validator,
round-trips through XML and JSON, and computes its collective (symbolic execution)."""

from __future__ import annotations

import pytest
from codegen_helpers import assert_loads_and_computes, compile_and_run, writable
from executor_suite import EXAMPLE_PARAMS
from ir_interpreter import execute
from msccl_xml_rules import violations

from codegen.compiler import compile_program
from codegen.examples import ring_allreduce
from codegen.formats import read_ir, write_ir
from codegen.loader import example_names, load_program
from codegen.rules import DIALECTS

SMALL = EXAMPLE_PARAMS


def test_every_example_is_covered():
    assert sorted(SMALL) == example_names()


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("instances", [1, 2])
def test_example_compiles_checks_round_trips_and_runs(name, instances):
    prog = load_program(f"example:{name}", {**SMALL[name], "instances": instances})
    assert prog.check() == ()
    for dialect in DIALECTS:
        if DIALECTS[dialect].xml is None or DIALECTS[dialect].xml_collective(prog.collective.name) is None:
            continue
        ir = writable(compile_program(prog, dialect=dialect, verify_each=True), dialect)
        text = write_ir(ir, dialect)
        assert violations(text, dialect) == []
        assert_loads_and_computes(text, dialect, ir)
        assert read_ir(text) == ir
        assert read_ir(write_ir(ir, "json")) == ir
        assert ir.nchunksperloop == prog.collective.size_chunks * instances
    for seed in (None, 1):
        execute(ir, seed=seed)


def test_ring_allreduce_8_ranks_one_channel_is_the_reference_compilers_result():
    """One threadblock per rank of 15 steps: s, six rrs, rrcs, six rcs, r."""
    ir = compile_and_run(ring_allreduce.program(8), channels=1)
    expected = ["s"] + ["rrs"] * 6 + ["rrcs"] + ["rcs"] * 6 + ["r"]
    for gpu in ir.gpus:
        (tb,) = gpu.threadblocks
        assert [op.type.value for op in tb.ops] == expected
        assert (tb.send, tb.recv, tb.channel) == ((gpu.rank + 1) % 8, (gpu.rank - 1) % 8, 0)


def test_ring_allreduce_two_instances_interleave_chunks_and_channels():
    """As the reference compiler: 16 chunks per loop, 2 channels, 2 threadblocks per GPU; instance
    i owns chunks i, i+2, ..."""
    ir = compile_and_run(ring_allreduce.program(8, instances=2))
    assert (ir.nchunksperloop, ir.nchannels) == (16, 2)
    for gpu in ir.gpus:
        assert len(gpu.threadblocks) == 2
        for tb in gpu.threadblocks:
            owned = {ref.index % 2 for op in tb.ops for ref in (op.src, op.dst) if ref is not None}
            assert owned == {tb.channel}


def test_two_step_alltoall_crosses_machines_in_blocks():
    prog = load_program("example:two_step_alltoall", {"topology": "dgx-a100x2"})
    ir = compile_program(prog)
    g = 8
    for gpu in ir.gpus:
        for tb in gpu.threadblocks:
            if tb.send is not None and tb.send // g != gpu.rank // g:
                assert [op.count for op in tb.ops if op.type.sends] == [g]
