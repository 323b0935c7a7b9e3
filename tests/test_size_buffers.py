"""size_buffers: whole input/output buffers of the collective, scratch as far as it is used."""

from __future__ import annotations

from dataclasses import replace

import pytest
from codegen_helpers import stage_after

from codegen.examples import allpairs_allreduce, recursive_doubling_allgather, two_step_alltoall
from codegen.passes.size_buffers import size_buffers
from codegen.rules import buffer_sizes


@pytest.mark.parametrize(
    ("coll", "sizes"),
    [
        ("allreduce", (8, 8)),
        ("allgather", (2, 8)),
        ("reducescatter", (8, 2)),
        ("alltoall", (8, 8)),
        ("broadcast", (8, 8)),
        ("gather", (2, 8)),
        ("scatter", (8, 2)),
        ("custom", None),
    ],
)
def test_whole_buffers_per_collective(coll, sizes):
    assert buffer_sizes(coll, 4, 8) == sizes


def test_scratch_is_what_the_ops_touch():
    ir = stage_after(two_step_alltoall.program("dgx-a100x2"), "size_buffers")
    for gpu in ir.gpus:
        used = [
            op.dst.index + op.count
            for tb in gpu.threadblocks
            for op in tb.ops
            if op.dst is not None and op.dst.buffer.value == "s"
        ]
        assert gpu.scratch_chunks == max(used) == 8
        assert (gpu.input_chunks, gpu.output_chunks) == (16, 16)
    ar = stage_after(allpairs_allreduce.program(4), "size_buffers")
    assert [g.scratch_chunks for g in ar.gpus] == [4, 4, 4, 3]  # the owner's own slot stays empty


def test_usage_based_sizes_are_made_whole():
    ir = stage_after(recursive_doubling_allgather.program(4), "size_buffers")
    shrunk = replace(
        ir, gpus=tuple(replace(g, input_chunks=0, output_chunks=3, scratch_chunks=9) for g in ir.gpus)
    )
    assert size_buffers(shrunk) == ir
    custom = size_buffers(replace(shrunk, collective="custom"))
    assert {(g.input_chunks, g.output_chunks, g.scratch_chunks) for g in custom.gpus} == {(0, 4, 0)}
