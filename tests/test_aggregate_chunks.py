"""aggregate_chunks: contiguous transfers that could run together become one cnt > 1 op."""

from __future__ import annotations

from codegen_helpers import compile_and_run, stage_after, steps_of

from codegen.examples import ring_allreduce
from codegen.ir import OpType
from codegen.lower import lower_algorithm
from codegen.passes.aggregate_chunks import aggregate_chunks
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load


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
