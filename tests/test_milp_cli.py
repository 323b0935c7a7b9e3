"""``xccl synth milp`` and ``xccl sketch`` as a user runs them."""

from __future__ import annotations

import json

from conftest import assert_one_line_error

from synth.algorithm import Algorithm
from topologies import load, topology_to_dict


def test_synth_milp_writes_a_verified_algorithm_with_progress(tmp_path, cli):
    out = tmp_path / "ag.json"
    proc = cli(
        "synth", "milp", "--topology", "ndv2x2", "--sketch", "ndv2x2-relay", "--collective", "allgather",
        "--size", "1MiB", "-o", str(out), "--time-limit", "10",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for stage in ("routing", "ordering", "scheduling"):
        assert f"milp: {stage} k=" in proc.stderr
    assert "vars" in proc.stderr and "rows" in proc.stderr  # model sizes are logged
    assert f"wrote {out}" in proc.stdout and "verified" in proc.stdout
    algo = Algorithm.load(out)
    algo.verify(load("ndv2x2"))
    assert algo.provenance.method == "milp" and algo.provenance.solver == "highs"
    assert all(s.start_us is not None for st in algo.steps for s in st.sends)
    assert cli("verify", str(out)).returncode == 0


def test_synth_milp_with_cbc_and_a_sketch_file(tmp_path, cli):
    sketch = tmp_path / "mine.json"
    sketch.write_text(
        json.dumps(
            {
                "format": "xccl-sketch/1",
                "name": "mine",
                "internode": {"strategy": "relay", "connections": "fully-connected"},
                "symmetry_offsets": [[8, 16]],
                "chunkup": 2,
            }
        )
    )
    out = tmp_path / "a2a.json"
    proc = cli(
        "synth", "milp", "-t", "ndv2x2", "-k", str(sketch), "-C", "alltoall", "-s", "64KiB", "--solver", "cbc",
        "-o", str(out), "--threads", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    algo = Algorithm.load(out)
    assert algo.chunks == 2 and algo.provenance.solver == "cbc"
    algo.verify(load("ndv2x2"))


def test_synth_milp_keeps_existing_files_and_rejects_bad_input_in_one_line(tmp_path, cli):
    out = tmp_path / "mine.json"
    out.write_text("my notes")
    base = ("synth", "milp", "-t", "ndv2x2", "-k", "ndv2x2-relay", "-C", "allgather", "-s", "1KiB")
    assert_one_line_error(cli(*base, "-o", str(out)), str(out), "--force")
    assert out.read_text() == "my notes"
    assert_one_line_error(
        cli("synth", "milp", "-t", "dgx2", "-k", "ndv2x2-relay", "-C", "allgather"), "topology"
    )
    assert_one_line_error(cli(*base[:5], "nope", *base[6:]), "unknown sketch 'nope'")
    assert_one_line_error(cli(*base, "--size", "lots"), "size 'lots'")
    assert_one_line_error(cli(*base, "--time-limit", "0"), "--time-limit")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "xccl-sketch/1", "name": "b", "symmetry_offsets": [[1, 8]]}))
    proc = cli("synth", "milp", "-t", "ndv2", "-k", str(bad), "-C", "allgather", "-s", "1KiB")
    assert_one_line_error(proc, str(bad), "symmetry_offsets[0]", "not a symmetry")
    assert_one_line_error(cli(*base, "--solver", "gurobi"), "--solver")


def test_sketch_list_show_check(cli):
    proc = cli("sketch", "list")
    assert proc.returncode == 0 and "ndv2x2-relay" in proc.stdout and "dgx2x2-relay" in proc.stdout
    proc = cli("sketch", "show", "dgx2x2-relay", "--json")
    assert json.loads(proc.stdout)["internode"]["connections"] == "direct-map"
    proc = cli("sketch", "check", "ndv2x2-relay")
    assert proc.returncode == 0 and "ok on ndv2x2" in proc.stdout
    assert_one_line_error(cli("sketch", "check", "ndv2x2-relay", "--topology", "dgx1"), "topology", "ndv2x2")


def test_sketch_check_of_a_sketch_for_an_unshipped_topology_asks_for_its_file(cli, tmp_path):
    sketch = json.loads(cli("sketch", "show", "ndv2x2-relay", "--json").stdout)
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(dict(sketch, name="mine", topology="my-cluster")))
    assert_one_line_error(
        cli("sketch", "check", str(mine)), str(mine), "topology: 'my-cluster'", "--topology FILE"
    )
    cluster = tmp_path / "my-cluster.json"
    cluster.write_text(json.dumps(dict(topology_to_dict(load("ndv2x2")), name="my-cluster")))
    proc = cli("sketch", "check", str(mine), "--topology", str(cluster))
    assert proc.returncode == 0 and "ok on my-cluster" in proc.stdout
    cluster.write_text(json.dumps(dict(topology_to_dict(load("ndv2x2")), name="renamed")))
    proc = cli("sketch", "check", str(mine), "--topology", str(cluster))
    assert_one_line_error(
        proc, str(mine), "topology:", "got 'my-cluster'", "set it to 'renamed' or leave it out"
    )


def test_same_inputs_give_the_same_bytes(tmp_path):
    """Two runs, with different string hash seeds, write identical files."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"a{seed}.json"
        args = [
            "synth",
            "milp",
            "-t",
            "ndv2x2",
            "-k",
            "ndv2x2-relay",
            "-C",
            "allreduce",
            "-s",
            "64KiB",
            "-o",
            str(out),
        ]
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run(
            [sys.executable, "-m", "xccl.cli.main", *args], capture_output=True, text=True, cwd=ROOT, env=env
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
