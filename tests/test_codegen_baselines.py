"""Every baseline on the topologies where it applies: compiles, passes the static checker and the
independent validator, round-trips through XML and JSON, and computes its collective."""

from __future__ import annotations

from functools import cache

import pytest
from codegen_helpers import assert_loads_and_computes, writable
from executor_suite import baseline_cases
from ir_interpreter import execute
from msccl_xml_rules import violations

from codegen.compiler import compile_algorithm
from codegen.formats import read_ir, write_ir
from codegen.rules import DIALECTS
from codegen.semantics import find_wrong_result
from synth.baselines import BASELINES, default_chunks, make_baseline
from synth.collectives import COLLECTIVES, make_collective
from topologies import load


@cache
def _cases() -> tuple[tuple[str, str, str], ...]:
    """(topology, kind, collective) for every baseline that builds on the suite's topologies (the
    runtime suite's list, out of place: one case per schedule)."""
    return tuple((c.topology, c.kind, c.collective) for c in baseline_cases() if not c.inplace)


def _algo(name: str, kind: str, coll: str):
    topo = load(name)
    return make_baseline(
        kind, topo, make_collective(coll, topo.num_ranks, default_chunks(kind, coll, topo.num_ranks, topo))
    ), topo


def test_the_cases_cover_every_kind_and_collective():
    cases = _cases()
    assert len(cases) > 90
    assert {k for _, k, _ in cases} == set(BASELINES)
    assert {c for _, _, c in cases} == set(COLLECTIVES)


@pytest.mark.parametrize(("topology", "kind", "coll"), _cases(), ids=["-".join(c) for c in _cases()])
def test_baseline_compiles_round_trips_and_runs(topology, kind, coll):
    algo, topo = _algo(topology, kind, coll)
    ir = compile_algorithm(algo, topo)  # statically checked for the azure executor
    for dialect in DIALECTS:
        if DIALECTS[dialect].xml is None or DIALECTS[dialect].xml_collective(coll) is None:
            continue
        windowed = writable(ir, dialect)
        text = write_ir(windowed, dialect)
        assert violations(text, dialect) == []
        assert_loads_and_computes(text, dialect, windowed)
        assert read_ir(text) == windowed
    assert read_ir(write_ir(ir, "json")) == ir
    execute(ir, seed=0)


@pytest.mark.parametrize("topology", ["ring:4", "dgx1"])
def test_baselines_compiled_in_place_and_replicated_run(topology):
    for name, kind, coll in _cases():
        if name != topology or coll == "alltoall":
            continue
        algo, topo = _algo(name, kind, coll)
        ir = compile_algorithm(algo, topo, inplace=True, instances=2)
        assert ir.inplace and not ir.outofplace
        execute(ir, seed=1)
        assert find_wrong_result(ir) is None
