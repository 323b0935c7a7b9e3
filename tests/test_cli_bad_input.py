"""The mistakes a user makes first, each answered with one line and exit status 2, before any
solving starts, and with nothing of theirs overwritten (found by a sweep over every command)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import ROOT, assert_one_line_error

from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.milp import synthesis as milp_synthesis
from synth.plots import PlotError, plot_front
from topologies import load

NVIDIA_SMI = str(ROOT / "docs" / "examples" / "nvidia-smi-topo-dgx1.txt")



@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A file of the user's, in the way of a folder or an output."""
    path = tmp_path / "notes.txt"
    path.write_text("my notes")
    return path


def test_a_file_where_a_folder_is_needed_is_one_line(tmp_path, notes, xccl):
    algo = tmp_path / "ag.json"
    assert xccl("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(algo)).returncode == 0
    cases = [
        (("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", f"{notes}/x.json"), "cannot write"),
        (("compile", str(algo), "-o", f"{notes}/x.xml"), "cannot write"),
        (("topo", "detect", NVIDIA_SMI, "-o", f"{notes}/t.json"), "cannot write"),
        (
            ("synth", "smt", "instance", "-t", "ring:4", "-C", "allgather", "-s", "2", "-d", str(notes)),
            "folder",
        ),
        (("pareto", "-t", "ring:4", "-C", "allgather", "-d", str(notes)), "expected a folder"),
        (("demo", "--out", str(notes)), "expected a folder"),
    ]
    for args, fragment in cases:
        proc = xccl(*args)
        assert_one_line_error(proc, str(notes), fragment)
        assert "Solving" not in proc.stderr and "[demo" not in proc.stderr  # refused before any work
    assert notes.read_text() == "my notes"


def test_a_plot_that_cannot_be_written_is_one_line(tmp_path, notes, xccl):
    front = tmp_path / "front"
    args = ("pareto", "-t", "ring:4", "-C", "allgather", "--max-chunks", "1", "-d", str(front))
    assert_one_line_error(xccl(*args, "--plot", f"{notes}/front.png"), "cannot write", "not a folder")
    assert not front.exists()  # refused before solving
    with pytest.raises(PlotError, match="cannot write"):  # and the library says so itself
        topo = load("ring:4")
        ring = make_baseline("ring", topo, make_collective("allgather", 4))
        plot_front(f"{notes}/front.png", topo, [ring], [ring], 2, Fraction(3, 2), "front")


def test_existing_outputs_are_refused_before_solving(tmp_path, xccl):
    mine = tmp_path / "mine.json"
    mine.write_text("my algorithm")
    plot = tmp_path / "mine.png"
    plot.write_text("my plot")
    instance = (
        "synth",
        "smt",
        "instance",
        "-t",
        "ring:4",
        "-C",
        "allgather",
        "-s",
        "2",
        "-r",
        "3",
        "-c",
        "2",
    )
    least = ("synth", "smt", "least-steps", "-t", "ring:4", "-C", "allgather")
    front = ("pareto", "-t", "ring:4", "-C", "allgather", "-d", str(tmp_path / "front"), "--plot", str(plot))
    for args in (
        (*instance, "-o", str(mine)),
        (*least, "-o", str(mine)),
        (*instance, "--smt2", str(mine)),
        front,
    ):
        proc = xccl(*args)
        assert_one_line_error(proc, "already exists", "--force")
        assert "Solving" not in proc.stderr
    assert not (tmp_path / "front").exists()
    assert mine.read_text() == "my algorithm" and plot.read_text() == "my plot"
    assert xccl(*instance, "-o", str(mine), "--force").returncode == 0
    assert mine.read_text().startswith("{")


def test_values_out_of_range_are_refused(tmp_path, xccl):
    ir = tmp_path / "ring.xml"
    assert xccl("compile", "example:ring_allreduce", "-D", "num_ranks=4", "-o", str(ir)).returncode == 0
    cases = [
        (("compile", "example:ring_allreduce", "--channels", "0"), "--channels"),
        (("compile", "example:ring_allreduce", "--instances", "0"), "--instances"),
        (("check", str(ir), "--limit", "-1"), "--limit"),
        (("topo", "detect", NVIDIA_SMI, "--nvlink-GBps", "0"), "nvlink_GBps: expected a number of GB/s"),
        (("topo", "detect", NVIDIA_SMI, "--pcie-GBps", "-16"), "pcie_GBps: expected a number of GB/s"),
        (("bound", "-t", "dgx1", "-C", "allgather", "--root", "3"), "--root: allgather has no root"),
        (("bound", "-t", "dgx1", "-C", "broadcast", "--root", "8"), "root: expected a rank in 0..7"),
    ]
    for args, fragment in cases:
        assert_one_line_error(xccl(*args), fragment)


def test_composing_an_allreduce_needs_chunks_a_multiple_of_the_ranks(xccl):
    args = ("synth", "smt", "instance", "-t", "ring:4", "-C", "allreduce", "-s", "2", "-c", "3")
    proc = xccl(*args, "--allreduce", "compose", "--no-save")
    assert_one_line_error(proc, "C=3", "multiple of the 4 ranks", "direct")
    assert "Solving" not in proc.stderr
    assert xccl(*args, "--allreduce", "auto", "--no-save").returncode in (0, 1)  # auto picks direct


def test_a_dsl_error_names_the_file_once(xccl):
    proc = xccl("compile", "example:ring_allreduce", "-D", "nosuch=3")
    assert_one_line_error(proc, "takes no parameter 'nosuch'")
    assert proc.stderr.count("ring_allreduce.py") == 1


def test_milp_interrupted_writes_its_best_result_and_exits_130(tmp_path, monkeypatch, xccl):
    synthesize = milp_synthesis.synthesize  # the command imports it when it runs

    def interrupted(*args, **kwargs):  # as if Ctrl-C came during the last stage
        return dataclasses.replace(synthesize(*args, **kwargs), interrupted=True)

    monkeypatch.setattr(milp_synthesis, "synthesize", interrupted)
    out = tmp_path / "milp.json"
    args = ("synth", "milp", "-t", "ndv2x2", "-k", "ndv2x2-relay", "-C", "allgather", "-s", "64KiB")
    proc = xccl(*args, "--chunkup", "2", "-o", str(out))
    assert proc.returncode == 130, proc.stderr
    assert out.exists() and "interrupted: best verified result kept" in proc.stdout


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (lambda s: s[-1]["sends"].pop(), "postcondition: rank 2 never gets chunk 3"),
        (lambda s: s[0]["sends"][0].__setitem__(1, 2), "rank 2 does not hold chunk 0 yet"),
        (lambda s: s[0]["sends"][0].__setitem__(2, 2), "no link 0 -> 2 in ring:4"),
    ],
)
@pytest.mark.parametrize("order", ["auto", "on"])
def test_compiling_a_schedule_that_does_not_verify_says_why_it_does_not(tmp_path, xccl, broken, says, order):
    # `xccl compile` verifies an algorithm beside its lowering (port order auto): whatever the
    # lowering makes of a broken schedule, the verifier's error is the one reported, and no file
    import json

    algo = tmp_path / "ag.json"
    assert xccl("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(algo)).returncode == 0
    data = json.loads(algo.read_text())
    broken(data["schedule"])
    algo.write_text(json.dumps(data))
    out = tmp_path / "ag.xml"
    assert_one_line_error(xccl("compile", str(algo), "--port-order", order, "-o", str(out)), says)
    assert not out.exists()
