"""Results remembered for the same objects (common.memo): reused only for the very same objects,
never kept past them; and the compiler's repeats they save (the 512-rank ring compile)."""

from __future__ import annotations

import gc
import importlib
import weakref
from dataclasses import replace

import pytest

from codegen import check
from codegen.compiler import run_compiler
from codegen.ir import IR, evolve
from codegen.lower import lower_algorithm
from common.memo import SameObjects
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load

obcp = importlib.import_module("codegen.passes.order_by_critical_path")  # the package exports the function


class _Thing:
    """An object that can be referred to weakly (ints and tuples cannot)."""


def test_the_same_objects_reuse_other_objects_recompute():
    memo, calls = SameObjects(), []

    def compute(value: int):
        calls.append(value)
        return [value]

    a, b = _Thing(), _Thing()
    first = memo.get([a, b], "x", lambda: compute(1))
    assert memo.get([a, b], "x", lambda: compute(2)) is first
    assert memo.get([a, b], "y", lambda: compute(3)) == [3]  # another name: computed
    assert memo.get([b, a], "x", lambda: compute(4)) == [4]  # same objects, other order: computed
    assert memo.get([], "x", lambda: compute(5)) == [5]  # nothing to tell calls apart
    assert memo.get([], "x", lambda: compute(6)) == [6]
    assert calls == [1, 3, 4, 5, 6]


def test_a_result_is_dropped_once_its_object_is_gone():
    memo = SameObjects()
    key = _Thing()
    kept = memo.get([key], "x", _Thing)
    alive = weakref.ref(kept)
    del key, kept
    gc.collect()
    assert alive() is None  # the memo did not keep the result of a dead object


@pytest.fixture()
def ring8() -> IR:
    topo = load("ring:8")
    prog = lower_algorithm(make_baseline("ring", topo, make_collective("allgather", 8)), topo)
    return run_compiler(prog).result


def test_a_changed_ir_is_checked_again(ring8):
    assert check.find_problems(ring8, "azure") == []
    # the same ranks but for rank 1's last receive: new objects, so the checker looks again
    gpu = ring8.gpus[1]
    tb = gpu.threadblocks[0]
    broken = evolve(tb, ops=tb.ops[:-1])
    gpus = (ring8.gpus[0], evolve(gpu, threadblocks=(broken, *gpu.threadblocks[1:])), *ring8.gpus[2:])
    assert check.find_problems(replace(ring8, gpus=gpus), "azure")
    assert check.find_problems(ring8, "azure") == []


def test_the_kept_ir_is_checked_for_deadlock_once(ring8, monkeypatch):
    # run_compiler's find_deadlock, its final check_ir and the writer's check of the same ranks
    calls = []
    original = check._check_deadlock
    monkeypatch.setattr(check, "_check_deadlock", lambda ir: calls.append(1) or original(ir))
    ir = replace(ring8, gpus=tuple(evolve(g) for g in ring8.gpus))  # ranks the memo has not seen
    assert check.find_deadlock(ir) is None
    check.check_ir(ir, "azure")
    check.check_ir(replace(ir, max_bytes=1 << 30), "azure")  # the writer's copy with a size window
    assert len(calls) == 1


def test_each_width_tried_orders_the_dag_once(monkeypatch):
    # the ring at 64 ranks takes more steps than azure allows on one channel: a second width
    topo = load("ring:64")
    prog = lower_algorithm(make_baseline("ring", topo, make_collective("allgather", 64)), topo)
    calls = []
    original = obcp._ordered
    monkeypatch.setattr(obcp, "_ordered", lambda dag, bounded, drain: calls.append(bounded) or original(dag, bounded, drain))
    ir = run_compiler(prog).result
    assert ir.nchannels > 1
    assert calls == [False]
