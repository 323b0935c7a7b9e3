"""``xccl bench`` and ``xccl run``, run as a user runs them."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error
from test_runtime_xml import allpairs_allgather_xml, ring_allreduce_xml

import runtime.bench
from runtime.bench import TABLE_HEADERS
from synth.algorithm import Algorithm
from synth.cost import simulate as simulate_algorithm
from topologies import load


def _rows(stdout: str) -> list[list[str]]:
    """The table's rows (after the header and its rule), split into cells."""
    lines = stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.split()[:2] == list(TABLE_HEADERS[:2]))
    return [line.split() for line in lines[start + 2 :] if line and not line.startswith("#")]


def test_bench_an_example_on_numpy(cli):
    proc = cli("bench", "example:ring_allreduce", "-D", "num_ranks=4", "--sizes", "1KiB:4KiB", "-n", "2")
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    assert [r[0] for r in rows] == ["1024", "2048", "4096"]
    for size, count, dtype, op, time_us, algbw, busbw, check in rows:
        assert (int(count), dtype, op, check) == (int(size) // 4, "float32", "sum", "ok")
        assert float(time_us) > 0 and float(busbw) == pytest.approx(float(algbw) * 2 * 3 / 4, abs=0.011)
    assert "in-place" in proc.stdout.splitlines()[0]  # the program allows nothing else
    assert "# Avg bus bandwidth" in proc.stdout
    assert [line.split(":")[0] for line in proc.stderr.splitlines()] == [
        "[1/3] 1KiB",
        "[2/3] 2KiB",
        "[3/3] 4KiB",
    ]


def test_bench_an_algorithm_on_the_simulator_of_its_topology(tmp_path, cli):
    algo_path = tmp_path / "ag.json"
    assert cli("baseline", "ring", "-t", "dgx1", "-C", "allgather", "-o", str(algo_path)).returncode == 0
    proc = cli("bench", str(algo_path), "--backend", "sim", "--sizes", "1MiB,1GiB", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["backend"] == "sim" and report["device"] == "alpha-beta model of dgx1"
    algo, topo = Algorithm.load(algo_path), load("dgx1")
    for row in report["rows"]:
        assert row["check"] == "not checked" and row["note"] == "the sim backend moves no data"
        model = simulate_algorithm(algo, topo, row["size_bytes"]).time_us
        assert row["time_us"] == pytest.approx(model, rel=0.05)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 7 / 8)


def test_run_an_algorithm_and_a_hand_written_xml(tmp_path, cli):
    algo_path = tmp_path / "ar.json"
    assert cli("baseline", "ring", "-t", "ring:4", "-C", "allreduce", "-o", str(algo_path)).returncode == 0
    proc = cli("run", str(algo_path), "--size", "1MiB", "--dtype", "f16", "--op", "max", "--inplace")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok: ") and "1MiB (524288 float16), max, in-place" in proc.stdout
    xml = tmp_path / "ring.xml"
    xml.write_text(ring_allreduce_xml(4))
    proc = cli("run", str(xml), "--size", "1000B", "--dtype", "i32")
    assert proc.returncode == 0, proc.stderr
    assert "992B (248 int32, rounded down from 1000B)" in proc.stdout and "in-place" in proc.stdout


def test_a_wrong_result_exits_1_with_one_line_naming_rank_buffer_chunk_and_index(tmp_path, cli):
    bad = tmp_path / "bad.xml"
    bad.write_text(allpairs_allgather_xml(4, inplace=False, wrong_rank=1))
    proc = cli("run", str(bad), "--size", "4KiB")
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    assert line.startswith("xccl run: failed at 4KiB: ") and "rank 1: output[1] element 0: expected" in line
    proc = cli("bench", str(bad), "--sizes", "1KiB,2KiB", "-n", "1")
    assert proc.returncode == 1
    assert [r[-1] for r in _rows(proc.stdout)] == ["wrong", "wrong"]
    assert "xccl bench: failed at 1KiB: " in proc.stderr


def test_bad_input_exits_2_with_one_line(tmp_path, cli, xccl):
    assert_one_line_error(cli("run", str(tmp_path / "missing.xml")), "missing.xml", "cannot read")
    xml = tmp_path / "ring.xml"
    xml.write_text(ring_allreduce_xml(4).replace('  <gpu id="1"', '\t<gpu id="1"'))
    assert_one_line_error(xccl("run", str(xml)), "ring.xml:", "expected '<'")
    xml.write_text(ring_allreduce_xml(4))
    cases = [
        (("bench", str(xml), "--backend", "sim"), "pass --topology"),
        (("bench", str(xml), "--backend", "sim", "-t", "ring:8"), "topology ring:8 has 8"),
        (("run", str(xml), "--dtype", "f17"), "dtype 'f17'"),
        (("run", str(xml), "--size", "1QB"), "size '1QB'"),
        (("run", str(xml), "--size", "8B"), "smallest size it runs at"),
        (("bench", str(xml), "--sizes", "4KiB:1KiB"), "LOW <= HIGH"),
        (("bench", str(xml), "--repeats", "0"), "repeats >= 1"),
        (("run", str(xml), "-D", "n=4"), "-D applies to DSL programs"),
        (("run", "example:nope"), "unknown example 'nope'"),
        (("run", str(tmp_path / "x.txt")), "expected an algorithm (.json)"),
        (("run", str(xml), "--backend", "sim"), "invalid choice: 'sim'"),
    ]
    for args, fragment in cases:
        assert_one_line_error(xccl(*args), fragment)


def test_ctrl_c_keeps_the_finished_rows(monkeypatch, xccl):
    measure = runtime.bench._measure
    calls = []

    def interrupted_on_the_second_size(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(*args)

    monkeypatch.setattr(runtime.bench, "_measure", interrupted_on_the_second_size)
    proc = xccl("bench", "example:ring_allreduce", "-D", "num_ranks=4", "--sizes", "1KiB:4KiB", "-n", "1")
    assert proc.returncode == 130
    assert [r[0] for r in _rows(proc.stdout)] == ["1024"]
    assert "interrupted: 1 of 3 sizes done" in proc.stderr
