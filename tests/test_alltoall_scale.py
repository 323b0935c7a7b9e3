"""Alltoall at scale: the rail-aligned hierarchical alltoall (synth.baselines.hierarchical) against
the lower bound, on clusters with a full network and on rail-only ones where direct sends have no
route."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

import topologies as T
from synth.baselines import BaselineError, make_baseline
from synth.bounds import lower_bound_us
from synth.collectives import make_collective
from synth.cost import simulate
from synth.timing import model_params
from topologies.io import topology_from_dict
from xccl.api import synthesize

GIB = 1 << 30
IDEAL = model_params("ideal")


def _rail_only(machines: int, gpus: int) -> T.Topology:
    """``machines`` x ``gpus`` GPUs on an NVSwitch each; NIC b of every machine on rail switch b
    only (no spine), so GPUs of different local index on different machines share no route."""
    n = machines * gpus
    switches = [{"name": f"m{m}.nvs", "kind": "nvswitch"} for m in range(machines)]
    switches += [{"name": f"m{m}.nic{b}", "kind": "nic"} for m in range(machines) for b in range(gpus)]
    switches += [{"name": f"rail{b}", "kind": "network"} for b in range(gpus)]
    links = []
    for r in range(n):
        m, b = divmod(r, gpus)
        links.append({"src": r, "dst": f"m{m}.nvs", "bandwidth_GBps": 450, "alpha_us": 0.35})
        links.append({"src": r, "dst": f"m{m}.nic{b}", "bandwidth_GBps": 50, "alpha_us": 0.0})
        links.append({"src": f"m{m}.nic{b}", "dst": f"rail{b}", "bandwidth_GBps": 50, "alpha_us": 0.85})
    data = {"name": f"rail-only-{machines}x{gpus}", "ranks": n, "switches": switches, "links": links}
    return topology_from_dict({**data, "node_of": [r // gpus for r in range(n)]})


def _of_bound(topo: T.Topology, algo, size: int = GIB) -> float:
    bound = lower_bound_us(topo, make_collective("alltoall", topo.num_ranks, lazy=True), size)
    return bound / simulate(algo, topo, size, IDEAL).time_us


@pytest.mark.parametrize("name", ["dgx-h100x2", "dgx-a100x2", "dgx-h100x4"])
def test_hierarchical_alltoall_meets_the_nic_bound(name):
    topo = T.load(name)
    algo = synthesize(topo, "alltoall", "hierarchical")  # verified
    assert algo.num_steps == topo.num_machines
    # the cut around a machine: its (K-1)/K share of 8 buffers through 8 NICs; one chunk's relay over
    assert _of_bound(topo, algo) > 0.999


def test_every_nic_carries_the_same_share():
    topo = T.load("dgx-h100x4")
    algo = synthesize(topo, "alltoall", "hierarchical")
    out: dict[int, int] = {}
    for step in algo.steps:
        for s in step.sends:
            if topo.node_of[s.src] != topo.node_of[s.dst]:
                assert s.src % 8 == s.dst % 8  # rail-aligned: across machines only on rail b
                out[s.src] = out.get(s.src, 0) + 1
    # each rank sends 8 ranks x 3 other machines chunks across: (K-1)/K of a buffer of 32 chunks
    assert sorted(out) == list(range(32)) and set(out.values()) == {24}


def test_on_a_rail_only_network_direct_has_no_route_and_hierarchical_is_optimal():
    topo = _rail_only(3, 4)
    coll = make_collective("alltoall", 12, 1)
    with pytest.raises(BaselineError, match="no link 0 -> 5"):
        make_baseline("direct", topo, coll)
    algo = make_baseline("hierarchical", topo, coll)
    # per rail NIC: 4 ranks x 2 other machines chunks of 1/12 GiB at 50 GB/s, the bound's cut
    assert lower_bound_us(topo, make_collective("alltoall", 12, lazy=True), GIB) == pytest.approx(
        GIB / 12 * 8 / 50e3
    )
    assert _of_bound(topo, algo) > 0.999


def test_several_chunks_per_pair_verify_and_keep_the_bound():
    topo = T.load("dgx-h100x2")
    algo = make_baseline("hierarchical", topo, make_collective("alltoall", 16, 2))
    assert algo.chunks == 2 and _of_bound(topo, algo) > 0.999


def test_one_machine_is_a_clear_error(xccl):
    proc = xccl("baseline", "hierarchical", "-t", "dgx-h100", "-C", "alltoall")
    assert_one_line_error(proc, "hierarchical", "one machine")


def test_across_machines_each_step_is_a_permutation_where_direct_sends_queue():
    # three machines: the direct sends, one step in chunk order, queue at NICs (2/3 of the bound in
    # the engine); the hierarchical steps pair each NIC with one other per step and meet it
    topo = T.load("dgx-h100x3")
    coll = make_collective("alltoall", 24, 1)
    assert _of_bound(topo, make_baseline("direct", topo, coll)) < 0.7
    assert _of_bound(topo, make_baseline("hierarchical", topo, coll)) > 0.999


def test_synth_hierarchical_writes_a_verified_alltoall_at_the_bound(xccl, tmp_path):
    out = tmp_path / "a2a.json"
    proc = xccl("synth", "hierarchical", "-t", "dgx-h100x3", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "verified" in proc.stdout and "100.0% of the line-rate lower bound" in proc.stdout
    again = xccl("synth", "hierarchical", "-t", "dgx-h100x3", "-o", str(out))
    assert_one_line_error(again, "a2a.json", "exists")
