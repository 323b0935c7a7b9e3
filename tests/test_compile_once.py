"""The compiler runs the passes that do not depend on the order or width it tries only once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codegen import passes
from codegen.compiler import run_compiler
from codegen.lower import lower_algorithm
from codegen.passes import DEFAULT_PIPELINE
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
