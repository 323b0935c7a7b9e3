"""The benchmark harness and its backend registry."""

from __future__ import annotations

import json

import pytest
import runtime_samples as samples
from ir_edit import edit_op

from codegen.ir import Buffer, Ref
from runtime import bench as bench_module
from runtime.bench import (
    BACKEND_MODULES,
    TABLE_HEADERS,
    TIMINGS,
    Backend,
    BenchCase,
    BenchError,
    Trial,
    aligned_size,
    backends,
    bench,
    get_backend,
    register_backend,
)
from runtime.errors import SizeNotSelected
from topologies.builders import ring

TESTED_HERE = {"numpy", "sim"}
"""Backends this file exercises; others (cupy) bring their own tests."""


def test_registry_is_honest():
    table = backends()
    assert set(table) >= TESTED_HERE
    for name, cls in table.items():
        assert cls.name == name and issubclass(cls, Backend)
        assert cls.description and cls.timing in TIMINGS and isinstance(cls.checks, bool)
        assert isinstance(cls.available(), bool)
        # cupy: tests/test_cupy_*.py; torch: tests/test_torch_backend.py
        assert name in TESTED_HERE or cls.__module__.startswith(("runtime.cupy", "runtime.torch")), name
    assert BACKEND_MODULES[0] == "runtime.backends"


@pytest.mark.parametrize("backend", sorted(TESTED_HERE))
def test_every_backend_benchmarks_a_ring_allgather(backend):
    ir = samples.ring_allgather(4)
    report = bench(ir, [4096, 1 << 16], backend=backend, topology=ring(4), warmup=1, repeats=3)
    assert [row.size_bytes for row in report.rows] == [4096, 1 << 16]
    cls = backends()[backend]
    for row in report.rows:
        assert row.count == row.size_bytes // 4 and row.dtype == "float32" and row.op == "sum"
        assert row.time_us > 0
        assert row.algbw_GBps == pytest.approx(row.size_bytes / row.time_us / 1e3)
        assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 3 / 4)
        assert row.check == ("ok" if cls.checks else "not checked")
        assert row.note == (None if cls.checks else f"the {backend} backend moves no data")
        assert len(row.cells()) == len(TABLE_HEADERS)
    data = json.loads(json.dumps(report.to_json()))
    assert data["backend"] == backend and data["timing"] == cls.timing and len(data["rows"]) == 2


def test_sim_backend_times_the_model():
    ir = samples.ring_allgather(4)
    topo = ring(4, 25.0, 0.7)
    ideal = {"model": "ideal"}
    report = bench(ir, [1 << 20], backend="sim", topology=topo, repeats=1, warmup=0, options=ideal)
    assert report.rows[0].time_us == pytest.approx(3 * (0.7 + (1 << 18) / 25e3))
    calibrated = bench(ir, [1 << 20], backend="sim", topology=topo, repeats=1, warmup=0)
    assert calibrated.rows[0].time_us == pytest.approx(4.64 + 3 * (2.8 + 0.7 + (1 << 18) / 20e3))
    with pytest.raises(BenchError, match="needs a topology"):
        bench(ir, [1 << 20], backend="sim")


def test_sizes_round_down_to_what_the_runtime_selects():
    ir = samples.ring_allreduce(3)  # nchunksperloop 3
    assert aligned_size(ir, 1000, "float32") == 996
    with pytest.raises(SizeNotSelected, match="smallest size it runs at, 12 B"):
        aligned_size(ir, 8, "float32")
    report = bench(ir, [1000], inplace=True, dtype="i64", op="max", repeats=1)
    assert report.rows[0].size_bytes == 984 and report.rows[0].check == "ok" and report.ok


def test_wrong_results_are_reported_in_the_row():
    ir = samples.ring_allgather(4)
    broken = edit_op(ir, 1, 0, len(ir.gpus[1].threadblocks[0].ops) - 2, dst=Ref(Buffer.OUTPUT, 0))
    report = bench(broken, [4096], repeats=1, warmup=0)
    assert report.rows[0].check == "wrong" and "rank 1" in report.rows[0].error and not report.ok


def test_a_size_that_deadlocks_gets_a_row_and_the_next_size_runs():
    """Every rank sends 3 chunks before it receives: in one call while 3 chunks fit a tile, in 3
    calls (more than Simple's FIFO holds) once a chunk fills the tile."""
    ir = samples.ring_allgather(4, chunks=3, aggregate=True)
    tile = 1024
    small, large = (ir.nchunksperloop * elems * 4 for elems in (64, 256))  # 256 B and 1 KiB chunks
    report = bench(ir, [large, small], repeats=1, warmup=0, options={"tile_bytes": tile})
    stuck, fine = report.rows
    assert (stuck.check, stuck.time_us, stuck.algbw_GBps) == ("deadlock", None, None)
    assert "waits for room to send" in stuck.error and stuck.cells()[4:] == ("-", "-", "-", "deadlock")
    assert fine.check == "ok" and fine.time_us > 0
    assert not report.ok and json.loads(json.dumps(report.to_json()))["rows"][0]["time_us"] is None


def test_ctrl_c_keeps_the_finished_rows():
    seen = []

    def stop_after_first(row):
        seen.append(row)
        raise KeyboardInterrupt

    report = bench(samples.ring_allgather(4), [4096, 8192], repeats=1, on_row=stop_after_first)
    assert report.interrupted and len(report.rows) == 1 and seen == list(report.rows)


def test_unknown_and_unavailable_backends():
    with pytest.raises(BenchError, match="expected one of"):
        get_backend("tpu")
    with pytest.raises(BenchError, match="unexpected keyword"):
        get_backend("numpy", colour="red")

    @register_backend
    class Absent(Backend):
        name, description, timing, checks = "absent-for-test", "never here", "device", True

        @classmethod
        def available(cls) -> bool:
            return False

        def prepare(self, ir, case: BenchCase, topology) -> Trial:
            raise AssertionError("never prepared")

    try:
        with pytest.raises(BenchError, match="not available here"):
            get_backend("absent-for-test")
    finally:
        del bench_module.BACKENDS["absent-for-test"]
