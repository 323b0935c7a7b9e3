"""Sketches: the shipped ones load and fit their topologies; contradicting ones are rejected naming the field."""

from __future__ import annotations

import json

import pytest

from sketches import (
    Sketch,
    SketchError,
    load_sketch,
    restrict,
    shipped_sketches,
    sketch_from_dict,
    sketch_to_dict,
)
from sketches.model import rotation
from topologies import load

REQUIRED = ("ndv2x2", "ndv2x4", "dgx2", "dgx2x2", "dgx-a100x2", "dgx-a100x4", "dgx-h100x2")


def test_every_required_topology_has_a_shipped_sketch_with_its_idea():
    sketches = [load_sketch(name) for name in shipped_sketches()]
    for topo in REQUIRED:
        assert any(s.topology == topo for s in sketches), topo
    for s in sketches:
        assert len(s.comment) > 80, s.name  # the idea behind it, in words


@pytest.mark.parametrize("name", shipped_sketches())
def test_shipped_sketch_validates_against_its_topology(name):
    sketch = load_sketch(name)
    topo = load(sketch.topology)
    r = restrict(sketch, topo)
    logical = topo.logical()
    assert r.links and r.links <= set(logical.links)
    # the symmetry group maps links onto allowed links and is closed under composition
    for g in r.group:
        assert sorted(g) == list(topo.ranks)
        assert {(g[u], g[v]) for u, v in r.links} == r.links
    group = set(r.group)
    for g in r.group[:8]:
        for h in r.group[:8]:
            assert tuple(g[x] for x in h) in group
    if topo.num_machines > 1:
        assert any(r.crossing(p) for p in r.links)


@pytest.mark.parametrize("name", shipped_sketches())
def test_sketch_json_round_trips(name):
    sketch = load_sketch(name)
    again = sketch_from_dict(json.loads(json.dumps(sketch_to_dict(sketch))), where=sketch.source)
    assert again == sketch


def test_rotation_follows_taccl():
    assert rotation(2, 16, 32)[:3] == (2, 3, 4)
    assert rotation(2, 16, 32)[14:18] == (0, 1, 18, 19)
    assert rotation(16, 32, 32)[0] == 16


def _write(tmp_path, doc: dict) -> str:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    return str(path)


BASE = {
    "format": "xccl-sketch/1",
    "name": "t",
    "internode": {"strategy": "relay", "connections": {"0": [1]}},
    "symmetry_offsets": [[8, 16]],
}


@pytest.mark.parametrize(
    ("change", "topology", "fragments"),
    [
        (
            {"internode": {"strategy": "relay", "connections": {"0": [9]}}},
            "ndv2x2",
            ["internode.connections", "GPU 9"],
        ),
        ({"symmetry_offsets": [[1, 8]]}, "ndv2x2", ["symmetry_offsets[0]", "not a symmetry of ndv2x2"]),
        ({"symmetry_offsets": [[1, 8], [8, 16]]}, "dgx-a100x2", ["symmetry_offsets[0]", "does not allow"]),
        ({"symmetry_offsets": [[3, 7]]}, "ndv2x2", ["symmetry_offsets[0]", "dividing the 16 ranks"]),
        (
            {"intranode": {"strategy": "switch", "switches": [[0, 1, 2, 3]], "hyperedge": "uc-min"}},
            "ndv2x2",
            ["intranode.switches[0]", "not joined by a switch"],
        ),
        ({"internode": None}, "ndv2x2", ["internode", "relay strategy"]),
        ({"symmetry_offsets": []}, "dgx2", ["internode", "single machine"]),
        (
            {"internode": {"strategy": "relay", "connections": {"0": [1]}, "senders": {"2": [3]}}},
            "ndv2x2",
            ["internode.senders.2", "a sender of internode.connections"],
        ),
        ({"topology": "dgx2"}, "ndv2x2", ["topology", "written for dgx2"]),
    ],
)
def test_sketch_contradicting_the_topology_is_rejected_naming_the_field(
    tmp_path, change, topology, fragments
):
    doc = {**BASE, **change}
    doc = {k: v for k, v in doc.items() if v is not None}
    path = _write(tmp_path, doc)
    with pytest.raises(SketchError) as err:
        restrict(load_sketch(path), load(topology))
    message = str(err.value)
    assert "\n" not in message and message.startswith(path)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"relay": 1}, ["relay", "known keys"]),
        ({"symmetry_offsets": [[8]]}, ["symmetry_offsets[0]", "[offset, group size]"]),
        ({"symmetry_offsets": [[16, 16]]}, ["symmetry_offsets[0]", "not a multiple"]),
        ({"chunkup": 0}, ["chunkup", "integer >= 1"]),
        ({"chunkup": "many"}, ["chunkup", "integer >= 1"]),
        ({"intranode": {"strategy": "ring"}}, ["intranode.strategy", "none, switch"]),
        ({"intranode": {"strategy": "switch", "switches": [[0, 1]]}}, ["intranode.hyperedge", "required"]),
        (
            {"internode": {"strategy": "relay", "connections": "star"}},
            ["internode.connections", "direct-map"],
        ),
        ({"internode": {"strategy": "tree", "connections": "direct-map"}}, ["internode.strategy", "relay"]),
        ({"internode": {"strategy": "relay", "connections": {"x": [1]}}}, ["internode.connections.x"]),
        ({"target_size": "lots"}, ["target_size"]),
        ({"format": "taccl"}, ["format", "xccl-sketch/1"]),
    ],
)
def test_malformed_sketch_names_the_field(tmp_path, change, fragments):
    path = _write(tmp_path, {**BASE, **change})
    with pytest.raises(SketchError) as err:
        load_sketch(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(path)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_unknown_sketch_and_bad_json(tmp_path):
    with pytest.raises(SketchError, match="unknown sketch 'nope'"):
        load_sketch("nope")
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(SketchError, match="invalid JSON"):
        load_sketch(str(path))


def test_senders_restrict_where_chunks_leave_their_machine():
    doc = {
        **BASE,
        "internode": {"strategy": "relay", "connections": "fully-connected", "senders": {"3": [0, 1, 2, 3]}},
    }
    r = restrict(sketch_from_dict(doc), load("ndv2x2"))
    node = r.topology.node_of
    for src in (0, 1, 2, 3):
        leaving = {p for p in r.links_for(src) if node[p[0]] == 0 and node[p[1]] == 1}
        assert leaving and all(p[0] == 3 for p in leaving)
        assert not any(node[p[1]] == node[src] and node[p[0]] != node[src] for p in r.links_for(src))
    assert any(p[0] == 5 for p in r.links_for(5) if r.crossing(p))


def test_a_sketch_without_symmetry_needs_nothing_but_a_name():
    r = restrict(Sketch("plain"), load("dgx1"))
    assert r.group == (tuple(range(8)),) and r.links == frozenset(load("dgx1").logical().links)
