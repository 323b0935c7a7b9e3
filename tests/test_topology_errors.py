"""Bad topology input: one clear error naming the file and field, never a traceback."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error

from topologies import TopologyError, load_topology_file

GOOD = {
    "name": "tiny",
    "ranks": 3,
    "links": [
        {"src": 0, "dst": 1, "bandwidth_GBps": 25, "alpha_us": 0.7},
        {"src": 1, "dst": 2, "bandwidth_GBps": 25, "alpha_us": 0.7},
    ],
}


def _with(**changes):
    doc = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        keys = path.split("__")
        target = doc
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        last = keys[-1]
        if value is KeyError:
            del target[last]
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
    return doc


CASES = [
    ("unknown top-level key", _with(colour="blue"), "colour"),
    ("unknown link key", _with(links__0__speed=3), "links[0].speed"),
    ("self link", _with(links__1__dst=1), "links[1].dst"),
    ("rank out of range", _with(links__1__dst=3), "links[1].dst"),
    ("zero bandwidth", _with(links__0__bandwidth_GBps=0), "links[0].bandwidth_GBps"),
    ("negative bandwidth", _with(links__1__bandwidth_GBps=-5), "links[1].bandwidth_GBps"),
    ("missing alpha", _with(links__0__alpha_us=KeyError), "links[0].alpha_us"),
    ("unknown switch", _with(links__0__dst="sw"), "links[0].dst"),
    ("bad count", _with(links__0__count=0), "links[0].count"),
    ("bad ranks", _with(ranks="three"), "ranks"),
    ("wrong node_of length", _with(node_of=[0, 0]), "node_of"),
    ("unreachable rank", _with(links=[GOOD["links"][0]]), "rank 0 cannot reach rank 2"),
    ("duplicate link", _with(links=[GOOD["links"][0], GOOD["links"][0], GOOD["links"][1]]), "links[1]"),
    ("one-way only", _with(links__1__bidirectional=False), "cannot reach"),
]


@pytest.mark.parametrize(("what", "doc", "field"), CASES, ids=[c[0] for c in CASES])
def test_loader_rejects_with_file_and_field(tmp_path, what, doc, field):
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TopologyError) as err:
        load_topology_file(path)
    message = str(err.value)
    assert str(path) in message and field in message
    assert "\n" not in message


def test_invalid_json_names_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "name": "x",\n  "ranks": 2,,\n}')
    with pytest.raises(TopologyError, match=r"broken.json:3:\d+: invalid JSON"):
        load_topology_file(path)


@pytest.mark.parametrize(("what", "doc", "field"), CASES[:6], ids=[c[0] for c in CASES[:6]])
def test_cli_check_exits_2_with_one_line(tmp_path, cli, what, doc, field):
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(doc))
    assert_one_line_error(cli("topo", "check", str(path)), str(path), field)


def test_cli_check_accepts_a_good_file(tmp_path, cli):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(GOOD))
    proc = cli("topo", "check", str(path))
    assert proc.returncode == 0 and "ok" in proc.stdout
