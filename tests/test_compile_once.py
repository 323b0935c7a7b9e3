"""The compiler runs the passes that do not depend on the order or width it tries only once."""

from __future__ import annotations

from dataclasses import replace

import pytest

import xccl
from codegen import passes
from codegen.compiler import compile_algorithm, run_compiler
from codegen.lower import lower_algorithm
from codegen.passes import DEFAULT_PIPELINE
from codegen.rules import get_dialect
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load


@pytest.fixture()
def ring8():
    topo = load("ring:8")
    return lower_algorithm(make_baseline("ring", topo, make_collective("allgather", 8)), topo)


@pytest.fixture()
def expand_calls(monkeypatch) -> list[int]:
    """Counts the runs of expand_instructions (the most expensive pass before the ordering)."""
    calls: list[int] = []
    original = passes.PASSES["expand_instructions"]

    def counting(dag):
        calls.append(1)
        return original.run(dag)

    monkeypatch.setitem(passes.PASSES, "expand_instructions", replace(original, run=counting))
    return calls


def test_verify_each_expands_once(ring8, expand_calls):
    # the plain order is kept and rerun with the checks: before, the whole pipeline ran twice
    result = run_compiler(ring8, verify_each=True, print_after=("fuse_recv_send",))
    assert len(expand_calls) == 1
    assert [r.name for r in result.records] == list(DEFAULT_PIPELINE)
    assert [r.name for r in result.records if r.dump is not None] == ["fuse_recv_send"]


@pytest.fixture()
def runs(monkeypatch) -> dict[str, list]:
    """What each pass of the tail ran on: its options (assign_channels: with the channels it gave)."""
    seen: dict[str, list] = {"order_by_critical_path": [], "assign_channels": [], "assign_threadblocks": []}

    def counting(name, original):
        def run(stage, **options):
            out = original.run(stage, **options)
            seen[name].append((options, out.channel if name == "assign_channels" else None))
            return out

        return run

    for name in seen:
        original = passes.PASSES[name]
        monkeypatch.setitem(passes.PASSES, name, replace(original, run=counting(name, original)))
    return seen


def test_layouts_order_once_and_skip_a_tail_whose_channels_repeat(runs, monkeypatch):
    # the trees allgather on two DGX H100 with a runtime of 16 threadblocks: the default layout and
    # layout 1 do not fit (a threadblock per peer and direction), layout 2 (paired) does. Their
    # bounds rule them out before their channels now (test_layout_judged); without them, as for a
    # program the bounds do not cover, layout 1 assigns the default layout's channels again
    import codegen.compiler as compiler

    monkeypatch.setattr(compiler, "unpaired_bounds", lambda dag: (None,) * dag.info.num_ranks)
    topo = load("dgx-h100x2")
    algo = xccl.synthesize("dgx-h100x2", "allgather", method="trees")
    tight = replace(get_dialect("azure"), max_threadblocks=16)
    ir = compile_algorithm(algo, topo, dialect=tight)
    assert max(len(g.threadblocks) for g in ir.gpus) <= 16
    assert len(runs["assign_channels"]) >= 3  # several layouts and widths tried
    bounds = {opts["bounded_fifos"] for opts, _ in runs["order_by_critical_path"]}
    assert len(runs["order_by_critical_path"]) == len(bounds)
    pairing = [(ch, opts["compact"] >= 2, opts["compact"] >= 3) for opts, ch in runs["assign_channels"]]
    assert len(runs["assign_threadblocks"]) == len(set(pairing)) < len(pairing)


@pytest.mark.slow
def test_default_layout_stops_widening_where_steps_grow_or_stay_level(runs):
    # the hierarchical alltoall on 16 DGX H100 with a runtime of 20 steps per threadblock: the
    # default layout's round robin over all flows takes 24 steps at 1, 2, 4, ..., 32 channels (23 at
    # 32; at 512 ranks 72 at 1 .. 8, each a tail of ~10 s): it stops at 4, where steps stay level twice
    topo = load("dgx-h100x16")
    algo = xccl.synthesize("dgx-h100x16", "alltoall", method="hierarchical")
    tight = replace(get_dialect("azure"), max_steps=20)
    ir = compile_algorithm(algo, topo, dialect=tight)
    assert max(len(tb.ops) for g in ir.gpus for tb in g.threadblocks) <= 20
    default = [opts["channels"] for opts, _ in runs["assign_channels"] if not opts["compact"]]
    assert default == [1, 2, 4]  # deadlock-free, over the steps at each: the compact layouts are next
