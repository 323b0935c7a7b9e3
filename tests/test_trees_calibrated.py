"""Tree packing chooses its chunk count in the calibrated model by default (issue 15, build item 3):
at line rate with free sends more chunks always fill the pipeline sooner, so it used to pick 64 on
``ring:4`` at 1 MiB, 204 us once each send costs its 2.8 us, against 38 us with 4 chunks."""

from __future__ import annotations

from synth.cost import simulate
from synth.timing import DEFAULT, IDEAL
from synth.trees import synthesize
from topologies import load

SIZE = 1 << 20


def test_default_chunk_count_is_the_faster_one_where_it_runs():
    topo = load("ring:4")
    default = synthesize(topo, "allgather", size_bytes=SIZE).algorithm
    ideal = synthesize(topo, "allgather", size_bytes=SIZE, params=IDEAL).algorithm
    assert default.chunks < ideal.chunks
    assert simulate(default, topo, SIZE, DEFAULT).time_us < 0.5 * simulate(ideal, topo, SIZE, DEFAULT).time_us
    assert ideal.chunks == 64  # the line-rate choice is kept under --model ideal


def test_cli_times_in_the_model_it_chose_for(xccl, tmp_path):
    args = ("synth", "trees", "-t", "ring:4", "-C", "allgather", "-s", "1MiB")
    default = xccl(*args, "-o", str(tmp_path / "a.json"))
    ideal = xccl(*args, "--model", "ideal", "-o", str(tmp_path / "b.json"))
    assert default.returncode == 0 and ideal.returncode == 0, default.stderr + ideal.stderr
    assert "modeled (calibrated, Simple)" in default.stdout and "modeled (ideal)" in ideal.stdout
    assert "-c4:" in default.stdout and "-c64:" in ideal.stdout
