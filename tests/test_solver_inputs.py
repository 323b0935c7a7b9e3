"""What the synthesis side reads and prints: algorithm files with every number checked, sketches
held to the topology they were written for, JSON without NaN or Infinity, sizes in the API."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout

import pytest
from conftest import assert_one_line_error

import xccl
from common.units import SizeError
from synth.algorithm import Algorithm
from synth.errors import AlgorithmFormatError
from topologies import load, topology_to_dict
from xccl.cli.output import print_json

# -- 5. the algorithm reader checks every number ----------------------------------------------


def _ring_doc(xccl_run, tmp_path) -> dict:
    path = tmp_path / "ring.json"
    assert xccl_run("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(path)).returncode == 0
    return json.loads(path.read_text())


def _with_raw(doc: dict, where: str, raw: str) -> str:
    """The JSON text of ``doc`` with the field at ``where`` (``a.b``, ``schedule.0.sends.0.4``) set
    to the JSON text ``raw`` (which may be what Python never writes, like ``1e999``)."""
    target = doc
    *path, last = where.split(".")
    for key in path:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        index = int(last)
        target[index : index + 1] = ["@@"]  # replaces, or appends just past the end
    else:
        target[last] = "@@"
    return json.dumps(doc).replace('"@@"', raw)


BAD_FIELDS = [
    ("schedule.0.sends.0.4", "-1.0", "schedule[0].sends[0][4] (start time)"),
    ("schedule.0.sends.0.4", "1e999", "schedule[0].sends[0][4] (start time)"),  # JSON's way to infinity
    ("schedule.0.sends.0.0", "-1", "schedule[0].sends[0][0]"),
    ("schedule.0.sends.0.1", "true", "schedule[0].sends[0][1]"),
    ("schedule.0.rounds", "1.5", "schedule[0].rounds"),
    ("collective.ranks", "true", "collective.ranks"),
    ("collective.chunks_per_rank", "1e30", "collective.chunks_per_rank"),
    ("collective.chunks_per_rank", "1000000000000", "XCCL_MAX_CHUNKS"),
    ("collective.root", "-1", "collective.root"),
    ("provenance.solve_time_s", "-2", "provenance.solve_time_s"),
    ("provenance.solve_time_s", "1e999", "provenance.solve_time_s"),
    ("provenance.optimal", "1", "provenance.optimal"),
    ("provenance.params", '{"size_bytes": 1e999}', "provenance.params.size_bytes"),
    ("steps", "2.5", "steps"),
]


@pytest.mark.parametrize(("where", "raw", "field"), BAD_FIELDS)
def test_an_algorithm_file_with_a_bad_number_is_refused_naming_the_field(xccl, tmp_path, where, raw, field):
    path = tmp_path / "bad.json"
    path.write_text(_with_raw(_ring_doc(xccl, tmp_path), where, raw))
    for command in ("verify", "compile"):
        assert_one_line_error(xccl(command, str(path), "-t", "ring:4"), str(path), field)


def test_nan_start_times_are_refused_from_python_too(xccl, tmp_path):
    doc = _ring_doc(xccl, tmp_path)
    doc["schedule"][0]["sends"][0] = [*doc["schedule"][0]["sends"][0][:4], math.nan]
    with pytest.raises(AlgorithmFormatError, match=r"schedule\[0\]\.sends\[0\]\[4\] \(start time\).*nan"):
        Algorithm.from_dict(doc, "doc")


def test_an_algorithm_file_with_start_times_still_reads(xccl, tmp_path):
    doc = _ring_doc(xccl, tmp_path)
    for step in doc["schedule"]:
        step["sends"] = [[*s, 0.5] for s in step["sends"]]
    algo = Algorithm.from_dict(doc)
    assert {s.start_us for st in algo.steps for s in st.sends} == {0.5}


# -- 6. a sketch is held to the topology it was written for -----------------------------------


def test_a_sketch_for_ndv2x2_is_refused_on_four_machines_under_the_same_name(xccl, tmp_path):
    """A user's four-machine cluster file that kept the name ndv2x2: the name matched, so the
    sketch written for two machines checked ok."""
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(topology_to_dict(load("ndv2x4")) | {"name": "ndv2x2"}))
    expected = ("ndv2x2-relay.json", "topology", "written for ndv2x2 (16 ranks on 2 machine(s))", "32 ranks")
    assert_one_line_error(xccl("sketch", "check", "ndv2x2-relay", "-t", str(cluster)), *expected)
    milp = ("synth", "milp", "-t", str(cluster), "-k", "ndv2x2-relay", "-C", "allgather", "-s", "1KiB")
    assert_one_line_error(xccl(*milp), *expected)
    assert_one_line_error(xccl("sketch", "check", "ndv2x2-relay", "-t", "ndv2x4"), *expected)


def test_a_sketch_naming_the_users_own_topology_still_fits_it(xccl, tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(topology_to_dict(load("ndv2x2")) | {"name": "my-cluster"}))
    sketch = tmp_path / "sketch.json"
    shipped = json.loads(xccl("sketch", "show", "ndv2x2-relay", "--json").stdout)
    sketch.write_text(json.dumps(shipped | {"topology": "my-cluster"}))
    proc = xccl("sketch", "check", str(sketch), "-t", str(cluster))
    assert proc.returncode == 0, proc.stderr
    assert "ok on my-cluster" in proc.stdout


# -- 7. JSON output has no NaN or Infinity ----------------------------------------------------


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_bound_and_cost_json_on_one_rank_are_valid_json(xccl, tmp_path):
    one = tmp_path / "one.json"
    one.write_text('{"name": "one", "ranks": 1, "links": []}')
    proc = xccl("bound", "-t", str(one), "-C", "allgather", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = _strict(proc.stdout)
    assert [r["algbw_GBps"] for r in doc["rows"]] == [None, None, None]
    assert "one rank" in doc["note"]
    algo = tmp_path / "ag.json"
    assert xccl("baseline", "direct", "-t", str(one), "-C", "allgather", "-o", str(algo)).returncode == 0
    proc = xccl("cost", str(algo), "-t", str(one), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = _strict(proc.stdout)
    assert doc["rows"][0]["time_us"] == 0.0 and doc["rows"][0]["algbw_GBps"] is None and doc["note"]


def test_bound_json_elsewhere_has_no_note(xccl):
    doc = _strict(xccl("bound", "-t", "ring:4", "-C", "allgather", "--json").stdout)
    assert "note" not in doc and all(r["algbw_GBps"] > 0 for r in doc["rows"])


def test_print_json_writes_what_json_cannot_hold_as_null():
    out = io.StringIO()
    with redirect_stdout(out):
        print_json({"x": math.inf, "y": [1.5, -math.inf, math.nan]})
    assert _strict(out.getvalue()) == {"x": None, "y": [1.5, None, None]}


# -- 8. sizes in the Python API ---------------------------------------------------------------


@pytest.mark.parametrize("size", [-5, 0, 1.5, True, "0B"])
def test_api_sizes_must_be_positive_bytes(size):
    with pytest.raises(SizeError):
        xccl.lower_bound("ring:4", "allgather", size)
    with pytest.raises(SizeError):
        xccl.synthesize("ring:4", "allgather", "milp", sketch="ndv2x2-relay", size=size)
    ring = xccl.synthesize("ring:4", "allgather", "ring")
    with pytest.raises(SizeError):
        xccl.simulate(ring, size=size)


def test_api_time_limits_must_be_finite():
    from synth.deadline import TimeLimitError

    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(TimeLimitError):
            xccl.pareto("ring:4", "allgather", time_limit_s=bad)
