"""order_by_critical_path: a topological order by depth, then longest path ahead, within the FIFO
bound of the runtime's connections."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from codegen_helpers import stage_after

from codegen.check import find_deadlock
from codegen.compiler import compile_program
from codegen.examples import (
    allpairs_allreduce,
    hierarchical_allreduce,
    recursive_doubling_allgather,
    ring_allreduce,
    two_step_alltoall,
)
from codegen.instr_dag import InstrDAG
from codegen.passes.order_by_critical_path import order_by_critical_path
from codegen.pipeline import CompileOptions, run_pipeline
from codegen.protocols import fifo_calls


def _in_flight_peak(dag: InstrDAG) -> int:
    """Replay the order: the most calls in flight from one rank to a peer (a send followed at
    once by its receive drains as it goes, so it holds none)."""
    in_flight: dict[tuple, int] = defaultdict(int)
    counted = set()
    peak = 0
    order = dag.order
    for k, i in enumerate(order):
        ins = dag.instrs[i]
        if ins.recv_match in counted:
            counted.discard(ins.recv_match)
            in_flight[(ins.recv_from, ins.rank, ins.instance)] -= ins.count
        chained = k + 1 < len(order) and order[k + 1] == ins.send_match
        if ins.send_to is not None and not chained:
            counted.add(i)
            pair = (ins.rank, ins.send_to, ins.instance)
            in_flight[pair] += ins.count
            peak = max(peak, in_flight[pair])
    return peak


PROGRAMS = {
    "ring": ring_allreduce.program(6),
    "allpairs": allpairs_allreduce.program(4),
    "hierarchical": hierarchical_allreduce.program("dgx-a100x2"),
    "recursive-doubling": recursive_doubling_allgather.program(8, chunks=2),
    "two-step": two_step_alltoall.program("dgx-a100x2"),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_unbounded_order_is_topological_depth_major_and_critical_first(name):
    dag = order_by_critical_path(stage_after(PROGRAMS[name], "fuse_recv_send"), bounded_fifos=False)
    dag.verify()  # includes: every edge goes forward in the order
    keys = [(dag.depth[i], -dag.height[i]) for i in dag.order]
    assert keys == sorted(keys)
    assert sorted(dag.order) == list(range(len(dag.instrs)))


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("protocol", ["Simple", "LL"])
def test_bounded_order_never_overfills_a_connection(name, protocol):
    dag = stage_after(PROGRAMS[name], "fuse_recv_send")
    dag = order_by_critical_path(replace(dag, info=replace(dag.info, protocol=protocol)))
    dag.verify()
    assert _in_flight_peak(dag) <= fifo_calls(protocol)


def test_the_unbounded_order_would_overfill_where_the_bound_matters():
    """The hierarchical allreduce sends more calls to one peer than Simple's FIFO holds before
    its peer receives any; the bounded order does not."""
    dag = stage_after(PROGRAMS["hierarchical"], "fuse_recv_send")
    assert _in_flight_peak(order_by_critical_path(dag, bounded_fifos=False)) > fifo_calls("Simple")
    assert _in_flight_peak(order_by_critical_path(dag)) <= fifo_calls("Simple")


def test_where_depth_order_fits_the_bound_it_is_kept():
    for name in ("ring", "allpairs"):
        dag = stage_after(PROGRAMS[name], "fuse_recv_send")
        assert order_by_critical_path(dag).order == order_by_critical_path(dag, bounded_fifos=False).order


def test_ring_ranks_start_with_their_own_chunk():
    dag = order_by_critical_path(stage_after(ring_allreduce.program(4), "fuse_recv_send"))
    first = {}
    for i in dag.order:
        first.setdefault(dag.instrs[i].rank, dag.instrs[i])
    assert all(ins.type.value == "s" and ins.src.index == rank for rank, ins in first.items())


def test_the_compiler_falls_back_to_the_bounded_order_only_where_the_plain_one_deadlocks():
    """The ring allreduce is deadlock-free with real FIFOs in the plain order: one channel, as the
    reference compiler. The hierarchical allreduce is not; the compiler's result is."""
    ring = run_pipeline(PROGRAMS["ring"].chunk_dag(), options=CompileOptions(bounded_fifos=False)).result
    assert find_deadlock(ring) is None
    assert compile_program(PROGRAMS["ring"]) == ring
    prog = PROGRAMS["hierarchical"]
    plain = run_pipeline(prog.chunk_dag(), options=CompileOptions(bounded_fifos=False)).result
    assert "once connections hold 2 calls" in find_deadlock(plain).message
    assert find_deadlock(compile_program(prog)) is None
