"""aggregate_chunks: contiguous transfers that could run together become one cnt > 1 op."""

from __future__ import annotations

from dataclasses import replace

import pytest
from codegen_helpers import compile_and_run, stage_after, steps_of

from codegen.examples import allpairs_allreduce, ring_allreduce
from codegen.instr_dag import InstrDAG, InstrEdge
from codegen.ir import OpType
from codegen.lower import lower_algorithm
from codegen.passes.aggregate_chunks import Aggregation, aggregate_chunks
from codegen.rules import MAX_COUNT
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load
from xccl.api import synthesize


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
    """``aggregate_chunks`` with every group's runs cut one member at a time (:func:`_fits`) and
    the DAG rebuilt an instruction and an edge at a time (before both ran on arrays)."""
    merged_into: dict = {}
    counts: dict = {}
    span = window * max(dag.times, default=0.0) if dag.times is not None else 0.0
    for members in _grouped_as_before(dag):
        _merge_runs(dag, members, max_count, span, merged_into, counts)
    return _rebuilt(dag, merged_into, counts) if merged_into else dag


def _merge_runs(dag, members: list, max_count: int, span: float, merged_into: dict, counts: dict) -> None:
    """Cut one group, in the order of its chunks, into runs that fit and merge each."""
    instrs = dag.instrs
    members.sort(key=lambda m: (instrs[m[0]].src.index, m))
    run = [members[0]]
    for m in members[1:]:
        if _fits(dag, run, m, max_count, span):
            run.append(m)
            continue
        _close(run, instrs, merged_into, counts)
        run = [m]
    _close(run, instrs, merged_into, counts)


def _contiguous(a, count: int, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.buffer is b.buffer and a.index + count == b.index


def _fits(dag, run: list, m: tuple, max_count: int, span: float) -> bool:
    """Whether ``m`` extends ``run``: within the count limit, contiguous with its last member on
    both sides, and in a timed program within ``span`` of it in time and (where the times are the
    Algorithm model's) not run side by side with it."""
    instrs, times = dag.instrs, dag.times
    total = sum(instrs[x[0]].count for x in run)
    fits = total + instrs[m[0]].count <= max_count and all(
        _contiguous(instrs[a].src, instrs[a].count, instrs[b].src)
        and _contiguous(instrs[a].dst, instrs[a].count, instrs[b].dst)
        for a, b in zip(run[-1], m, strict=True)
    )
    if not fits or times is None:
        return fits
    close = all(max(times[x[c]] for x in (*run, m)) - min(times[x[c]] for x in (*run, m)) <= span for c in range(len(m)))
    apart = len(m) == 1 or not dag.info.model_timed or not any(dag.overlap(x[0], m[0]) for x in run)
    return close and apart


def _close(run: list, instrs: tuple, merged_into: dict, counts: dict) -> None:
    if len(run) < 2:
        return
    for column in zip(*run, strict=True):
        counts[column[0]] = sum(instrs[x].count for x in column)
        for x in column[1:]:
            merged_into[x] = column[0]


def _rebuilt(dag, merged_into: dict, counts: dict):
    """The DAG with every run as its first member (its count, its latest time), an instruction
    and an edge at a time."""
    kept = [i for i in range(len(dag.instrs)) if i not in merged_into]
    index = {old: new for new, old in enumerate(kept)}
    index.update((i, index[first]) for i, first in merged_into.items())
    latest: dict = {}
    for i, first in merged_into.items() if dag.times is not None else ():
        latest[first] = max(latest.get(first, dag.times[first]), dag.times[i])
    instrs = []
    for i in kept:
        ins = dag.instrs[i]
        changes = {"count": counts[i]} if i in counts else {}
        if i in latest:
            changes["time"] = latest[i]
        for match in ("send_match", "recv_match"):
            if getattr(ins, match) is not None:
                changes[match] = index[getattr(ins, match)]
        instrs.append(replace(ins, **changes))
    edges = [InstrEdge(index[e.pred], index[e.succ], e.kind) for e in dag.edges]
    first = [len(dag.instrs)] * len(kept)
    for i, at in enumerate(dag.position):
        first[index[i]] = min(first[index[i]], at)
    return InstrDAG.build(dag.info, instrs, edges, first)


def _programs() -> dict:
    dgx1, four = load("dgx1"), load("fully-connected:4")
    twice = lower_algorithm(make_baseline("direct", four, make_collective("alltoall", 4, 3)), four)
    twice.instances = 2  # instructions of instance 1 too
    return {
        "direct alltoall, 2 instances": twice,
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


@pytest.mark.parametrize("max_count", [MAX_COUNT, 2])
def test_each_window_s_counts_are_those_of_the_dag_merged_over_it(max_count):
    """What ``fit_xml_reader``'s ladder reads of each window without building it (instructions
    per rank) is what the DAG built at that window holds, and one ``Aggregation`` builds at
    every window what ``aggregate_chunks`` does."""
    for name, prog in _programs().items():
        dag = stage_after(prog, "aggregate_chunks")
        merges = Aggregation(dag, max_count)
        for window in (0.02, 0.05, 0.3, 1.0):
            built = aggregate_chunks(dag, max_count, window)
            steps = [0] * (1 + max(i.rank for i in dag.instrs))
            for ins in built.instrs:
                steps[ins.rank] += 1
            assert merges.steps(window).tolist() == steps, (name, window)
            again = merges.merged(window)
            assert (again.instrs, again.edges, again.order) == (built.instrs, built.edges, built.order), name
