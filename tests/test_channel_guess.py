"""Placing rank pairs in bulk (``codegen.passes.channel_guess``) gives the channels that placing
every flow one at a time in the order gives."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from codegen.passes import DEFAULT_PIPELINE
from codegen.passes.channel_guess import _crowded, first_channels, rank_pairs
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
        assert in_bulk[0].channel == one_by_one[0].channel
        assert in_bulk[1] == one_by_one[1]  # whether a flow passed a busy channel over
    if where == "dgx1":
        assert kinds == {True, False}


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
    assert rank_pairs(dag, flows, ac._lone(dag, flows, groups, False), pinned=True) is None
