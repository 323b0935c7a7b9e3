"""Lowering Algorithm -> ChunkProgram: each send becomes a DSL copy or reduce; relays use scratch;
combining collectives reduce into the right buffer; a step's sends all read the previous state."""

from __future__ import annotations

import pytest
from codegen_helpers import compile_and_run, steps_of

from codegen.errors import DslError
from codegen.ir import Buffer, OpType
from codegen.lower import lower_algorithm
from synth.algorithm import Algorithm, Send, Step
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load


def _butterfly_allreduce(n: int) -> Algorithm:
    """Recursive doubling on the whole buffer: in step k, r and r^k both add the other's partial.
    Each pair's two sends read and write the same address on each other: an exchange."""
    steps = []
    k = 1
    while k < n:
        steps.append(Step(1, tuple(Send(0, r, r ^ k, "reduce") for r in range(n))))
        k <<= 1
    return Algorithm(make_collective("allreduce", n, 1), f"hypercube:{n.bit_length() - 1}", tuple(steps))


def test_an_exchange_of_partial_sums_goes_through_scratch():
    algo = _butterfly_allreduce(4)
    topo = load("hypercube:2")
    algo.verify(topo)
    prog = lower_algorithm(algo, topo)
    assert prog.check() == ()
    ir = compile_and_run(prog)
    assert any(g.scratch_chunks > 0 for g in ir.gpus)  # one send of each exchanging pair waits in scratch
    assert any(op.type is OpType.REDUCE for op in steps_of(ir))  # the deferred local reduction
    compile_and_run(lower_algorithm(algo, topo, inplace=True))


def test_relays_without_an_output_slot_use_scratch():
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("alltoall", 4))
    ir = compile_and_run(lower_algorithm(algo, topo))
    assert max(g.scratch_chunks for g in ir.gpus) > 0
    gather = make_baseline("ring", topo, make_collective("gather", 4, root=2))
    compile_and_run(lower_algorithm(gather, topo))


def test_sends_to_a_rank_that_holds_the_chunk_are_dropped():
    topo = load("fully-connected:3")
    coll = make_collective("broadcast", 3, 1, root=0)
    algo = Algorithm(coll, topo.name, (Step(1, (Send(0, 0, 1),)), Step(1, (Send(0, 1, 2), Send(0, 0, 1)))))
    algo.verify(topo)
    prog = lower_algorithm(algo, topo)
    assert prog.num_ops == 3  # root's local copy, 0 -> 1, 1 -> 2
    compile_and_run(prog)


def test_out_of_place_reductions_never_write_the_input():
    topo = load("dgx1")
    for kind in ("ring", "recursive-doubling"):
        algo = make_baseline(kind, topo, make_collective("allreduce", 8, 8))
        ir = compile_and_run(lower_algorithm(algo, topo))
        written = [op.dst for op in steps_of(ir) if op.type.writes_dst]
        assert written and all(ref.buffer is not Buffer.INPUT for ref in written)


def test_in_place_reductions_stay_in_the_input():
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("reducescatter", 4, 2))
    ir = compile_and_run(lower_algorithm(algo, topo, inplace=True))
    assert ir.inplace and all(g.scratch_chunks == 0 for g in ir.gpus)
    assert {ref.buffer for op in steps_of(ir) for ref in (op.src, op.dst) if ref is not None} == {
        Buffer.INPUT
    }


def test_an_algorithm_for_an_unknown_topology_file_lowers_without_link_checks():
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("allgather", 4))
    moved = Algorithm(algo.collective, "my-cluster.json", algo.steps, algo.provenance)
    prog = lower_algorithm(moved)
    assert prog.topology is None and prog.check() == ()


def test_the_chunk_dag_lists_its_edges_in_their_order_once_each():
    # build_chunk_dag sorts its edge keys (faster than comparing ChunkDeps); the order must be theirs
    for algo, topo in (
        (_butterfly_allreduce(4), load("hypercube:2")),
        (make_baseline("ring", load("ring:8"), make_collective("allgather", 8)), load("ring:8")),
    ):
        deps = lower_algorithm(algo, topo).chunk_dag().deps
        assert deps and list(deps) == sorted(deps)
        assert len({(d.pred, d.succ, d.pred_side, d.succ_side) for d in deps}) == len(deps)


def _fields(prog) -> tuple:
    return (prog._ops, prog._values, prog._slices, prog.ports, prog.model_timed, prog.info())


def test_a_retimed_schedule_lowered_like_its_first_lowering_is_the_program_lowered_afresh(monkeypatch):
    """The re-timed copy of a schedule (runtime.choice) moves the same chunks between the same
    slots: lowered ``like`` the first program it takes its ops at the new times, the same program
    as lowering it afresh makes, and leaves the first as it was."""
    from codegen.lower import retimed
    from synth.timing import DEFAULT

    topo = load("dgx1")
    algo = make_baseline("ring", topo, make_collective("alltoall", 8))
    first = lower_algorithm(algo, topo)
    before = _fields(first)
    again = retimed(algo, topo, 1 << 20, DEFAULT)
    afresh = lower_algorithm(again, topo)
    with monkeypatch.context() as m:  # not lowered again: its ops are the first program's
        m.setattr("codegen.lower._lower_copies", None)
        shared = lower_algorithm(again, topo, like=first)
    assert shared is not first and shared._ops is not first._ops
    assert _fields(shared) == _fields(afresh)
    assert _fields(first) == before
    assert all(op.time is not None for op in shared._ops)
    compile_and_run(shared)


def test_lowering_like_a_program_of_other_sends_lowers_afresh():
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("allgather", 4))
    first = lower_algorithm(algo, topo)
    assert _fields(lower_algorithm(algo, topo, like=first)) == _fields(first)
    reordered = Algorithm(algo.collective, algo.topology, tuple(Step(st.rounds, st.sends[::-1]) for st in algo.steps))
    assert _fields(lower_algorithm(reordered, topo, like=first)) == _fields(lower_algorithm(reordered, topo))
    assert _fields(lower_algorithm(reordered, topo, like=first)) != _fields(first)
    starts = [Step(st.rounds, tuple(Send(s.chunk, s.src, s.dst, s.op, -1.0) for s in st.sends)) for st in algo.steps]
    with pytest.raises(DslError, match=r"time: expected \(start, arrival\)"):  # refused as afresh
        lower_algorithm(Algorithm(algo.collective, algo.topology, tuple(starts)), topo, like=first)
