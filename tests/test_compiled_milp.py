"""A compiled MILP schedule runs as the MILP planned it: the IR simulator (``runtime.sim``) within
10% of the Algorithm model (``synth.cost.simulate``) at the size it was synthesized for, and the
IR still passes the static checker and computes its collective."""

from __future__ import annotations

import pytest

from codegen.check import check_ir
from codegen.compiler import compile_algorithm
from runtime.numpy import run
from runtime.sim import simulate as simulate_ir
from synth.cost import simulate
from synth.milp import synthesize
from topologies import load

SIZE = 1 << 30


@pytest.fixture(scope="module")
def ndv2x2_allgather():
    topo = load("ndv2x2")
    algo = synthesize(topo, "allgather", "ndv2x2-relay", SIZE).algorithm
    return topo, algo, compile_algorithm(algo, topo)


def test_compiled_schedule_keeps_the_models_time(ndv2x2_allgather):
    topo, algo, ir = ndv2x2_allgather
    model = simulate(algo, topo, SIZE).time_us
    compiled = simulate_ir(ir, topo, SIZE).time_us
    assert compiled <= 1.10 * model, f"compiled {compiled:.0f} us vs model {model:.0f} us"


def test_compiled_schedule_is_checked_and_correct(ndv2x2_allgather):
    _, _, ir = ndv2x2_allgather
    check_ir(ir, "azure")
    assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked

