"""Placing rank pairs in bulk (``codegen.passes.channel_guess``) gives the channels that placing
every flow one at a time in the order gives."""

from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest

from codegen.passes import DEFAULT_PIPELINE
from codegen.passes.channel_guess import _crowded, first_channels, placed_in_rounds, rank_pairs
from codegen.pipeline import run_pipeline
from codegen.rules import MAX_CHANNELS, MAX_PEERS_PER_CHANNEL

ac = importlib.import_module("codegen.passes.assign_channels")  # the module, not the pass


def _ordered(where: str, collective: str):
    """A timed trees schedule on ``where``, through the passes before ``assign_channels``."""
    from codegen.lower import lower_algorithm
    from topologies import load
    from xccl.api import synthesize

    topo = load(where)
    program = lower_algorithm(synthesize(topo, collective, "trees"), topo)
    upto = DEFAULT_PIPELINE[: DEFAULT_PIPELINE.index("assign_channels")]
    return run_pipeline(program.chunk_dag(), upto).result


@pytest.mark.parametrize(
    ("where", "collective"),
    [
        ("dgx1", "allgather"),
        ("dgx-h100x2", "allreduce"),
        ("dgx-h100x4", "allgather"),
        ("ndv2x2", "allgather"),
    ],
)
def test_pairs_placed_in_bulk_take_the_channels_flows_placed_one_by_one_take(where, collective, monkeypatch):
    # on DGX-1 a flow passes busy channels over (doubled NVLinks), so some pairs are placed one
    # flow at a time beside those placed at once; every width and both kinds of layout (each check
    # of channel_guess is needed for one of these: without it the channels differ)
    dag = _ordered(where, collective)
    groups = ac._groups(dag)
    monkeypatch.setattr(ac, "_SAME_DAG", ac.SameObjects())
    kinds = set()
    for channels, compact in [(1, False), (2, False), (3, False), (1, True), (2, True), (4, True)]:
        in_bulk = ac._assign(dag, groups, channels, MAX_CHANNELS, compact)
        pairs = ac._SAME_DAG.get([dag], "pairs", lambda: None)  # found by _assign
        assert pairs is not None  # the bulk path was taken
        shares = ac.channel_shares(dag, channels, MAX_CHANNELS) if compact else None
        _, fine, _ = first_channels(pairs, channels, shares, dag.times is not None)
        kinds.update(fine.tolist())
        with monkeypatch.context() as m:
            m.setattr(ac, "rank_pairs", lambda *args: None)
            m.setattr(ac, "_SAME_DAG", ac.SameObjects())
            one_by_one = ac._assign(dag, groups, channels, MAX_CHANNELS, compact)
        assert in_bulk[0] == one_by_one[0]
        assert in_bulk[1] == one_by_one[1]  # whether a flow passed a busy channel over
    if where == "dgx1":
        assert kinds == {True, False}


@pytest.mark.parametrize(
    ("where", "collective", "peers", "timed"),
    [
        ("dgx-h100x4", "allgather", 3, True),
        ("dgx-h100x2", "allreduce", 3, True),
        ("dgx-a100x2", "allgather", 2, True),
        ("dgx1", "allgather", 2, False),
    ],
)
def test_crowded_ranks_placed_in_rounds_take_the_channels_flows_placed_one_by_one_take(
    where, collective, peers, timed, monkeypatch
):
    # a channel made to hold fewer peers than these ranks have: pairs meet by a channel's peers,
    # flows move to other channels once a side fills (the fills settle over several passes); on
    # DGX H100 x4 flows pass busy channels over too; last as a program not timed by the model
    dag = _ordered(where, collective)
    if not timed:
        dag = replace(dag, info=replace(dag.info, model_timed=False))
    groups = ac._groups(dag)
    for module in (ac, importlib.import_module("codegen.passes.channel_guess")):
        monkeypatch.setattr(module, "MAX_PEERS_PER_CHANNEL", peers)
    monkeypatch.setattr(ac, "_SAME_DAG", ac.SameObjects())
    for channels, compact in [(1, False), (2, False), (1, True), (3, True)]:
        in_rounds = ac._assign(dag, groups, channels, MAX_CHANNELS, compact)
        pairs = ac._SAME_DAG.get([dag], "pairs", lambda: None)
        assert pairs is not None and pairs.crowded
        shares = ac.channel_shares(dag, channels, MAX_CHANNELS) if compact else None
        assert placed_in_rounds(pairs, (channels, MAX_CHANNELS, shares), timed) is not None
        with monkeypatch.context() as m:
            m.setattr(ac, "rank_pairs", lambda *args: None)
            m.setattr(ac, "_SAME_DAG", ac.SameObjects())
            one_by_one = ac._assign(dag, groups, channels, MAX_CHANNELS, compact)
        assert max(c for c in one_by_one[0] if c is not None) >= channels  # a side filled
        assert in_rounds[0] == one_by_one[0]
        assert in_rounds[1] == one_by_one[1]


def test_pairs_placed_in_rounds_take_the_channels_of_pairs_placed_in_bulk():
    # where no rank is crowded the rounds need one pass: the same channels as first_channels and
    # the flows it leaves, placed one at a time (busy channels passed over on DGX H100 x4)
    dag = _ordered("dgx-h100x4", "allgather")
    groups = ac._groups(dag)
    for channels in (1, 2):
        in_bulk = ac._assign(dag, groups, channels, MAX_CHANNELS, False)
        pairs = ac._SAME_DAG.get([dag], "pairs", lambda: None)
        channel, passed = placed_in_rounds(pairs, (channels, MAX_CHANNELS, None), True)
        assert channel.tolist() == [in_bulk[0][s] for s in pairs.send.tolist()]
        assert passed and in_bulk[1]


def test_rounds_leave_holds_out_of_the_order_of_their_sends_to_the_flows_one_at_a_time():
    # on DGX-1 a connection's later send may start earlier: a busy check then searches the holds
    dag = _ordered("dgx1", "allgather")
    flows = ac._flows(dag)
    pairs = rank_pairs(dag, flows, ac.lone_arrays(dag, flows, ac._groups(dag), False), pinned=False)
    assert pairs is not None
    assert placed_in_rounds(pairs, (1, MAX_CHANNELS, None), True) is None
    assert placed_in_rounds(pairs, (1, MAX_CHANNELS, None), False) is not None


def test_a_rank_with_more_peers_than_a_channel_holds_is_placed_one_flow_at_a_time():
    # its flows may be refused a channel for what flows of other pairs took there
    peers = MAX_PEERS_PER_CHANNEL + 1
    sender = np.zeros(peers, np.int64)
    receiver = np.arange(1, peers + 1)
    instance = np.zeros(peers, np.int64)
    assert _crowded(sender, receiver, instance, peers + 1)
    assert _crowded(receiver, sender, instance, peers + 1)
    assert not _crowded(sender[:-1], receiver[:-1], instance[:-1], peers + 1)
    assert not _crowded(sender, receiver, np.arange(peers) % 2, peers + 1)  # two instances


def test_a_program_with_fused_ops_is_placed_one_flow_at_a_time():
    from codegen_helpers import stage_after

    from codegen.examples import ring_allreduce

    dag = stage_after(ring_allreduce.program(4), "order_ports")
    groups = ac._groups(dag)
    assert groups  # fused receive-and-send ops pin their threadblocks' peers
    flows = ac._flows(dag)
    assert rank_pairs(dag, flows, ac.lone_arrays(dag, flows, groups, False), pinned=True) is None
