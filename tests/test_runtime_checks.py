"""What ``xccl run`` / ``xccl bench`` (and ``xccl.run`` / ``xccl.bench``) promise about a result:
"ok" only when every output was compared, a custom collective checked against the result its
program declares, sizes refused or skipped where the runtime would not select the IR (its
minBytes/maxBytes window as each dialect reads it), the memory limit checked before allocating,
and every bad size or bad program a one-line error."""

from __future__ import annotations

import doctest
import json
from dataclasses import replace
from pathlib import Path

import pytest
import runtime_samples as samples
from conftest import assert_one_line_error

import codegen.custom
import xccl
from codegen import compile_program, custom_collective, load_program, write_ir
from codegen.errors import DslError
from common.errors import XcclError
from runtime.bench import CHECKS, bench
from runtime.errors import MemoryLimitError, SizeNotSelected
from runtime.numpy import run
from runtime.selection import check_window

SHIFT = str(Path(__file__).resolve().parent.parent / "docs" / "examples" / "shift.py")
"""The DSL example of docs/dsl.md: a cyclic shift, a custom collective with a declared result."""


def _rows(stdout: str) -> list[list[str]]:
    """The table's rows, split into cells (the check column may hold two words)."""
    lines = stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("size(B)"))
    return [line.split(maxsplit=7) for line in lines[start + 2 :] if line and not line.startswith("#")]


def _windowed(tmp_path: Path, dialect: str, low: int, high: int) -> str:
    """A ring allreduce in ``dialect`` with that window (written as text: the writer refuses
    ``minBytes > maxBytes``, other tools need not)."""
    text = write_ir(replace(samples.ring_allreduce(4), min_bytes=0, max_bytes=high), dialect)
    path = tmp_path / f"windowed-{dialect}-{low}-{high}.xml"
    path.write_text(text.replace('minBytes="0"', f'minBytes="{low}"', 1))
    return str(path)


# -- 1. no "ok" without a check ----------------------------------------------------------------


@pytest.fixture
def shift_xml(tmp_path) -> str:
    """The shift program compiled to XML: the file cannot carry the declared result."""
    path = tmp_path / "shift.xml"
    path.write_text(write_ir(compile_program(load_program(SHIFT), dialect="msccl"), "msccl"))
    return str(path)


def test_a_custom_ir_without_a_declared_result_is_not_checked(shift_xml, xccl):
    proc = xccl("run", shift_xml, "--size", "4KiB")
    assert proc.returncode == 0 and proc.stdout.startswith("not checked: shift: custom on 4 ranks")
    assert "matches" not in proc.stdout and "no declared result" in proc.stdout
    proc = xccl("run", shift_xml, "--size", "4KiB", "--json")
    (row,) = json.loads(proc.stdout)["rows"]
    assert (row["check"], json.loads(proc.stdout)["all_checked"]) == ("not checked", False)
    proc = xccl("run", shift_xml, "--size", "4KiB", "--check")
    assert proc.returncode == 1 and "--check: 1 of 1 size(s) not checked" in proc.stderr
    proc = xccl("bench", shift_xml, "--sizes", "1KiB,4KiB", "-n", "1", "-w", "0")
    assert proc.returncode == 0 and [r[-1] for r in _rows(proc.stdout)] == ["not checked"] * 2
    assert "outputs not checked (custom collective with no declared result" in proc.stdout
    assert xccl("bench", shift_xml, "--sizes", "1KiB", "-n", "1", "--check").returncode == 1


def test_a_dsl_program_declares_the_result_and_it_is_compared(xccl):
    proc = xccl("run", SHIFT, "--size", "4KiB", "--check")
    assert proc.returncode == 0 and proc.stdout.startswith("ok: shift: custom on 4 ranks"), proc.stderr
    proc = xccl("bench", SHIFT, "-D", "num_ranks=3", "--sizes", "1KiB,4KiB", "-n", "1", "--check", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and [r["check"] for r in report["rows"]] == ["ok", "ok"]
    assert report["all_checked"] is True


def test_the_declared_result_is_what_the_outputs_are_compared_with():
    prog = load_program(SHIFT)
    ir = compile_program(prog, dialect="msccl")
    assert run(ir, 4096, declared=prog.collective).checked
    assert not run(ir, 4096).checked
    two_ahead = custom_collective(4, 1, 1, {((r + 2) % 4, 0): (r, 0) for r in range(4)})
    (row,) = bench(ir, [4096], repeats=1, warmup=0, declared=two_ahead).rows
    assert row.check == "wrong" and "rank 0" in row.error


def test_a_declared_result_follows_the_instances_the_program_is_compiled_with():
    prog = load_program(SHIFT)
    ir = compile_program(prog, dialect="msccl", instances=2)
    assert ir.nchunksperloop == 2 and run(ir, 4096, declared=prog.collective).checked


def test_custom_collective_doctest():
    result = doctest.testmod(codegen.custom)
    assert result.failed == 0 and result.attempted > 0


def test_custom_collective_refuses_what_it_cannot_state():
    with pytest.raises(DslError, match=r"output slot \(4, 0\)"):
        custom_collective(4, 1, 1, {(4, 0): (0, 0)})
    with pytest.raises(DslError, match="input chunk"):
        custom_collective(2, 1, 1, {(1, 0): (0, 1)})
    with pytest.raises(DslError, match="ranks: expected an integer >= 1"):
        custom_collective(0, 1, 1, {})


def test_every_row_says_one_of_the_checks():
    report = bench(samples.ring_allgather(4), [2, 4096], backend="numpy", repeats=1)
    assert [row.check for row in report.rows] == ["skipped", "ok"] and set(CHECKS) >= {"not checked"}


# -- 2. sizes outside the XML's window ---------------------------------------------------------


def test_the_window_as_each_dialect_reads_it():
    ar = replace(samples.ring_allreduce(4), min_bytes=4096, max_bytes=65536)
    for size in (4096, 65536):
        check_window(ar, size, "azure")  # azure: both bounds inclusive
    check_window(ar, 4096, "msccl")
    for size, dialect in ((2048, "azure"), (131072, "azure"), (65536, "msccl"), (2048, "msccl")):
        with pytest.raises(SizeNotSelected, match="outside the algorithm's window"):
            check_window(ar, size, dialect)
    check_window(replace(ar, max_bytes=0), 1 << 40, "azure")  # 0: no limit
    # both compare an allgather's whole buffer (NCCL's nBytes is its per-rank count times the ranks)
    ag = replace(samples.ring_allgather(4), min_bytes=4096, max_bytes=65536)
    for size in (4096, 8192, 16384):
        check_window(ag, size, "msccl")
    with pytest.raises(SizeNotSelected, match="compares 65536 bytes and selects it only for"):
        check_window(ag, 65536, "msccl")
    with pytest.raises(SizeNotSelected, match="bytes <= maxBytes 65536"):
        check_window(ag, 131072, "azure")


def test_a_window_that_no_runtime_selects():
    never = replace(samples.ring_allreduce(4), min_bytes=8192, max_bytes=4096)
    for dialect in ("azure", "msccl"):
        with pytest.raises(SizeNotSelected, match="minBytes 8192 > maxBytes 4096: no runtime ever selects"):
            check_window(never, 4096, dialect)
    with pytest.raises(SizeNotSelected, match=r"window \[minBytes, maxBytes\) is empty"):
        check_window(replace(never, max_bytes=8192), 8192, "msccl")


def test_run_refuses_a_size_outside_the_window_of_the_files_dialect(tmp_path, xccl):
    azure = _windowed(tmp_path, "azure", 4096, 65536)
    research = _windowed(tmp_path, "msccl", 4096, 65536)
    assert xccl("run", azure, "--size", "64KiB").returncode == 0
    for path, size, bound in (
        (azure, "2KiB", "minBytes 4096 <= bytes <= maxBytes 65536"),
        (azure, "128KiB", "<= maxBytes 65536"),
        (research, "64KiB", "minBytes 4096 <= bytes < maxBytes 65536"),
    ):
        assert_one_line_error(xccl("run", path, "--size", size), "outside the algorithm's window", bound)
    never = _windowed(tmp_path, "azure", 65537, 65536)
    assert_one_line_error(xccl("run", never, "--size", "4KiB"), "no runtime ever selects this algorithm")


# -- 3. bench skips what it cannot run, and runs the rest ---------------------------------------


def test_bench_skips_sizes_outside_the_window_and_runs_the_rest(tmp_path, xccl):
    path = _windowed(tmp_path, "azure", 4096, 65536)
    proc = xccl("bench", path, "--sizes", "1KiB:256KiB:4", "-n", "1", "-w", "0")
    assert proc.returncode == 0, proc.stderr
    assert [r[-1] for r in _rows(proc.stdout)] == ["skipped", "ok", "ok", "ok", "skipped"]
    assert "# skipped 1KiB: ring-allreduce-n4-ch1: 1KiB is outside the algorithm's window" in proc.stdout
    assert "# skipped 256KiB:" in proc.stdout
    report = json.loads(xccl("bench", path, "--sizes", "1KiB,4KiB", "-n", "1", "--json").stdout)
    skipped, ran = report["rows"]
    assert (skipped["check"], skipped["time_us"], ran["check"]) == ("skipped", None, "ok")
    assert "minBytes 4096" in skipped["note"]
    proc = xccl("bench", path, "--sizes", "1KiB,4KiB", "-n", "1", "--check")
    assert proc.returncode == 1 and "1KiB skipped: " in proc.stderr


def test_bench_skips_a_size_below_one_element_per_chunk(tmp_path, xccl):
    path = _windowed(tmp_path, "azure", 0, 0)  # nchunksperloop 4: 16 B is the least f32 size
    proc = xccl("bench", path, "--sizes", "8,4KiB", "-n", "1")
    assert proc.returncode == 0 and [r[-1] for r in _rows(proc.stdout)] == ["skipped", "ok"]
    assert "smallest size it runs at, 16 B" in proc.stdout


def test_bench_with_no_selectable_size_is_bad_input(tmp_path, xccl):
    path = _windowed(tmp_path, "azure", 4096, 65536)
    assert_one_line_error(
        xccl("bench", path, "--sizes", "1KiB,1MiB"), "none of the 2 requested sizes can run"
    )
    never = _windowed(tmp_path, "msccl", 65537, 65536)
    assert_one_line_error(xccl("bench", never, "--sizes", "4KiB,1MiB"), "no runtime ever selects")


# -- 5. the memory limit, before anything is allocated ------------------------------------------


def test_run_refuses_a_size_beyond_the_memory_limit(xccl, monkeypatch):
    proc = xccl("run", "example:ring_allreduce", "--size", "256GiB")
    assert_one_line_error(
        proc, "needs about", "host memory, above the limit of", "XCCL_MAX_MEMORY", "--max-memory"
    )
    monkeypatch.setenv("XCCL_MAX_MEMORY", "1MiB")
    proc = xccl("run", "example:ring_allreduce", "-D", "num_ranks=4", "--size", "1MiB")
    assert_one_line_error(proc, "above the limit of 1MiB (XCCL_MAX_MEMORY)")
    proc = xccl(
        "run", "example:ring_allreduce", "-D", "num_ranks=4", "--size", "64KiB", "--max-memory", "1GiB"
    )
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(MemoryLimitError, match="above the limit of 1MiB"):
        run(samples.ring_allreduce(4), 1 << 30)


def test_the_reference_stays_within_what_the_memory_check_counts():
    """The check counts the reference as its terms and their float64 copy: the stacked inputs and
    the absolute values' array must be gone or reused, or a run the check let through runs out."""
    import tracemalloc

    import numpy as np

    from runtime.program import collective_of
    from runtime.reference import reference

    coll = collective_of(samples.ring_allreduce(8))
    chunk = 1 << 14
    inputs = [np.ones(coll.input_chunks * chunk, dtype=np.float32) for _ in range(8)]
    counted = sum(x.nbytes for x in inputs) * (1 + 8 // 4) + 2 * coll.num_addresses * 8 * chunk
    tracemalloc.start()
    try:
        reference(coll, inputs, chunk, "sum")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= counted * 1.05, (peak, counted)


def test_running_out_of_memory_is_a_one_line_error(xccl, monkeypatch):
    """What the memory check cannot see (``ulimit -v``, a cgroup) ends as one line, not a traceback."""

    def refuse(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("runtime.reference.reference", refuse)
    proc = xccl("run", "example:ring_allreduce", "-D", "num_ranks=4", "--size", "64KiB")
    assert_one_line_error(proc, "xccl: error: run: out of memory", "smaller size or more memory")


def test_bench_skips_sizes_beyond_the_memory_limit_and_sim_has_none(xccl, monkeypatch):
    proc = xccl(
        "bench",
        "example:ring_allreduce",
        "-D",
        "num_ranks=4",
        "--sizes",
        "1KiB,1MiB",
        "-n",
        "1",
        "--max-memory",
        "2MiB",
    )
    assert proc.returncode == 0 and [r[-1] for r in _rows(proc.stdout)] == ["ok", "skipped"]
    assert "# skipped 1MiB: allreduce-ring-4: executing at 1MiB on 4 ranks needs about" in proc.stdout
    monkeypatch.setenv("XCCL_MAX_MEMORY", "1KiB")  # the model allocates nothing
    proc = xccl("bench", "example:ring_allreduce", "--sizes", "1GiB", "--backend", "sim", "-n", "1")
    assert proc.returncode == 0 and [r[-1] for r in _rows(proc.stdout)] == ["not checked"]
    assert_one_line_error(
        xccl("bench", "example:ring_allreduce", "-b", "sim", "--max-memory", "1GiB"),
        "--max-memory: the sim backend",
    )


# -- 4. size arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("bench", "--sizes", "2.5"), "--sizes: size '2.5'"),
        (("bench", "--sizes", "x"), "--sizes: size 'x'"),
        (("bench", "--sizes", ","), "--sizes: sizes ','"),
        (("bench", "--sizes", "1KiB:1MiB:2.5"), "FACTOR '2.5'"),
        (("run", "--size", "2.5"), "--size: size '2.5'"),
        (("run", "--size", "0"), "at least 1 byte"),
        (("run", "--max-memory", "lots"), "--max-memory: size 'lots'"),
        (("bench", "-b", "sim", "--check"), "--check: the sim backend moves no data"),
    ],
)
def test_bad_size_arguments_are_one_line_errors(xccl, args, fragment):
    command, *rest = args
    assert_one_line_error(xccl(command, "example:ring_allreduce", "-D", "num_ranks=4", *rest), fragment)


# -- 6. the Python API ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1.5, True, -1, 0, "2.5", None, [4096]])
def test_api_run_and_bench_refuse_bad_sizes_with_an_xccl_error(size):
    ir = samples.ring_allreduce(4)
    with pytest.raises(XcclError, match="size"):
        xccl.run(ir, size, backend="numpy")
    with pytest.raises(XcclError, match="size"):
        xccl.bench(ir, [size], backend="numpy")


def test_api_bench_and_run_refuse_bad_arguments():
    ir = samples.ring_allreduce(4)
    for kwargs in ({"warmup": 1.5}, {"repeats": True}, {"repeats": 0}, {"warmup": -1}):
        with pytest.raises(XcclError, match="expected an integer"):
            xccl.bench(ir, "4KiB", backend="numpy", **kwargs)
    with pytest.raises(XcclError, match="sizes 4096"):
        xccl.bench(ir, 4096, backend="numpy")
    with pytest.raises(XcclError, match="inplace"):
        xccl.run(ir, "4KiB", backend="numpy", inplace="yes")
    with pytest.raises(XcclError, match="expected an IR, a DSL Program or an IR file"):
        xccl.run(42, "4KiB")
    with pytest.raises(SizeNotSelected, match="outside the algorithm's window"):
        xccl.run(replace(ir, max_bytes=1024), "4KiB", backend="numpy")


def test_api_runs_a_program_and_checks_its_declared_result():
    assert xccl.run(load_program(SHIFT), "4KiB", backend="numpy").checked
    report = xccl.bench(load_program(SHIFT), "1KiB,4KiB", backend="numpy", repeats=1)
    assert [row.check for row in report.rows] == ["ok", "ok"]


# -- 7. a program that exits while loading ------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "call"),
    [
        ("import sys\nsys.exit(0)\n", "sys.exit(0)"),
        ("def program():\n    raise SystemExit\n", "sys.exit()"),
        ("exit('bye')\n", "sys.exit('bye')"),
    ],
)
def test_a_program_that_exits_while_loading_is_an_error(tmp_path, xccl, source, call):
    path = tmp_path / "program.py"
    path.write_text(source)
    for command in ("run", "compile"):
        assert_one_line_error(xccl(command, str(path)), f"program.py called {call} while loading")
    with pytest.raises(DslError, match="while loading"):
        load_program(path)


def test_the_dsl_doc_shows_the_example_it_runs():
    doc = (Path(SHIFT).parent.parent / "dsl.md").read_text()
    section = doc.split("## A custom collective", 1)[1]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert shown == Path(SHIFT).read_text()
