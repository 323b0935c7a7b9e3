"""aggregate_chunks: contiguous transfers that could run together become one cnt > 1 op."""

from __future__ import annotations

import importlib

import pytest
from codegen_helpers import compile_and_run, stage_after, steps_of

from codegen.examples import allpairs_allreduce, ring_allreduce
from codegen.ir import OpType
from codegen.lower import lower_algorithm
from codegen.passes.aggregate_chunks import aggregate_chunks
from codegen.rules import MAX_COUNT
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load
from xccl.api import synthesize

ac = importlib.import_module("codegen.passes.aggregate_chunks")  # the module (the package exports the pass)


def _moved(dag) -> dict:
    """Chunks moved per (sender, receiver)."""
    out: dict = {}
    for ins in dag.instrs:
        if ins.type.sends:
            key = (ins.rank, ins.send_to)
            out[key] = out.get(key, 0) + ins.count
    return out


def test_direct_alltoall_sends_each_peer_its_chunks_at_once():
    topo = load("fully-connected:4")
    algo = make_baseline("direct", topo, make_collective("alltoall", 4, 3))
    prog = lower_algorithm(algo, topo)
    before = stage_after(prog, "expand_instructions")
    after = aggregate_chunks(before)
    after.verify()
    assert _moved(after) == _moved(before)
    sends = [i for i in after.instrs if i.type is OpType.SEND]
    assert len(sends) == 12 and {s.count for s in sends} == {3}
    compile_and_run(prog)


def test_max_count_bounds_a_merge():
    topo = load("fully-connected:4")
    algo = make_baseline("direct", topo, make_collective("alltoall", 4, 3))
    after = aggregate_chunks(stage_after(lower_algorithm(algo, topo), "expand_instructions"), max_count=2)
    assert max(i.count for i in after.instrs) == 2


def test_transfers_on_different_critical_paths_stay_apart():
    prog = ring_allreduce.program(4)
    before = stage_after(prog, "expand_instructions")
    assert aggregate_chunks(before) is before  # every chunk of a ring is at another hop
    assert {op.count for op in steps_of(compile_and_run(prog))} == {1}


def _grouped_as_before(dag) -> list:
    """Every group of candidates with more than one member, as aggregation grouped them one
    instruction at a time (before the grouping ran on arrays)."""
    groups: dict = {}
    for i, ins in enumerate(dag.instrs):
        if ins.type is OpType.SEND:
            r = dag.instrs[ins.send_match]
            if r.type not in (OpType.RECV, OpType.RECV_REDUCE_COPY):
                continue
            offset = None if r.src is None or r.dst is None else (r.src.buffer, r.src.index - r.dst.index)
            ends = (ins.rank, r.rank, r.type, ins.src.buffer, r.dst.buffer, offset)
            hints = (ins.tb_hint, r.tb_hint, ins.channel_hint, ins.instance)
            key = ("transfer", *ends, *hints, dag.height[i], dag.height[ins.send_match])
            groups.setdefault(key, []).append((i, ins.send_match))
        elif ins.type in (OpType.COPY, OpType.REDUCE):
            ends = (ins.rank, ins.type, ins.src.buffer, ins.dst.buffer)
            key = ("local", *ends, ins.tb_hint, ins.channel_hint, ins.instance, dag.height[i])
            groups.setdefault(key, []).append((i,))
    return [members for members in groups.values() if len(members) > 1]


def _aggregated_as_before(dag, max_count: int, window: float):
    """``aggregate_chunks`` with every group's runs cut one member at a time (:func:`_fits`)."""
    merged_into: dict = {}
    counts: dict = {}
    span = window * max(dag.times, default=0.0) if dag.times is not None else 0.0
    for members in _grouped_as_before(dag):
        ac._merge_runs(dag, members, max_count, span, merged_into, counts)
    return ac._rebuild(dag, merged_into, counts) if merged_into else dag


def _programs() -> dict:
    dgx1, four = load("dgx1"), load("fully-connected:4")
    return {
        "trees allgather": lower_algorithm(synthesize(dgx1, "allgather", "trees"), dgx1),
        "trees allreduce": lower_algorithm(synthesize(dgx1, "allreduce", "trees"), dgx1),
        "direct alltoall": lower_algorithm(
            make_baseline("direct", four, make_collective("alltoall", 4, 3)), four
        ),
        "allpairs allreduce": allpairs_allreduce.program(4),
    }


@pytest.mark.parametrize(
    ("max_count", "window"), [(MAX_COUNT, 0.0), (MAX_COUNT, 0.02), (2, 0.3), (MAX_COUNT, 1.0)]
)
def test_runs_cut_in_bulk_are_the_runs_cut_one_member_at_a_time(max_count, window):
    merged = 0
    for name, prog in _programs().items():
        dag = stage_after(prog, "expand_instructions")
        fast, before = aggregate_chunks(dag, max_count, window), _aggregated_as_before(dag, max_count, window)
        assert (fast.instrs, fast.edges, fast.order) == (before.instrs, before.edges, before.order), name
        merged += len(fast.instrs) < len(dag.instrs)
    assert merged >= 2  # the comparison covers merges, not only programs left as they are
