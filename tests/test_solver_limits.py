"""Solver runs are bounded: time limits hold for the whole run (stated in the output), SIGTERM and
Ctrl-C keep what finished in every stage, and huge or non-finite values are refused up front."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, assert_one_line_error

from common.limits import LimitError
from synth.algorithm import Algorithm
from synth.collectives import make_collective
from synth.milp.solvers import BACKENDS
from synth.milp.solvers.highs import HighsBackend
from topologies import load

pytestmark = pytest.mark.serial  # time limits, signals and processes: run alone (see Makefile)

SHARED = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
"""How many runnable processes share each core now: the work after a limit (verifying, writing)
takes that much longer in wall time on a loaded machine (load 7 on 2 cores: 4.9 s for 4 s)."""
SLACK_S = 1.5 * SHARED
"""docs/cli.md: an SMT run ends within its limit plus about a second (verifying, tabulating)."""
MILP_SLACK_S = 3.0 * SHARED
"""docs/cli.md: synth milp also orders the chosen routes after the limit (seconds on dgx2x2 k=32)."""


def _timed(xccl, *args):
    began = time.monotonic()
    proc = xccl(*args)
    return proc, time.monotonic() - began


# -- 1. time limits bound the whole run and are stated -------------------------------------------


def test_instance_time_limit_covers_building_the_formula(xccl):
    """Building this formula in Python took 50 s, all of it outside z3's timeout."""
    args = ("synth", "smt", "instance", "-t", "torus:4x4", "-C", "alltoall", "-s", "8", "-c", "4")
    proc, seconds = _timed(xccl, *args, "--time-limit", "2", "--no-save")
    assert proc.returncode == 1, proc.stderr
    assert seconds < 2 + SLACK_S, seconds
    assert "within the time limit of 2 s" in proc.stdout
    assert proc.stderr.startswith("Time limit 2 s\n")


def test_pareto_time_limit_bounds_the_whole_walk_and_counts_instances(xccl):
    """Every instance from C=4 on is hard here: with the limit per instance the walk ran for hours."""
    proc, seconds = _timed(
        xccl, "pareto", "-t", "torus:4x4", "-C", "allgather", "--time-limit", "3", "--no-save"
    )
    assert proc.returncode == 1, proc.stderr
    assert seconds < 3 + SLACK_S, seconds
    assert "time limit 3 s in all, 3 s per instance" in proc.stdout  # the table's title
    assert "stopped at the time limit of 3 s" in proc.stdout
    assert "Solving allgather S=4 R=4 C=1 (instance 1 of at most " in proc.stderr
    assert "(S=4, R=4, C=1)" in proc.stdout  # what was found before the limit is kept


def test_pareto_and_milp_state_their_default_limits(xccl, tmp_path):
    proc = xccl("pareto", "-t", "ring:4", "-C", "allgather", "--no-save")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("Time limit 600 s in all, 60 s per instance\n")
    assert "time limit 600 s in all, 60 s per instance" in proc.stdout.splitlines()[0]
    out = tmp_path / "ag.json"
    proc = xccl("synth", "milp", "-t", "ring:4", "-k", str(_ring_sketch(tmp_path)), "-C", "allgather",
                "-s", "1KiB", "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "milp: time limit 600 s in all, 30 s per stage solve" in proc.stderr
    assert "time limit 600 s in all, 30 s per stage solve" in proc.stdout


def test_least_steps_time_limit_bounds_the_whole_search(xccl):
    args = ("synth", "smt", "least-steps", "-t", "torus:4x4", "-C", "alltoall", "-c", "4", "--no-save")
    proc, seconds = _timed(xccl, *args, "--time-limit", "2")
    assert proc.returncode == 1, proc.stderr
    assert seconds < 2 + SLACK_S, seconds
    assert "no algorithm found within the time limit of 2 s" in proc.stdout


def test_milp_time_limit_bounds_the_whole_run(xccl, tmp_path):
    """dgx2x2 at 1 GiB tries six chunkups of up to 31,744 sends: over 10 s with a limit per stage."""
    out = tmp_path / "ag.json"
    proc, seconds = _timed(xccl, "synth", "milp", "-t", "dgx2x2", "-k", "dgx2x2-relay", "-C", "allgather",
                           "-s", "1GiB", "--time-limit", "1", "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert seconds < 1 + MILP_SLACK_S, seconds
    assert "stopped at the time limit" in proc.stdout and "time limit 1 s in all" in proc.stdout
    Algorithm.load(out).verify(load("dgx2x2"))


def _ring_sketch(folder):
    path = folder / "ring.json"
    path.write_text('{"format": "xccl-sketch/1", "name": "ring"}')
    return path


# -- 2. SIGTERM takes Ctrl-C's path -----------------------------------------------------------


def _start(*args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "xccl.cli.main", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_until(proc, marker: str) -> str:
    seen = ""
    while marker not in seen:
        char = proc.stderr.read(1)
        assert char, f"exited early: {proc.wait()} {seen}"
        seen += char
    return seen


def test_sigterm_during_a_walk_writes_and_prints_the_front_so_far(tmp_path):
    """As the Ctrl-C test in test_smt_limits.py: C=1 is found in a second, then C=4 takes minutes."""
    proc = _start("pareto", "-t", "torus:4x4", "-C", "allgather", "-d", str(tmp_path))
    seen = _read_until(proc, "sat (")
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, seen + err)
    assert time.monotonic() - began < 10  # z3 is stopped, not waited for
    assert "terminated (SIGTERM)" in err
    assert "(S=4, R=4, C=1)" in out and "wrote" in out  # the front so far, printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allgather-torus4x4-s4-r4-c1.json"]


def test_sigterm_stops_a_long_z3_check(tmp_path):
    proc = _start("synth", "smt", "instance", "-t", "torus:4x4", "-C", "allgather", "-s", "4", "-r", "15",
                  "-c", "4", "-d", str(tmp_path))  # fmt: skip
    _read_until(proc, "Solving")
    time.sleep(1.0)  # inside z3's check by now
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    assert time.monotonic() - began < 10
    assert list(tmp_path.iterdir()) == []


# -- 3. Ctrl-C in MILP's last stage -----------------------------------------------------------


class _CtrlCWhileScheduling(HighsBackend):
    """HiGHS, with Ctrl-C pressed while the scheduling LP (the last stage) runs."""

    def solve(self, model, time_limit_s, threads=1):
        self._press = model.name.startswith("schedule-")
        return super().solve(model, time_limit_s, threads)

    def _run(self, h):
        return super()._run(_Interrupted(h) if self._press else h)


class _Interrupted:
    """A Highs object whose first wait raises KeyboardInterrupt, as Ctrl-C in the polling loop does."""

    def __init__(self, h):
        object.__setattr__(self, "_h", h)
        object.__setattr__(self, "_pressed", False)

    def wait(self, seconds):
        if not self._pressed:
            object.__setattr__(self, "_pressed", True)
            raise KeyboardInterrupt
        return self._h.wait(seconds)

    def __getattr__(self, name):
        return getattr(self._h, name)

    def __setattr__(self, name, value):
        setattr(self._h, name, value)


def test_ctrl_c_in_the_scheduling_stage_exits_130_and_keeps_the_result(xccl, tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "highs", _CtrlCWhileScheduling())
    out = tmp_path / "ag.json"
    proc = xccl("synth", "milp", "-t", "ndv2x2", "-k", "ndv2x2-relay", "-C", "allgather", "-s", "64KiB",
                "-o", str(out))  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert "milp: scheduling k=" in proc.stderr  # the interrupt came in the last stage
    assert "interrupted: best verified result kept" in proc.stdout
    algo = Algorithm.load(out)
    algo.verify(load("ndv2x2"))
    assert dict(algo.provenance.params)["interrupted"] is True


def test_ctrl_c_before_an_allreduce_has_both_halves_writes_nothing(xccl, tmp_path, monkeypatch):
    """The allgather half is interrupted: an allgather alone is no allreduce, so nothing is kept."""
    monkeypatch.setitem(BACKENDS, "highs", _CtrlCWhileScheduling())
    out = tmp_path / "ar.json"
    proc = xccl("synth", "milp", "-t", "ndv2x2", "-k", "ndv2x2-relay", "-C", "allreduce", "-s", "64KiB",
                "-o", str(out))  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert "nothing written" in proc.stderr and "reducescatter" not in proc.stderr
    assert not out.exists()


# -- 4. values and size limits ----------------------------------------------------------------

SMT = ("synth", "smt", "instance", "-t", "ring:4", "-C", "allgather", "-s", "2")
MILP = ("synth", "milp", "-t", "ndv2x2", "-k", "ndv2x2-relay", "-C", "allgather", "-s", "1KiB")
PARETO = ("pareto", "-t", "ring:4", "-C", "allgather", "--no-save")


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        (SMT, "--time-limit", "inf"),
        (SMT, "--time-limit", "nan"),
        (SMT, "--time-limit", "-1"),
        (PARETO, "--time-limit", "inf"),
        (PARETO, "--instance-time-limit", "0"),
        (MILP, "--time-limit", "nan"),
        (MILP, "--time-limit", "inf"),
        (MILP, "--time-limit", "-3"),
        (MILP, "--stage-time-limit", "nan"),
        (MILP, "--overhead-us", "nan"),
        (MILP, "--overhead-us", "-1"),
        (MILP, "--overhead-us", "inf"),
        (MILP, "--threads", "0"),
    ],
)
def test_non_finite_and_negative_values_are_one_line_errors(xccl, command, flag, value):
    assert_one_line_error(xccl(*command, flag, value), flag, repr(value))


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("pareto", "-t", "ring:4", "-C", "allgather", "--no-save", "--max-chunks", "100000"),
         "XCCL_MAX_PARETO_CHUNKS"),
        (("synth", "smt", "instance", "-t", "ring:4", "-C", "allgather", "-s", "2000000", "--no-save"),
         "XCCL_MAX_SMT_SENDS"),
        (("synth", "smt", "instance", "-t", "ring:4", "-C", "allgather", "-s", "1", "-r", "2000000",
          "--no-save"), "XCCL_MAX_SMT_SENDS"),
        (("synth", "smt", "least-steps", "-t", "ring:4", "-C", "allgather", "--max-steps", "2000000",
          "--no-save"), "XCCL_MAX_SMT_SENDS"),
        (("baseline", "ring", "-t", "ring:4", "-C", "allgather", "--chunks", "1000000000"), "XCCL_MAX_CHUNKS"),
        (("synth", "smt", "instance", "-t", "ring:4", "-C", "alltoall", "-s", "2", "-c", "1000000000",
          "--no-save"), "XCCL_MAX_CHUNKS"),
        ((*MILP, "--chunkup", "100000"), "XCCL_MAX_MILP_SENDS"),
    ],
)  # fmt: skip
def test_huge_requests_are_refused_before_work_naming_the_limit(xccl, args, env):
    proc, seconds = _timed(xccl, *args)
    assert_one_line_error(proc, "more than the limit of", env)
    assert seconds < 2


def test_a_limit_is_raised_by_its_environment_variable(monkeypatch):
    monkeypatch.setenv("XCCL_MAX_CHUNKS", "10")
    with pytest.raises(LimitError, match="XCCL_MAX_CHUNKS"):
        make_collective("allgather", 4, 3)
    monkeypatch.setenv("XCCL_MAX_CHUNKS", "12")
    assert len(make_collective("allgather", 4, 3).chunks) == 12


@pytest.mark.parametrize("name", ["allgather", "allreduce", "reducescatter", "alltoall", "broadcast",
                                  "reduce", "gather", "scatter"])  # fmt: skip
def test_the_size_limits_count_what_is_built(name):
    from synth.collectives import _WIDTH

    coll = make_collective(name, 5, 3)
    width = max(len(coll.inputs[0]), len(coll.outputs[0]))
    assert _WIDTH[name](5, 3) == (len(coll.chunks), width)


def test_one_rank_is_refused_in_one_line(xccl, tmp_path):
    one = tmp_path / "one.json"
    one.write_text('{"name": "one", "ranks": 1, "links": []}')
    for command in ("pareto", "least-steps"):
        args = ("pareto",) if command == "pareto" else ("synth", "smt", "least-steps")
        assert_one_line_error(xccl(*args, "-t", str(one), "-C", "allgather", "--no-save"), "one rank")


# -- 9. outputs checked before solving, written atomically ------------------------------------


def test_unwritable_outputs_are_refused_before_solving(xccl, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    folder = tmp_path / "folder"
    folder.mkdir()
    cases = [
        (*MILP, "-o", f"{afile}/ag.json"),
        ("pareto", "-t", "dgx1", "-C", "allgather", "-d", f"{afile}/front"),
        ("pareto", "-t", "dgx1", "-C", "allgather", "--no-save", "--plot", str(folder), "--force"),
        (
            "synth",
            "smt",
            "instance",
            "-t",
            "dgx1",
            "-C",
            "allgather",
            "-s",
            "2",
            "-o",
            str(folder),
            "--force",
        ),
        ("baseline", "ring", "-t", "dgx1", "-C", "allgather", "-o", f"{afile}/ag.json"),
    ]
    for args in cases:
        proc = xccl(*args)
        assert_one_line_error(proc, str(tmp_path))  # one line: no solver progress came before it
        assert "Solving" not in proc.stderr and "milp:" not in proc.stderr
    assert afile.read_text() == "mine" and list(folder.iterdir()) == []


def test_a_plot_replaces_an_old_one_whole(xccl, tmp_path):
    """The PNG is rendered in memory and renamed into place: whoever holds the old file keeps it."""
    plot = tmp_path / "front.png"
    plot.write_bytes(b"old plot")
    with open(plot, "rb") as old:
        proc = xccl("pareto", "-t", "ring:4", "-C", "allgather", "--no-save", "--plot", str(plot), "--force")
        assert proc.returncode == 0, proc.stderr
        assert old.read() == b"old plot"
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir()] == ["front.png"]


def test_sigterm_during_a_bench_prints_the_sizes_finished():
    proc = _start("bench", "example:ring_allreduce", "-D", "num_ranks=4", "--sizes", "1KiB:1GiB",
                  "--repeats", "20", "--json")  # fmt: skip
    _read_until(proc, "[3/21]")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    assert "terminated (SIGTERM)" in err or "interrupted" in err
    rows = json.loads(out)["rows"]
    assert 2 <= len(rows) < 21 and all(row["check"] == "ok" for row in rows)
