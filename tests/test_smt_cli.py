"""``xccl synth smt ...`` and ``xccl pareto``, run as a user runs them."""

from __future__ import annotations

import json

from conftest import assert_one_line_error

from synth.algorithm import Algorithm
from topologies import load


def test_instance_writes_a_verified_file_and_keeps_existing_ones(tmp_path, cli):
    args = ("synth", "smt", "instance", "-t", "dgx1", "-C", "allgather", "-s", "2", "-r", "3", "-c", "2")
    proc = cli(*args, "-d", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "Solving allgather S=2 R=3 C=2 ... sat (" in proc.stderr
    path = tmp_path / "allgather-dgx1-s2-r3-c2.json"
    algo = Algorithm.load(path)
    algo.verify(load("dgx1"))
    assert (algo.num_steps, algo.rounds, algo.chunks) == (2, 3, 2)
    assert cli("verify", str(path)).returncode == 0

    path.write_text("my notes")
    proc = cli(*args, "-d", str(tmp_path))
    assert_one_line_error_after_progress(proc, str(path), "--force")
    assert path.read_text() == "my notes"
    proc = cli(*args, "-d", str(tmp_path), "--force")
    assert proc.returncode == 0 and json.loads(path.read_text())["steps"] == 2


def assert_one_line_error_after_progress(proc, *fragments):
    """Exit 2; stderr is the progress line and then one error line naming what it should."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("xccl: error:")
    for fragment in fragments:
        assert fragment in last


def test_unsat_instance_exits_0_and_writes_nothing(tmp_path, cli):
    out = tmp_path / "x.json"
    proc = cli("synth", "smt", "instance", "-t", "dgx1", "-C", "allgather", "-s", "1", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "unsat" in proc.stdout and "S=1 R=1 C=1" in proc.stdout
    assert not out.exists()


def test_instance_rejects_bad_input_with_one_line(cli):
    proc = cli("synth", "smt", "instance", "-t", "dgx1", "-C", "allgather", "-s", "3", "-r", "2")
    assert_one_line_error(proc, "rounds >= steps")
    assert_one_line_error(cli("synth", "smt", "instance", "-t", "nope", "-C", "allgather", "-s", "2"), "nope")
    assert_one_line_error(
        cli("synth", "smt", "instance", "-t", "dgx1", "-C", "allgather", "-s", "0"), "steps"
    )
    proc = cli("synth", "smt", "instance", "-t", "dgx1", "-C", "allgather", "-s", "2", "--time-limit", "-1")
    assert_one_line_error(proc, "time-limit")


def test_smt2_dump(tmp_path, cli):
    out = tmp_path / "m.smt2"
    proc = cli(
        "synth", "smt", "instance", "-t", "ring:4", "-C", "reducescatter", "-s", "2", "--smt2", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().rstrip().endswith("(check-sat)")


def test_least_steps_writes_the_answer(tmp_path, cli):
    proc = cli(
        "synth", "smt", "least-steps", "-t", "ring:6", "-C", "allgather", "-o", str(tmp_path / "a.json")
    )
    assert proc.returncode == 0, proc.stderr
    assert "least steps, proven" in proc.stdout
    assert Algorithm.load(tmp_path / "a.json").num_steps == 3
    assert proc.stderr.count("Solving allgather") == 1  # 3 is the hop bound on a 6-ring


def test_least_steps_stops_at_max_steps(tmp_path, cli):
    proc = cli(
        "synth", "smt", "least-steps", "-t", "dgx1", "-C", "alltoall", "--max-steps", "2", "-d", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr
    assert "no algorithm with at most 2 steps" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_pareto_writes_front_table_and_plot(tmp_path, cli):
    plot = tmp_path / "front.png"
    proc = cli("pareto", "-t", "ring:4", "-C", "allgather", "-d", str(tmp_path / "out"), "--plot", str(plot))
    assert proc.returncode == 0, proc.stderr
    assert "bandwidth optimal" in proc.stdout
    assert "modeled: calibrated, Simple" in proc.stdout  # every time in the table is modeled, in this model
    for column in (
        "R/C",
        "status",
        "S*alpha us",
        "modeled us@1MiB",
        "vs NCCL layout@1GiB",
        "vs NCCL model@1KiB",
    ):
        assert column in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["allgather-ring4-s2-r3-c2.json"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert proc.stderr.count("Solving allgather") == 2

    proc = cli("pareto", "-t", "ring:4", "-C", "allgather", "-d", str(tmp_path / "out"))
    assert_one_line_error_after_progress(proc, "--force")
    proc = cli(
        "pareto",
        "-t",
        "ring:4",
        "-C",
        "allgather",
        "-d",
        str(tmp_path / "out"),
        "--force",
        "--max-chunks",
        "0",
    )
    assert_one_line_error(proc, "max-chunks")


def test_same_command_writes_the_same_bytes(tmp_path, cli):
    for name in ("a", "b"):
        args = ("synth", "smt", "instance", "-t", "dgx1", "-C", "allgather", "-s", "2", "-r", "3", "-c", "2")
        assert cli(*args, "-d", str(tmp_path / name)).returncode == 0
    first, second = (tmp_path / n / "allgather-dgx1-s2-r3-c2.json" for n in ("a", "b"))
    assert first.read_bytes() == second.read_bytes()


def test_pareto_allreduce_composes(cli):
    proc = cli("pareto", "-t", "ring:4", "-C", "allreduce", "--no-save")
    assert proc.returncode == 0, proc.stderr
    assert "composed" in proc.stdout and "allreduce-ring:4-s4-r6-c8" in proc.stdout
