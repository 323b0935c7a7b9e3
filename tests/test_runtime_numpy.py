"""The NumPy executor computes every sample IR's collective, as the NumPy reference says it must."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import runtime_samples as samples

import runtime.numpy.runner
import runtime.sim
from codegen.ir import IR, Buffer, Gpu, Op, OpType, Ref, Threadblock
from runtime.errors import ExecutionError
from runtime.numpy import NumpyExecutor, execute, run
from runtime.protocol import fifo_depth, tile_bytes

SAMPLES = {
    "ring-allgather": samples.ring_allgather(4),
    "ring-allgather-channels": samples.ring_allgather(3, chunks=4, channels=2),
    "ring-allreduce": samples.ring_allreduce(4),
    "ring-allreduce-channels": samples.ring_allreduce(5, channels=2),
    "ring-reducescatter": samples.ring_reducescatter(4, chunks=2),
    "ring-broadcast": samples.ring_broadcast(4, root=1, chunks=2),
    "ring-reduce": samples.ring_reduce(4, root=2, chunks=2),
    "allpairs-allgather": samples.allpairs_allgather(4, chunks=2),
    "allpairs-allreduce-scratch-nops": samples.allpairs_allreduce(4, chunks=2),
    "allpairs-allreduce-multideps": samples.allpairs_allreduce(3, chunks=2, nops=False),
    "allpairs-alltoall": samples.allpairs_alltoall(4, chunks=2),
}

ELEMS_PER_CHUNK = 37
"""Not a multiple of the 8-element tiles below, so the last tile of every chunk is short."""


def _placements(ir: IR) -> list[bool]:
    return [p for p, ok in ((False, ir.outofplace), (True, ir.inplace)) if ok]


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_samples_execute_their_collective(name, dtype, op):
    ir = SAMPLES[name]
    item = np.dtype(dtype).itemsize
    for inplace in _placements(ir):
        # one tile per chunk, and 5 tiles per chunk with a short last one
        for elems, tile in ((4, None), (ELEMS_PER_CHUNK, 8 * item)):
            result = run(ir, ir.nchunksperloop * elems * item, dtype, op, inplace=inplace, tile_bytes=tile)
            assert result.checked
            assert result.tiles == (1 if tile is None else 5)


@pytest.mark.parametrize("name", ["ring-allreduce", "allpairs-allreduce-scratch-nops", "ring-reduce"])
@pytest.mark.parametrize("op", ["prod", "min"])
@pytest.mark.parametrize("dtype", ["float16", "int64"])
def test_prod_and_min(name, op, dtype):
    ir = SAMPLES[name]
    for inplace in _placements(ir):
        assert run(ir, ir.nchunksperloop * 16 * np.dtype(dtype).itemsize, dtype, op, inplace=inplace).checked


def test_other_interleavings_give_the_same_result():
    """Seeded random turn orders (one call per turn) must not change what a correct IR computes."""
    ir = SAMPLES["allpairs-allreduce-scratch-nops"]
    for seed in range(5):
        assert run(ir, ir.nchunksperloop * 40 * 4, tile_bytes=32, schedule_seed=seed).checked


def test_multi_chunk_steps_split_by_max_allowed_count():
    """cnt=4 steps: one call per step when 4 chunks fit a tile, four calls of one chunk otherwise."""
    ir = samples.ring_allgather(4, chunks=4, aggregate=True)
    small = run(ir, ir.nchunksperloop * 8 * 4, tile_bytes=256)  # 32-byte chunks, 8 per tile
    assert small.max_count == 8 and small.calls == 4 * 5
    # chunk = one tile: each rank queues 4 calls of its s, and its first rcs must push a fifth
    big = run(ir, ir.nchunksperloop * 64 * 4, tile_bytes=256, fifo_depth=5)
    assert big.max_count == 1 and big.calls == 4 * 5 * 4


def test_protocol_defaults():
    assert tile_bytes("Simple") == 2 << 20 and tile_bytes("LL") == 32 << 10 and tile_bytes("LL128") == 576000
    assert fifo_depth("Simple") == 2 and fifo_depth("LL") == 8
    ir = samples.ring_allgather(4)
    ex = NumpyExecutor(ir, 4 * (3 << 20))  # 3 MiB chunks: two 2 MiB tiles, the last one short
    assert ex.layout.ntiles == 2 and ex.layout.tile_len(1) == (1 << 20) // 4


def test_execute_returns_outputs_for_given_inputs():
    ir = samples.ring_allgather(3, chunks=2)
    inputs = [np.arange(4, dtype=np.int32) + 100 * r for r in range(3)]
    outs = execute(ir, inputs)
    for out in outs:
        assert out.tolist() == [0, 1, 2, 3, 100, 101, 102, 103, 200, 201, 202, 203]


def test_inplace_aliases_follow_msccl_conventions():
    """In-place allgather: the input is the rank's slice of the output; the IR must say it allows it."""
    ir = samples.ring_allgather(4)
    ex = NumpyExecutor(ir, 4 * 4 * 4, "int32", inplace=True)
    assert np.shares_memory(ex.memory[2].view(Buffer.INPUT), ex.memory[2].view(Buffer.OUTPUT))
    with pytest.raises(ExecutionError, match="not marked for in-place"):
        run(SAMPLES["allpairs-alltoall"], 4 * 8 * 4 * 2, inplace=True)


def test_sizes_the_runtime_would_not_select_are_errors():
    ir = samples.ring_allgather(4)
    with pytest.raises(ExecutionError, match="not divisible by nchunksperloop 4"):
        run(ir, 4 * 10 + 4)
    with pytest.raises(ExecutionError, match="multiple of 4 B"):
        run(ir, 18)


def test_custom_collective_runs_unchecked():
    """A custom IR executes (rank 0 copies its input to rank 1) but has no reference to check."""
    tb0 = Threadblock(0, 1, None, 0, (Op(OpType.SEND, Ref(Buffer.INPUT, 0)),))
    tb1 = Threadblock(0, None, 0, 0, (Op(OpType.RECV, dst=Ref(Buffer.OUTPUT, 0)),))
    ir = IR("copy", "custom", 2, 1, (Gpu(0, 1, 1, 0, (tb0,)), Gpu(1, 1, 1, 0, (tb1,))))
    assert not run(ir, 64).checked
    outs = execute(ir, [np.arange(4.0), np.zeros(4)])
    assert outs[1].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_doctests():
    for module in (runtime.numpy.runner, runtime.sim):
        assert doctest.testmod(module).failed == 0
