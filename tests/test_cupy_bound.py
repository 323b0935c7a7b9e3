"""The threadblocks a rank may have on the CuPy backend, and ``xccl run``/``bench`` compiling an
algorithm or program within them (no GPU: the device attributes are given, and the bound a
backend states is stubbed on the numpy backend, which runs the IR compiled under it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import runtime.bench
from runtime.backends import NumpyBackend, ThreadblockBound
from runtime.cupy.executor import CupyExecutor, GpuExecutionError, place, rank_bound, resident_blocks
from runtime.cupy.pack import pack

H100 = {
    "MaxThreadsPerMultiProcessor": 2048,
    "MaxRegistersPerMultiprocessor": 65536,
    "MaxBlocksPerMultiprocessor": 32,
    "MultiProcessorCount": 132,
}
"""An H100 SXM's attributes, as CuPy's ``Device.attributes`` names them."""
REGS = 40
"""Registers per thread of the kernel that measured 3 blocks per SM on an H100 (396 resident)."""


def test_an_sm_holds_the_blocks_its_scarcest_resource_allows():
    assert resident_blocks(H100, REGS) == (3, 396)  # registers: 65536 // (40 x 512)
    assert resident_blocks(H100, 32) == (4, 528)  # threads: 2048 // 512
    assert resident_blocks({**H100, "MaxBlocksPerMultiprocessor": 2}, 32) == (2, 264)
    unstated = {k: v for k, v in H100.items() if k != "MaxBlocksPerMultiprocessor"}
    assert resident_blocks(unstated, 1) == (4, 528)  # absent: 32 per SM


def test_a_rank_may_have_its_device_s_resident_blocks_over_the_ranks_placed_on_it():
    one = rank_bound(place(8, [0]), lambda d: H100, REGS)
    assert (one.threadblocks, one.device, one.ranks, one.capacity, one.per_sm) == (49, 0, 8, 396, 3)
    assert one.describe() == "device 0 runs 8 rank(s) and holds 396 threadblocks at once (3 per SM)"
    assert rank_bound(place(8, list(range(8))), lambda d: H100, REGS).threadblocks == 396
    assert rank_bound(place(10, [0, 1, 2]), lambda d: H100, REGS).threadblocks == 396 // 4  # 4, 4, 2
    smaller = {**H100, "MultiProcessorCount": 66}
    two = rank_bound(place(16, [0, 1]), lambda d: (H100, smaller)[d], REGS)
    assert (two.threadblocks, two.device, two.capacity) == (198 // 8, 1, 198)


def _occupancy_checked(ir) -> None:
    """The executor's occupancy check of ``ir``, all ranks on one H100 (the kernel at REGS)."""
    device = SimpleNamespace(attributes=H100)
    fake = SimpleNamespace(
        ir=ir,
        packed=pack(ir),
        placement=place(ir.num_ranks, [0]),
        _kernel=SimpleNamespace(num_regs=REGS),
        _cp=SimpleNamespace(cuda=SimpleNamespace(Device=lambda d: device)),
    )
    CupyExecutor._check_occupancy(fake)


@pytest.fixture(scope="module")
def trees_allgather(tmp_path_factory) -> str:
    """``xccl synth trees -t dgx1 -C allgather``: 702 threadblocks on 8 ranks compiled as ``xccl
    compile`` compiles it, more than one H100 holds at once (396)."""
    from xccl.cli.main import main

    path = tmp_path_factory.mktemp("trees") / "ag.json"
    assert main(["synth", "trees", "-t", "dgx1", "-C", "allgather", "-o", str(path)]) == 0
    return str(path)


@pytest.fixture
def bounded(monkeypatch):
    """The numpy backend states one H100's bound (as the cupy backend computes it); each IR
    ``bench`` runs and each number of ranks asked about are kept."""
    seen = SimpleNamespace(irs=[], asked=[])
    real = runtime.bench.bench

    def bound(self, num_ranks: int, dtype: str, op: str) -> ThreadblockBound:
        seen.asked.append((num_ranks, dtype, op))
        b = rank_bound(place(num_ranks, [0]), lambda d: H100, REGS)
        return ThreadblockBound(b.threadblocks, b.describe())

    def bench(ir, *args, **kwargs):
        seen.irs.append(ir)
        return real(ir, *args, **kwargs)

    monkeypatch.setattr(NumpyBackend, "rank_threadblocks", bound)
    monkeypatch.setattr(runtime.bench, "bench", bench)
    return seen


def test_run_compiles_an_algorithm_within_the_backend_s_threadblocks_and_says_so(
    trees_allgather, bounded, xccl
):
    proc = xccl("run", trees_allgather, "--size", "1MiB", "--check")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok: allgather-dgx1-s66-r156-c63: allgather on 8 ranks")
    assert bounded.asked == [(8, "float32", "sum")]
    assert (
        f"compiling {trees_allgather} for the numpy backend with at most 49 threadblocks per rank: "
        "device 0 runs 8 rank(s) and holds 396 threadblocks at once (3 per SM)"
    ) in proc.stderr.splitlines()
    (ir,) = bounded.irs
    assert max(len(g.threadblocks) for g in ir.gpus) <= 49
    _occupancy_checked(ir)  # the executor's check, with the same arithmetic, lets it run


def test_bench_asks_for_the_bound_with_its_dtype_and_reduction(trees_allgather, bounded, xccl):
    proc = xccl(
        "bench", trees_allgather, "--sizes", "64KiB", "-n", "1", "-d", "i32", "--op", "max", "--check"
    )
    assert proc.returncode == 0, proc.stderr
    assert bounded.asked == [(8, "int32", "max")]
    assert max(len(g.threadblocks) for g in bounded.irs[0].gpus) <= 49


def test_a_user_s_xml_runs_as_written(trees_allgather, bounded, xccl, tmp_path):
    xml = tmp_path / "ag.xml"
    assert xccl("compile", trees_allgather, "-o", str(xml)).returncode == 0
    proc = xccl("run", str(xml), "--size", "1MiB", "--check")
    assert proc.returncode == 0, proc.stderr
    assert bounded.asked == [] and "compiling" not in proc.stderr
    (ir,) = bounded.irs
    assert sum(len(g.threadblocks) for g in ir.gpus) > 396  # as compiled without the bound
    with pytest.raises(
        GpuExecutionError, match=r"device 0 would run \d+ threadblocks, but only 396 can be resident"
    ):
        _occupancy_checked(ir)


def test_where_no_layout_fits_the_bound_the_runtime_s_own_limits_apply(
    trees_allgather, bounded, xccl, monkeypatch
):
    monkeypatch.setattr(
        NumpyBackend, "rank_threadblocks", lambda self, n, dtype, op: ThreadblockBound(2, "a stub")
    )
    proc = xccl("run", trees_allgather, "--size", "1MiB", "--check")
    assert proc.returncode == 0, proc.stderr
    assert (
        "no threadblock layout fits 2 threadblocks per rank: compiled within the azure runtime's own limits"
        in proc.stderr.splitlines()
    )
    assert max(len(g.threadblocks) for g in bounded.irs[0].gpus) > 2  # the GPU executor refuses it


def test_a_program_is_compiled_within_the_bound_for_its_runtime(bounded, xccl):
    proc = xccl("run", "example:allpairs_allreduce", "-D", "num_ranks=8", "--check")
    assert proc.returncode == 0, proc.stderr
    assert bounded.asked == [(8, "float32", "sum")]
    assert "with at most 49 threadblocks per rank" in proc.stderr


@pytest.fixture(scope="module")
def trees_program(trees_allgather):
    """The trees allgather of :func:`trees_allgather` lowered into a DSL program, as a user of the
    API holds it: 32 threadblocks on a rank compiled for the azure runtime, 16 where it must."""
    from codegen.lower import lower_algorithm
    from synth.algorithm import Algorithm

    return lower_algorithm(Algorithm.load(trees_allgather), "dgx1")


@pytest.fixture
def executed(monkeypatch):
    """Each IR the numpy backend executes once (``run``), kept."""
    ran = []
    real = NumpyBackend.run_once
    monkeypatch.setattr(
        NumpyBackend, "run_once", lambda self, ir, case: ran.append(ir) or real(self, ir, case)
    )
    return ran


def test_the_api_compiles_a_program_within_the_backend_s_threadblocks(trees_program, executed, monkeypatch):
    from xccl import api

    asked = []

    def bound(self, num_ranks: int, dtype: str, op: str) -> ThreadblockBound:
        asked.append((num_ranks, dtype, op))
        return ThreadblockBound(16, "a stub")

    monkeypatch.setattr(NumpyBackend, "rank_threadblocks", bound)
    assert api.run(trees_program, "1MiB", backend="numpy", dtype="i32", op="max").checked
    assert asked == [(8, "int32", "max")]
    assert max(len(g.threadblocks) for g in executed[0].gpus) == 16
    benched = []
    real = runtime.bench.bench
    monkeypatch.setattr(runtime.bench, "bench", lambda ir, *a, **k: benched.append(ir) or real(ir, *a, **k))
    report = api.bench(trees_program, "64KiB", backend="numpy", repeats=1)
    assert [row.check for row in report.rows] == ["ok"]
    assert asked[1:] == [(8, "float32", "sum")]
    assert max(len(g.threadblocks) for g in benched[0].gpus) == 16


def test_the_api_runs_an_ir_as_it_is_and_a_program_unbounded_where_the_backend_states_none(
    trees_program, executed
):
    from codegen.compiler import compile_program
    from xccl import api

    assert api.run(trees_program, "1MiB", backend="numpy").checked
    assert max(len(g.threadblocks) for g in executed[0].gpus) == 32  # the azure runtime's own limits
    ir = compile_program(trees_program)
    assert api.run(ir, "1MiB", backend="numpy").checked and executed[1] is ir
