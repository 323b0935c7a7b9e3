"""What `xccl compile` of an untimed schedule with a recorded size asks twice is computed once."""

from __future__ import annotations

import importlib

import pytest

from runtime.choice import compile_fastest
from synth.timing import DEFAULT, IDEAL
from topologies import load
from xccl.api import synthesize

cost = importlib.import_module("synth.cost")
sim = importlib.import_module("runtime.sim")


@pytest.fixture(scope="module")
def trees():
    """An untimed schedule with its recorded size (the tree packing's allgather on dgx1)."""
    topo = load("dgx1")
    return topo, synthesize(topo, "allgather", "trees")


def test_the_ideal_list_schedule_of_the_lowering_serves_the_choice(trees, monkeypatch):
    # lowering orders the tree packing by the ideal model at 1 GiB; the choice then times the
    # Algorithm there in the ideal and the calibrated model: two schedules, not three
    topo, algo = trees
    runs = []
    scheduled = cost._scheduled
    monkeypatch.setattr(cost, "_SCHEDULED", cost.SameObjects())
    monkeypatch.setattr(cost, "_scheduled", lambda *a: runs.append((id(a[0]), a[2], a[3])) or scheduled(*a))
    _, choice = compile_fastest(algo, topo)
    assert choice is not None and (id(algo), 1 << 30, IDEAL) in runs and len(set(runs)) == len(runs)
    assert cost.start_times(algo, topo, 1 << 30, IDEAL) == scheduled(algo, topo, 1 << 30, IDEAL)[0]


def test_an_ir_timed_in_two_models_is_judged_and_folded_once(trees, monkeypatch):
    topo, algo = trees
    builds, plans = [], []
    build, plan = sim.judged, sim._plan
    monkeypatch.setattr(sim, "_PROGRAMS", sim.SameObjects())
    monkeypatch.setattr(sim, "judged", lambda ir: builds.append(ir) or build(ir))
    monkeypatch.setattr(sim, "_plan", lambda ir, ends: plans.append(ir) or plan(ir, ends))
    ir, _ = compile_fastest(algo, topo, port_order="off")
    ideal = sim.simulate(ir, topo, 1 << 30, params=IDEAL).time_us
    calibrated = sim.simulate(ir, topo, 1 << 30, params=DEFAULT).time_us
    assert [x is ir for x in builds] == [True] and 0 < ideal < calibrated
    assert [x is ir for x in plans] == [True]  # the simulator's flat form of it too


def test_the_algorithm_model_links_the_sends_once_for_every_size_and_model(trees, monkeypatch):
    # the sends' groups and dependencies depend on neither (an untimed schedule's sends are calls
    # apart in both models): the ideal and the calibrated schedules at two sizes share them
    topo, algo = trees
    shapes = []
    shape = cost._shape
    monkeypatch.setattr(cost, "_SCHEDULED", cost.SameObjects())
    monkeypatch.setattr(cost, "_shape", lambda *a: shapes.append(a[2]) or shape(*a))
    times = [
        cost.simulate(algo, topo, size, p).time_us for size in (1 << 20, 1 << 30) for p in (IDEAL, DEFAULT)
    ]
    assert shapes == [False] and all(t > 0 for t in times)


def test_the_checks_shortcut_for_a_sound_op_agrees_with_its_problems():
    # every op is judged by the shortcut first; only where it fails are the problems spelled out
    from dataclasses import replace

    from codegen.compiler import compile_algorithm
    from codegen.ir import Dep, OpType
    from codegen.rules.structure import _fine, _op_problems, declared_sizes
    from synth.baselines import make_baseline
    from synth.collectives import make_collective

    topo = load("ring:4")
    ir = compile_algorithm(make_baseline("ring", topo, make_collective("allgather", 4)), topo)
    gpu = ir.gpus[1]
    sizes, steps = declared_sizes(ir)[1], {tb.id: len(tb.ops) for tb in gpu.threadblocks}
    tb = next(t for t in gpu.threadblocks if any(op.type is OpType.RECV_COPY_SEND for op in t.ops))
    op = next(op for op in tb.ops if op.type is OpType.RECV_COPY_SEND)
    ops = [
        op,
        replace(op, count=0),
        replace(op, count=sizes[op.dst.buffer] + 1),
        replace(op, src=replace(op.dst, index=-1)),
        replace(op, dst=replace(op.dst, index=sizes[op.dst.buffer])),
        replace(op, dst=None),
        replace(op, type=OpType.NOP, count=0, src=None, dst=None),
        replace(op, deps=(Dep(tb.id, len(tb.ops)),)),
        replace(op, deps=(Dep(99, 0),)),
    ]
    tbs = [tb, replace(tb, send=None), replace(tb, recv=None)]
    verdicts = [(_fine(t, o, sizes, steps), not _op_problems(t, o, sizes, steps, (1, t.id, 0))) for t in tbs for o in ops]
    assert all(a == b for a, b in verdicts) and {a for a, _ in verdicts} == {True, False}


def test_a_sweep_over_sizes_keeps_few_schedules(trees, monkeypatch):
    # each schedule holds a start per send: a size sweep must not keep them all
    topo, algo = trees
    monkeypatch.setattr(cost, "_SCHEDULED", cost.SameObjects())
    sizes = [1 << k for k in range(10, 31, 2)]
    times = [cost.simulate(algo, topo, size, IDEAL).time_us for size in sizes]
    held = cost._SCHEDULED.get((algo, topo), "schedules", dict)
    assert len(held) == cost._KEPT and times == sorted(times)
    assert cost.simulate(algo, topo, 1 << 10, IDEAL).time_us == times[0]
