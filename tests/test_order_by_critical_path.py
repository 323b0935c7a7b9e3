"""order_by_critical_path: a topological order by depth, then longest path ahead, within the FIFO
bound of the runtime's connections."""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

import pytest
from codegen_helpers import stage_after

from codegen.check import find_deadlock
from codegen.compiler import compile_program
from codegen.dsl import ChunkProgram, chunk
from codegen.examples import (
    allpairs_allreduce,
    hierarchical_allreduce,
    recursive_doubling_allgather,
    ring_allreduce,
    two_step_alltoall,
)
from codegen.instr_dag import InstrDAG
from codegen.passes.order_by_critical_path import _Scheduler, order_by_critical_path
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


def _exchange(chunks: int) -> ChunkProgram:
    """Two ranks swap ``chunks`` chunks each, all ready at once (an alltoall's pairwise exchange)."""
    with ChunkProgram("exchange", "line:2", "alltoall", chunks_per_rank=chunks) as prog:
        for src, dst in ((0, 0), (1, 1), (0, 1), (1, 0)):
            for i in range(chunks):
                chunk(src, "input", dst * chunks + i).copy(dst, "output", src * chunks + i)
    prog.verify()
    return prog


def _overtaken(dag: InstrDAG) -> int:
    """Receives that come in the order before the receive of an earlier send on their connection."""
    sent: dict[tuple, list[int]] = defaultdict(list)
    received: dict[tuple, list[int]] = defaultdict(list)
    for i in dag.order:
        ins = dag.instrs[i]
        if ins.send_to is not None:
            sent[(ins.rank, ins.send_to)].append(i)
        if ins.recv_match is not None:
            received[(ins.recv_from, ins.rank)].append(ins.recv_match)
    return sum(a != b for pair in sent for a, b in zip(sent[pair], received[pair], strict=True))


def test_a_drained_exchange_alternates_and_keeps_one_threadblock_per_rank():
    """Four calls each way overfill Simple's 2-call FIFO: the bounded order lets a receive overtake
    the calls in flight, which then needs a threadblock and channel of its own; draining the oldest
    calls first keeps each connection in order, so a compact layout pairs both directions in one
    threadblock, deadlock-free (the 512-rank hierarchical alltoall's exchanges, docs/scale.md)."""
    dag = stage_after(_exchange(4), "fuse_recv_send", max_count=1)  # a call per chunk, none merged
    overtaking, drained = order_by_critical_path(dag), order_by_critical_path(dag, drain_fifos=True)
    assert _overtaken(overtaking) > 0
    assert _overtaken(drained) == 0
    assert _in_flight_peak(drained) <= fifo_calls("Simple")
    layouts = {}
    for drain in (False, True):
        opts = CompileOptions(bounded_fifos=True, drain_fifos=drain, compact=1, max_count=1)
        ir = run_pipeline(_exchange(4).chunk_dag(), options=opts).result
        assert find_deadlock(ir) is None
        layouts[drain] = [len(g.threadblocks) for g in ir.gpus]
    assert layouts == {False: [2, 2], True: [1, 1]}


def _asked_after_every_take(dag: InstrDAG, drain: bool) -> tuple[int, ...]:
    """The bounded order as it was found before a refused instruction was held out of the heap:
    every refused one asked again after each take (the reference the held order must equal)."""
    sched = _Scheduler(dag, drain)
    ready = [(sched.key[i], i) for i in range(len(dag.instrs)) if sched.waiting[i] == 0]
    heapq.heapify(ready)
    while ready:
        skipped, chains = [], None
        while ready and chains is None:
            item = heapq.heappop(ready)
            if sched.taken[item[1]]:
                continue
            chains = sched._chains(item[1])
            if chains is None:
                skipped.append(item)
        if chains is None:
            if not skipped:
                break
            chains = [[skipped.pop(0)[1]]]
        for item in skipped:
            heapq.heappush(ready, item)
        for chain in chains:
            sched._take(chain, ready)
    return tuple(sched.order)


def _trees_reducescatter() -> ChunkProgram:
    """``synth trees``' DGX-1 reducescatter, lowered: about a thousand refusals."""
    from codegen.lower import lower_algorithm
    from synth.trees import synthesize
    from topologies import load

    dgx1 = load("dgx1")
    return lower_algorithm(synthesize(dgx1, "reducescatter", size_bytes=2**30).algorithm, dgx1)


HELD = {
    **{name: (lambda prog=prog: prog, {}) for name, prog in PROGRAMS.items()},
    "exchange": (lambda: _exchange(6), {"max_count": 1}),
    "trees-reducescatter": (_trees_reducescatter, {}),
}


@pytest.mark.parametrize("name", HELD)
@pytest.mark.parametrize("drain", [False, True])
def test_holding_refused_instructions_keeps_the_order(name, drain):
    """Held out of the heap until what refused it changes, a refused instruction is taken where
    asking it again after every take would take it: the same order, deadlock fallbacks included."""
    make, options = HELD[name]
    dag = stage_after(make(), "fuse_recv_send", **options)
    held = _Scheduler(dag, drain)
    assert held.run() == _asked_after_every_take(dag, drain)
    assert sorted(held.order) == list(range(len(dag.instrs)))
    if name == "trees-reducescatter":
        assert held.wakes > 500  # the case exercises holding
