"""The CuPy executor on a real GPU (``pytest -m gpu``; skipped with a reason elsewhere)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from codegen.ir import Op, OpType, Threadblock

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="CuPy is not installed (pip install 'xccl-synth[gpu]')")


def _has_gpu() -> bool:
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError:
        return False


if not _has_gpu():
    pytest.skip("no CUDA GPU is visible", allow_module_level=True)

import runtime_samples as samples  # noqa: E402
from gpu_cases import eight_rank_irs  # noqa: E402

from runtime.cupy import run  # noqa: E402
from runtime.cupy.executor import CupyExecutor, GpuExecutionError, threadblock_bound  # noqa: E402

SAMPLES = [
    samples.ring_allgather(8),
    samples.ring_allgather(8, chunks=2, channels=2),
    samples.ring_allreduce(8),
    samples.ring_reducescatter(8),
    samples.ring_broadcast(8, root=3),
    samples.ring_reduce(8, root=5),
    samples.allpairs_allgather(8),
    samples.allpairs_allreduce(8),
    samples.allpairs_alltoall(8),
]


CASES = [(name, ir) for name, ir in eight_rank_irs()] + [(ir.name, ir) for ir in SAMPLES]


@pytest.mark.parametrize("ir", [ir for _, ir in CASES], ids=[name for name, _ in CASES])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("size", [1 << 12, (1 << 22) + (1 << 12) * 8 * 3])
def test_examples_baselines_and_samples_match_numpy_on_eight_ranks_of_one_gpu(ir, dtype, size):
    """Every example and baseline (compiled) and the hand-written samples, 8 ranks on one GPU; the
    larger size spans several 2 MiB tiles per chunk, the last one short."""
    unit = ir.nchunksperloop * np.dtype(dtype).itemsize
    size -= size % unit
    result = run(ir, size, dtype, "sum", inplace=not ir.outofplace)
    assert result.checked
    if dtype == "int32":
        assert result.matches_numpy


def test_max_reduction_in_place():
    ir = samples.ring_allreduce(8)
    assert run(ir, 8 * 4096, "int32", "max", inplace=True).matches_numpy


def test_a_broken_ir_reports_an_error_instead_of_hanging():
    ir = samples.ring_allgather(4)
    gpus = []
    for g in ir.gpus:
        tb = g.threadblocks[0]
        ops = (tb.ops[0], tb.ops[-1], *tb.ops[1:-1])  # every rank receives before sending: deadlock
        gpus.append(dataclasses.replace(g, threadblocks=(dataclasses.replace(tb, ops=ops),)))
    bad = dataclasses.replace(ir, gpus=tuple(gpus))
    with pytest.raises(GpuExecutionError, match="timed out waiting for data"):
        run(bad, 4 * 4096, "float32", check=False, timeout_s=0.5)


def test_an_ir_needing_more_resident_blocks_than_the_gpu_has_is_refused():
    ir = samples.ring_allgather(2)
    many = tuple(Threadblock(k, None, None, 0, (Op(OpType.NOP, count=0),)) for k in range(1, 4000))
    gpus = tuple(dataclasses.replace(g, threadblocks=g.threadblocks + many) for g in ir.gpus)
    with pytest.raises(GpuExecutionError, match="resident"):
        CupyExecutor(dataclasses.replace(ir, gpus=gpus), 2 * 4096, "float32")


def test_device_timing_is_positive():
    ex = CupyExecutor(samples.ring_allgather(8), 8 << 20, "float32")
    times = ex.time_us(repeats=3)
    assert all(t > 0 for t in times)


@pytest.mark.parametrize("topology, ranks", [("dgx1", 8), ("dgx-h100x2", 16)])
def test_run_compiles_a_trees_allgather_algorithm_that_fits_the_gpu(tmp_path, xccl, topology, ranks):
    """``xccl synth trees`` then ``xccl run --backend cupy``: compiled as ``xccl compile`` does, it
    needs more threadblocks than one GPU holds at once for all ranks (702 and 1404 on an H100);
    compiled for the run, it keeps within the GPU's resident blocks over the ranks."""
    algo = tmp_path / "ag.json"
    assert xccl("synth", "trees", "-t", topology, "-C", "allgather", "-o", str(algo)).returncode == 0
    proc = xccl("run", str(algo), "--backend", "cupy", "--size", "1MiB", "--check")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok: "), proc.stdout
    bound = threadblock_bound(ranks, "float32", "sum")
    assert f"with at most {bound.threadblocks} threadblocks per rank: {bound.describe()}" in proc.stderr
