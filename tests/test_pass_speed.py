"""The per-instruction passes' shortcuts at scale give what their general form gives."""

from __future__ import annotations

import importlib

import pytest

from codegen.lower import lower_algorithm
from codegen.pipeline import CompileOptions, run_pipeline
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load
from xccl.api import synthesize

ac = importlib.import_module("codegen.passes.assign_channels")  # the module (the package exports the pass)
_BEFORE = ("replicate_instances", "expand_instructions", "aggregate_chunks", "fuse_recv_send", "order_by_critical_path")


def _ordered(prog):
    return run_pipeline(prog.chunk_dag(), _BEFORE, CompileOptions(bounded_fifos=False)).result


@pytest.fixture(scope="module")
def trees():
    """A timed schedule (the tree packing's allgather, timed by the Algorithm model when lowered)."""
    topo = load("dgx1")  # doubled NVLinks: transfers side by side on one connection
    dag = _ordered(lower_algorithm(synthesize(topo, "allgather", "trees"), topo))
    assert dag.info.model_timed and dag.times is not None  # so flows are placed idle channels first
    return dag


@pytest.fixture(scope="module")
def direct():
    """An untimed one (every rank sends its chunk straight to every other)."""
    topo = load("switch:8")
    return _ordered(lower_algorithm(make_baseline("direct", topo, make_collective("allgather", 8)), topo))


@pytest.mark.parametrize("program", ["trees", "direct"])
@pytest.mark.parametrize(("channels", "compact"), [(1, 0), (1, 1), (3, 0), (3, 2)])
def test_one_transfer_flows_take_the_channels_the_general_placement_gives(
    request, monkeypatch, program, channels, compact
):
    dag = request.getfixturevalue(program)
    fast = ac.assign_channels(dag, channels=channels, compact=compact)
    assert any(one is not None for one in ac._lone(dag, ac._flows(dag), ac._groups(dag), False))
    # every flow through _place, as before the shortcut (a new SameObjects: nothing remembered)
    monkeypatch.setattr(ac, "_SAME_DAG", ac.SameObjects())
    monkeypatch.setattr(ac, "_lone", lambda dag, flows, groups, hinted: [None] * len(flows))
    monkeypatch.setattr(ac, "lone_arrays", lambda *args: None)  # and none placed in bulk
    general = ac.assign_channels(dag, channels=channels, compact=compact)
    assert fast.channel == general.channel


def test_compact_layouts_at_one_width_assign_once(trees, monkeypatch):
    # layouts 1, 2 and 3 differ only after this pass: the compiler asks for each at one width
    calls = []
    assign = ac._assign
    monkeypatch.setattr(ac, "_SAME_DAG", ac.SameObjects())
    monkeypatch.setattr(ac, "_assign", lambda *a: calls.append(a[2:]) or assign(*a))
    first = ac.assign_channels(trees, channels=2, compact=1)
    assert ac.assign_channels(trees, channels=2, compact=2).channel is first.channel  # remembered
    assert ac.assign_channels(trees, channels=2, compact=3).channel is first.channel
    assert ac.assign_channels(trees, channels=2, compact=0).channel != () and len(calls) == 2


@pytest.fixture(scope="module")
def ring():
    """Fused ops: a ring allgather's receive-and-send chains (a flow of three and more)."""
    topo = load("ring:6")
    return _ordered(lower_algorithm(make_baseline("ring", topo, make_collective("allgather", 6)), topo))


@pytest.mark.parametrize("program", ["trees", "direct", "ring"])
def test_flows_as_chains_of_matches_are_the_union_finds(request, monkeypatch, program):
    """Flows found in NumPy along the chains of matches (no threadblock hint) are the union-find's."""
    dag = request.getfixturevalue(program)
    cf = importlib.import_module("codegen.passes.channel_flows")
    chained = cf.flows_of(dag)
    assert cf._chains(dag) is not None
    assert (program == "ring") == any(len(flow) > 2 for flow in chained)
    monkeypatch.setattr(cf, "_chains", lambda dag: None)
    assert chained == cf.flows_of(dag)


@pytest.mark.parametrize("program", ["trees", "direct", "ring"])
@pytest.mark.parametrize("channels", [1, 3])
def test_pairing_loads_in_numpy_are_the_sums_per_instruction(request, program, channels):
    """The steps per (rank, channel, side) and peer that layout 2 pairs threadblocks by, summed in
    NumPy, are those a dict entry per instruction sums (peers a fused op owns left out)."""
    at = importlib.import_module("codegen.passes.assign_threadblocks")
    dag = request.getfixturevalue(program)
    cdag = ac.assign_channels(dag, channels=channels, compact=2)
    ranks = [at._Rank() for _ in range(dag.info.num_ranks)]
    ranks[0].claim(ranks[0].new(0), 1, None)  # rank 0's sends to 1 on channel 0 owned already
    steps, (_, plain) = ac.steps_of(dag), at._kinds(dag)
    summed: dict[tuple, dict[int, int]] = {}
    for i, ch in enumerate(cdag.channel):
        if ch is not None and plain[i] is not None and (ch, *plain[i]) not in ranks[dag.instrs[i].rank].owner:
            peers = summed.setdefault((dag.instrs[i].rank, ch, plain[i][0]), {})
            peers[plain[i][1]] = peers.get(plain[i][1], 0) + steps[i]
    assert summed and at._loads(cdag, ranks) == summed
