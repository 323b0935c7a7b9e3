"""The GPU executor without a GPU: the kernel compiles, the packing and the FIFO/flag protocol
(emulated on the CPU, mirroring the kernel) run hand-built programs correctly and catch deadlocks."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from importlib import resources

import numpy as np
import pytest
from kernel_emulator import EmulationError, emulate

from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock
from runtime.cupy.pack import OP_CODES, PackError, pack

IN, OUT, SCR = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def ring_allgather(n: int) -> IR:
    gpus = []
    for r in range(n):
        ops = [Op(OpType.COPY, Ref(IN, 0), Ref(OUT, r)), Op(OpType.SEND, Ref(OUT, r))]
        ops += [Op(OpType.RECV_COPY_SEND, None, Ref(OUT, (r - k) % n)) for k in range(1, n - 1)]
        ops.append(Op(OpType.RECV, None, Ref(OUT, (r + 1) % n)))
        gpus.append(Gpu(r, 1, n, 0, (Threadblock(0, (r + 1) % n, (r - 1) % n, 0, tuple(ops)),)))
    return IR("ring-allgather", "allgather", n, n, tuple(gpus))


def ring_allreduce(n: int) -> IR:
    """MSCCL's in-place ring: s, rrs x (n-2), rrcs, rcs x (n-2), r in one threadblock per rank."""
    gpus = []
    for r in range(n):
        ops = [Op(OpType.SEND, Ref(IN, r))]
        ops += [Op(OpType.RECV_REDUCE_SEND, Ref(IN, (r - k) % n)) for k in range(1, n - 1)]
        c = (r + 1) % n
        ops.append(Op(OpType.RECV_REDUCE_COPY_SEND, Ref(IN, c), Ref(IN, c)))
        ops += [Op(OpType.RECV_COPY_SEND, None, Ref(IN, (r - k) % n)) for k in range(n, 2 * n - 2)]
        ops.append(Op(OpType.RECV, None, Ref(IN, (r + 2) % n)))
        gpus.append(Gpu(r, n, n, 0, (Threadblock(0, (r + 1) % n, (r - 1) % n, 0, tuple(ops)),)))
    return IR("ring-allreduce", "allreduce", n, n, tuple(gpus), inplace=True, outofplace=False)


def pairs_allgather_via_scratch(n: int) -> IR:
    """Every rank sends its chunk to every peer's scratch (one tb per peer and direction); a local
    threadblock copies scratch to output after nops that carry its dependencies on the receivers."""
    gpus = []
    for r in range(n):
        tbs = []
        peers = [p for p in range(n) if p != r]
        for k, p in enumerate(peers):
            tbs.append(Threadblock(k, p, None, 0, (Op(OpType.SEND, Ref(IN, 0)),)))
        recv_ids = []
        for k, p in enumerate(peers):
            tb_id = len(peers) + k
            recv_ids.append(tb_id)
            tbs.append(Threadblock(tb_id, None, p, 0, (Op(OpType.RECV, None, Ref(SCR, p), has_dep=True),)))
        local = [Op(OpType.COPY, Ref(IN, 0), Ref(OUT, r))]
        for tb_id, p in zip(recv_ids, peers, strict=True):
            local.append(Op(OpType.NOP, count=0, deps=(Dep(tb_id, 0),)))
            local.append(Op(OpType.COPY, Ref(SCR, p), Ref(OUT, p)))
        tbs.append(Threadblock(2 * len(peers), None, None, 0, tuple(local)))
        gpus.append(Gpu(r, 1, n, n, tuple(tbs)))
    return IR("pairs-allgather", "allgather", n, n, tuple(gpus))


def _buffers(ir: IR, chunk_elems: int, dtype, rng, inplace: bool = False):
    bufs, inputs = [], []
    for g in ir.gpus:
        inp = (rng.integers(0, 50, g.input_chunks * chunk_elems)).astype(dtype)
        inputs.append(inp.copy())
        out = inp if inplace else np.zeros(g.output_chunks * chunk_elems, dtype)
        bufs.append([inp, out, np.zeros(g.scratch_chunks * chunk_elems, dtype)])
    return bufs, inputs


CONFIGS = [(10, 4, 1), (16, 16, 4), (7, 3, 1), (5, 8, 2), (12, 12, 3)]  # chunk, tile, slot elements


@pytest.mark.parametrize(("chunk", "tile", "slot"), CONFIGS)
@pytest.mark.parametrize("n", [2, 3, 5])
def test_emulated_kernel_runs_the_ring_allgather(n, chunk, tile, slot):
    ir = ring_allgather(n)
    bufs, inputs = _buffers(ir, chunk, np.int32, np.random.default_rng(n))
    emulate(pack(ir), bufs, chunk, tile, slot, 8, np.add)
    expected = np.concatenate(inputs)
    for r in range(n):
        assert np.array_equal(bufs[r][1], expected), r


@pytest.mark.parametrize(("chunk", "tile", "slot"), CONFIGS)
@pytest.mark.parametrize(("reduce", "fn"), [("sum", np.add), ("max", np.maximum)])
def test_emulated_kernel_runs_the_inplace_ring_allreduce(chunk, tile, slot, reduce, fn):
    n = 4
    ir = ring_allreduce(n)
    bufs, inputs = _buffers(ir, chunk, np.int64, np.random.default_rng(7), inplace=True)
    emulate(pack(ir), bufs, chunk, tile, slot, 8, fn)
    expected = inputs[0]
    for arr in inputs[1:]:
        expected = fn(expected, arr)
    for r in range(n):
        assert np.array_equal(bufs[r][0], expected), r


def test_emulated_kernel_honours_dependencies_through_nops():
    ir = pairs_allgather_via_scratch(4)
    bufs, inputs = _buffers(ir, 6, np.float32, np.random.default_rng(3))
    emulate(pack(ir), bufs, 6, 4, 2, 8, np.add)
    expected = np.concatenate(inputs)
    assert all(np.array_equal(b[1], expected) for b in bufs)


def test_every_rank_receiving_before_it_sends_is_a_reported_timeout():
    ir = ring_allgather(3)
    gpus = []
    for g in ir.gpus:
        tb = g.threadblocks[0]
        swapped = (tb.ops[0], tb.ops[-1], *tb.ops[1:-1])  # wait to receive before sending anything
        gpus.append(dataclasses.replace(g, threadblocks=(dataclasses.replace(tb, ops=swapped),)))
    bad = dataclasses.replace(ir, gpus=tuple(gpus))
    bufs, _ = _buffers(bad, 4, np.float32, np.random.default_rng(0))
    with pytest.raises(EmulationError) as err:
        emulate(pack(bad), bufs, 4, 4, 1, 8, np.add)
    assert err.value.code == 2  # waiting for data on a connection


def test_packing_tables():
    ir = pairs_allgather_via_scratch(3)
    packed = pack(ir)
    assert packed.num_blocks == sum(len(g.threadblocks) for g in ir.gpus)
    assert len(packed.connections) == 6  # every ordered pair, channel 0
    assert packed.rank_blocks[1] == (5, 10)
    assert set(packed.steps[:, 0]) <= set(OP_CODES.values())
    # every dependency points at a block of the same rank
    for row in packed.steps:
        for d in range(row[7]):
            target = packed.deps[row[6] + d][0]
            assert packed.blocks[target, 0] in {packed.blocks[b, 0] for b in range(packed.num_blocks)}


def test_packing_rejects_an_unmatched_connection():
    ir = ring_allgather(3)
    g2 = ir.gpus[2]
    lonely = dataclasses.replace(g2, threadblocks=(dataclasses.replace(g2.threadblocks[0], send=None),))
    with pytest.raises(PackError, match="connection 2 -> 0 channel 0: no threadblock of rank 2 sends"):
        pack(dataclasses.replace(ir, gpus=(*ir.gpus[:2], lonely)))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_kernel_source_compiles_for_sm90(tmp_path):
    src = tmp_path / "xccl_kernel.cu"
    src.write_text((resources.files("runtime") / "cupy" / "xccl_kernel.cu").read_text())
    proc = subprocess.run(
        [
            "nvcc",
            "-arch=sm_90",
            "-std=c++17",
            "-DXCCL_INSTANTIATE_ALL",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "k.o"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr


SAMPLES = [
    ("ring_allgather", dict(n=4)),
    ("ring_allgather", dict(n=4, chunks=3, aggregate=True)),
    ("ring_allgather", dict(n=3, channels=2)),
    ("ring_allreduce", dict(n=4)),
    ("ring_allreduce", dict(n=3, channels=2)),
    ("ring_reducescatter", dict(n=4, chunks=2)),
    ("ring_broadcast", dict(n=4, root=1, chunks=2)),
    ("ring_reduce", dict(n=4, root=2)),
    ("allpairs_allgather", dict(n=4)),
    ("allpairs_allreduce", dict(n=4)),
    ("allpairs_alltoall", dict(n=4, chunks=2)),
]


@pytest.mark.parametrize(("builder", "kwargs"), SAMPLES, ids=[f"{b}-{k}" for b, k in SAMPLES])
@pytest.mark.parametrize("inplace", [False, True])
def test_emulated_kernel_equals_the_numpy_executor_on_every_sample(builder, kwargs, inplace):
    """The same buffers, tiles and FIFO shape the GPU executor uses, bit for bit against NumPy."""
    import runtime_samples as samples

    from runtime.cupy.pack import plan_buffers
    from runtime.errors import DeadlockError
    from runtime.numpy import execute
    from runtime.program import build_program, call_aliases
    from runtime.reference import make_inputs

    ir = getattr(samples, builder)(**kwargs)
    program = build_program(ir)
    if inplace and (not ir.inplace or program.collective.inplace_alias(0) is None):
        pytest.skip(f"{ir.name} has no in-place form")
    if not inplace and not ir.outofplace:
        pytest.skip(f"{ir.name} is in-place only")
    chunk, tile_bytes, steps_per_call = 6, 16, 4  # 4-element tiles of int32: several tiles per chunk
    tile = tile_bytes // 4
    slot = -(-tile // steps_per_call)
    inputs = make_inputs(program.collective, chunk, np.dtype(np.int32), "sum", seed=5)
    arrays = plan_buffers(
        program, chunk, call_aliases(program, inplace), lambda rank, n: np.zeros(n, np.int32)
    )
    for r, x in enumerate(inputs):
        arrays[0][r][...] = x
    buffers = [[arrays[0][r], arrays[1][r], arrays[2][r]] for r in range(ir.num_ranks)]
    try:
        expected = execute(ir, inputs, "sum", inplace=inplace, tile_bytes=tile_bytes)
    except DeadlockError:
        # the bounded FIFOs block the same schedules in both executors
        with pytest.raises(EmulationError):
            emulate(pack(ir), buffers, chunk, tile, slot, 8, np.add)
        return
    emulate(pack(ir), buffers, chunk, tile, slot, 8, np.add)
    coll = program.collective
    for r in range(ir.num_ranks):
        slots = [k for k, a in enumerate(coll.outputs[r]) if a is not None]  # the slots a collective defines
        got = buffers[r][1].reshape(-1, chunk)[slots]
        assert np.array_equal(got, expected[r].reshape(-1, chunk)[slots]), r


def _compiled_cases():
    from gpu_cases import eight_rank_irs

    return eight_rank_irs()


@pytest.mark.parametrize("index", range(len(_compiled_cases())), ids=[n for n, _ in _compiled_cases()])
def test_emulated_kernel_equals_the_numpy_executor_on_compiled_programs(index):
    """Every example and baseline the GPU tests run, through the kernel's protocol on the CPU."""
    from runtime.cupy.pack import plan_buffers
    from runtime.numpy import execute
    from runtime.program import build_program, call_aliases
    from runtime.reference import make_inputs

    _, ir = _compiled_cases()[index]
    program = build_program(ir)
    inplace = not ir.outofplace
    chunk, tile_bytes = 5, 12  # 3-element int32 tiles: two tiles per chunk, the last one short
    tile = tile_bytes // 4
    inputs = make_inputs(program.collective, chunk, np.dtype(np.int32), "sum", seed=11)
    ins, outs, scr = plan_buffers(
        program, chunk, call_aliases(program, inplace), lambda rank, n: np.zeros(n, np.int32)
    )
    for r, x in enumerate(inputs):
        ins[r][...] = x
    buffers = [[ins[r], outs[r], scr[r]] for r in range(ir.num_ranks)]
    expected = execute(ir, inputs, "sum", inplace=inplace, tile_bytes=tile_bytes)
    emulate(pack(ir), buffers, chunk, tile, -(-tile // 4), 8, np.add)
    coll = program.collective
    for r in range(ir.num_ranks):
        slots = [k for k, a in enumerate(coll.outputs[r]) if a is not None]
        assert np.array_equal(
            buffers[r][1].reshape(-1, chunk)[slots], expected[r].reshape(-1, chunk)[slots]
        ), r
