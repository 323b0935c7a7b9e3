"""Time limits give "unknown" and write nothing; Ctrl-C keeps what was found."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT

from synth.collectives import make_collective
from synth.smt import least_steps, pareto_front, solve_instance
from topologies import load

pytestmark = pytest.mark.serial  # time limits, signals and processes: run alone (see Makefile)

HARD = ("dgx1", "alltoall", "8", "8", "3")  # SCCL's hardest DGX-1 instance: seconds, not 0.3 s


def test_time_limit_gives_unknown():
    topo = load("dgx1")
    out = solve_instance(topo, make_collective("alltoall", 8, 3), 8, 8, time_limit_s=0.3)
    assert out.word == "unknown" and out.algorithm is None
    assert "time limit" in out.message()


def test_time_limit_on_the_command_line_writes_nothing(tmp_path, cli):
    topo, coll, s, r, c = HARD
    proc = cli("synth", "smt", "instance", "-t", topo, "-C", coll, "-s", s, "-r", r, "-c", c,
               "--time-limit", "0.3", "-d", str(tmp_path))  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "unknown" in proc.stdout and "unknown" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def _interrupt_after_first_sat(outcome):
    if outcome.word == "sat":
        raise KeyboardInterrupt


def test_interrupted_front_keeps_what_was_found():
    front = pareto_front(load("dgx1"), "allgather", on_outcome=_interrupt_after_first_sat)
    assert front.stop == "interrupted"
    assert [(a.num_steps, a.rounds, a.chunks) for a in front.found] == [(2, 2, 1)]
    assert front.algorithms == front.found
    front.algorithms[0].verify(load("dgx1"))


def test_interrupted_least_steps_keeps_the_algorithm_it_just_found():
    result = least_steps(
        load("ring:6"), make_collective("allgather", 6, 1), on_outcome=_interrupt_after_first_sat
    )
    assert result.stop == "found" and result.algorithm.num_steps == 3


def test_least_steps_stopped_by_its_time_limit_between_instances_proves_nothing(xccl):
    """The deadline passed before the next S was tried: the S it never tried may be infeasible,
    so the search is open (exit 1), not proven (it exited 0 when every instance it ran had
    answered: under load the 2 s case of test_solver_limits.py did so)."""
    result = least_steps(load("ring:4"), make_collective("allgather", 4, 1), time_limit_s=1e-9)
    assert result.stop == "time limit" and result.outcomes == () and not result.proven
    proc = xccl("synth", "smt", "least-steps", "-t", "ring:4", "-C", "allgather", "--no-save",
                "--time-limit", "1e-9")  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    assert "no algorithm found within the time limit" in proc.stdout


def _ctrl_c_as_in_a_terminal() -> None:
    """A shell starts a background job with SIGINT ignored, and the child inherits that: the suite
    run as one (``make test &``) would send a Ctrl-C that Python never sees, while z3, which takes
    SIGINT during its checks only, sees it only when it lands inside one. Reset it, as a terminal has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_on_the_command_line_writes_the_front_so_far(tmp_path):
    """The 4x4-torus allgather walk finds C=1 in about a second, then works long on the
    bandwidth-optimal C=4 (C=2 and C=3 would only match R/C = 4)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "xccl.cli.main",
        "pareto",
        "-t",
        "torus:4x4",
        "-C",
        "allgather",
        "-d",
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    seen = ""
    while "sat (" not in seen:
        char = proc.stderr.read(1)
        assert char, f"exited early: {proc.wait()} {seen}"
        seen += char
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, seen + err)
    assert "interrupted" in seen + err
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["allgather-torus4x4-s4-r4-c1.json"], (written, out)
    assert "wrote" in out
