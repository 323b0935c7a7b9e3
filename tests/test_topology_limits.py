"""Topologies too large to build are refused at once, naming the limit and how to raise it; link
values that would break the arithmetic downstream (a denormal bandwidth) are refused at the reader."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error

from topologies import TopologyError, load, ring, topology_to_dict
from topologies.limits import LINKS_ENV, MAX_LINKS, MAX_RANKS, RANKS_ENV, logical_links_bound

HUGE = "9" * 5000
"""More digits than Python converts to an integer by default (4,300)."""


def _file(tmp_path, doc, name="topo.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc).replace("Infinity", "1e400"))  # JSON text for a float that overflows
    return str(path)


def _pair(**link):
    return {
        "name": "pair",
        "ranks": 2,
        "links": [{"src": 0, "dst": 1, "bandwidth_GBps": 25, "alpha_us": 0.7} | link],
    }


# -- sizes ------------------------------------------------------------------------------------------
TOO_BIG = [
    ("hypercube:64", RANKS_ENV),
    ("ring:99999999999999999999", RANKS_ENV),
    (f"ring:{HUGE}", RANKS_ENV),
    ("torus:100000x100000", RANKS_ENV),
    ("fully-connected:5000", LINKS_ENV),
    ("switch:5000", LINKS_ENV),  # 10,000 physical links but 25 million rank pairs
    ("ndv2x100000", LINKS_ENV),  # 800,000 ranks, every pair of machines joined by the network
    (f"ndv2x{HUGE}", RANKS_ENV),
]


@pytest.mark.parametrize(("name", "env"), TOO_BIG, ids=[n[:24] for n, _ in TOO_BIG])
def test_a_topology_past_the_limits_is_refused_at_once(cli, name, env):
    proc = cli("topo", "show", name, timeout=20)  # before: hung building the graph
    assert_one_line_error(proc, "more than the limit of", f"set {env} to raise it")


def test_a_file_declaring_a_billion_ranks_is_refused_at_once(tmp_path, cli):
    path = _file(tmp_path, _pair() | {"ranks": 10**9})
    proc = cli("topo", "check", path, timeout=20)  # before: hung making the graph's 10**9 vertices
    assert_one_line_error(
        proc, path, "ranks", f"{10**9} ranks, more than the limit of {MAX_RANKS}", RANKS_ENV
    )


def test_the_environment_moves_the_limit(tmp_path, xccl, monkeypatch):
    path = _file(tmp_path, topology_to_dict(ring(17)))  # files and builders: names are cached
    monkeypatch.setenv(RANKS_ENV, "16")
    assert_one_line_error(xccl("topo", "check", path), "17 ranks, more than the limit of 16")
    with pytest.raises(TopologyError, match="ring:17: 17 ranks, more than the limit of 16"):
        ring(17)
    assert ring(16).num_ranks == 16
    monkeypatch.setenv(RANKS_ENV, "lots")
    assert_one_line_error(xccl("topo", "check", path), RANKS_ENV, "a positive integer", "'lots'")


@pytest.mark.parametrize(
    ("name", "stop_at"),
    [
        ("ring:100000", "topologies.model.Topology.check"),  # past the builder's and the model's checks
        ("torus:300x300", "topologies.model.Topology.check"),
        ("hypercube:17", "topologies.builders.Link"),  # past the builder's (its 2.2M links take seconds)
    ],
)
def test_big_but_sensible_topologies_are_within_the_limits(monkeypatch, name, stop_at):
    """What the scale work builds must not be refused: the build gets past the size checks (and is
    stopped there, to keep this test fast)."""

    class Built(Exception):
        pass

    def stop(*args, **kwargs):
        raise Built

    monkeypatch.setattr(stop_at, stop)
    with pytest.raises(Built):
        load(name)


NOT_A_SIZE = [
    ("ring:0", "at least 2 ranks, got 0"),
    ("torus:0x3", "both dimensions >= 2, got 0x3"),
    ("ring:-3", "expected ring:N, N a whole number"),
    ("ring:", "expected ring:N"),
    ("ring:3.5", "expected ring:N"),
    ("torus:3x", "expected torus:AxB"),
    ("torus:4", "expected torus:AxB"),
    ("hypercube:0", "dimension >= 1, got 0"),
    ("ndv2x0", "at least 1 machine, got 0"),
]


@pytest.mark.parametrize(("name", "fragment"), NOT_A_SIZE)
def test_a_size_that_is_not_one_is_one_line(xccl, name, fragment):
    assert_one_line_error(xccl("topo", "show", name), fragment)


@pytest.mark.parametrize("name", ["dgx1", "dgx2", "dgx-a100x2", "ndv2x2", "switch:6", "ring:5"])
def test_the_rank_pair_bound_holds(name):
    topo = load(name)
    bound = logical_links_bound(topo.num_ranks, topo.arrays.tails, topo.arrays.heads)
    assert len(topo.logical().links) <= bound <= topo.num_ranks * (topo.num_ranks - 1)
    if name.startswith("switch"):
        assert bound == len(topo.logical().links)  # one switch joins every pair


def test_the_limits_are_well_above_the_scale_targets():
    assert MAX_RANKS >= 8 * 131_072  # hypercube:17
    assert MAX_LINKS >= 4 * 17 * 131_072


# -- link values ------------------------------------------------------------------------------------
BAD_VALUES = [
    ({"bandwidth_GBps": 1e-320}, "links[0].bandwidth_GBps", "from 0.001 to 1e+06, got 1e-320"),
    ({"bandwidth_GBps": 0}, "links[0].bandwidth_GBps", "got 0"),
    ({"bandwidth_GBps": 1e300}, "links[0].bandwidth_GBps", "got 1e+300"),
    ({"bandwidth_GBps": 1e400}, "links[0].bandwidth_GBps", "got Infinity"),  # JSON's 1e400 is inf
    ({"bandwidth_GBps": "25"}, "links[0].bandwidth_GBps", 'got "25"'),
    ({"alpha_us": 1e308}, "links[0].alpha_us", "from 0 to 1e+06"),
    ({"alpha_us": -0.5}, "links[0].alpha_us", "got -0.5"),
    ({"count": 10**6}, "links[0].count", "an integer from 1 to 1024"),
    ({"count": 1.5}, "links[0].count", "got 1.5"),
    ({"count": True}, "links[0].count", "got true"),
]


@pytest.mark.parametrize(("link", "field", "fragment"), BAD_VALUES, ids=[str(v[0]) for v in BAD_VALUES])
def test_link_values_out_of_range_are_refused_at_the_reader(tmp_path, xccl, link, field, fragment):
    path = _file(tmp_path, _pair(**link))
    assert_one_line_error(xccl("topo", "check", path), path, field, fragment)


def test_a_nic_with_a_denormal_bandwidth_is_refused(tmp_path, xccl):
    nic = {"name": "nic0", "ranks": [0], "bandwidth_GBps": 5e-324, "alpha_us": 1}
    path = _file(tmp_path, _pair() | {"nics": [nic]})
    assert_one_line_error(xccl("topo", "check", path), "nics[0].bandwidth_GBps", "got 5e-324")


@pytest.mark.parametrize(
    "command",
    [
        ("topo", "show", "{}"),
        ("bound", "-t", "{}", "-C", "allgather"),
        ("baseline", "ring", "-t", "{}", "-C", "allgather"),
    ],
    ids=lambda c: c[0],
)
def test_a_tiny_bandwidth_never_reaches_a_division(tmp_path, xccl, command):
    """Before: ZeroDivisionError in the capacity model, a traceback from every command."""
    path = _file(tmp_path, _pair(bandwidth_GBps=1e-320))
    assert_one_line_error(xccl(*(path if arg == "{}" else arg for arg in command)), "bandwidth_GBps")


def test_cost_on_a_tiny_bandwidth_topology_is_one_line(tmp_path, xccl):
    good, tiny = _file(tmp_path, _pair(), "pair.json"), _file(tmp_path, _pair(bandwidth_GBps=1e-320))
    algorithm = str(tmp_path / "ring.json")
    assert xccl("baseline", "ring", "-t", good, "-C", "allgather", "-o", algorithm).returncode == 0
    assert_one_line_error(xccl("cost", algorithm, "-t", tiny), "bandwidth_GBps", "got 1e-320")


@pytest.mark.parametrize(
    "kwargs",
    [{"bandwidth_GBps": float("nan")}, {"bandwidth_GBps": 1e-320}, {"alpha_us": float("inf")}],
    ids=str,
)
def test_builders_apply_the_same_ranges(kwargs):
    """Values computed or passed to a builder (the API) obey the file format's ranges."""
    field = next(iter(kwargs))
    with pytest.raises(TopologyError, match=f"ring:4: links: 0 -> 1: {field}: expected"):
        ring(4, **kwargs)


def test_detect_refuses_a_tiny_nvlink_rate(xccl):
    proc = xccl("topo", "detect", "docs/examples/nvidia-smi-topo-dgx1.txt", "--nvlink-GBps", "1e-320")
    assert_one_line_error(proc, "nvlink_GBps: expected a number of GB/s from 0.001")
