"""A compiled SMT schedule (untimed: steps, no start times) runs as fast as the Algorithm model
times it: the compiler list-schedules it with the model and follows that schedule. Before, the
bandwidth-optimal DGX-1 allgather took 2.1x its model in the IR simulator (transfers the model runs
side by side over DGX-1's doubled NVLinks queued on one threadblock, merged into one op, or waited
behind transfers of later steps)."""

from __future__ import annotations

import pytest

from codegen.check import check_ir
from codegen.compiler import compile_algorithm
from runtime.numpy import run
from runtime.sim import simulate as simulate_ir
from synth.collectives import make_collective
from synth.cost import simulate
from synth.smt import least_steps, solve_instance
from synth.timing import IDEAL
from topologies import load


@pytest.fixture(scope="module")
def dgx1():
    return load("dgx1")


@pytest.fixture(scope="module")
def schedules(dgx1):
    """The bandwidth-optimal allgather (S=3 R=7 C=6) and the least-steps alltoall, compiled."""
    allgather = solve_instance(dgx1, make_collective("allgather", 8, 6), 3, 7).algorithm
    alltoall = least_steps(dgx1, make_collective("alltoall", 8, 1)).algorithm
    return [(algo, compile_algorithm(algo, dgx1)) for algo in (allgather, alltoall)]


@pytest.mark.parametrize("size", [1 << 20, 1 << 30])
def test_compiled_smt_schedules_keep_the_models_time(dgx1, schedules, size):
    for algo, ir in schedules:
        model = simulate(algo, dgx1, size, IDEAL).time_us
        compiled = simulate_ir(ir, dgx1, size, params=IDEAL).time_us
        assert compiled <= 1.10 * model, f"{algo.name}: compiled {compiled:.1f} us vs model {model:.1f} us"


def test_compiled_smt_schedules_are_checked_and_correct(schedules):
    for _, ir in schedules:
        check_ir(ir, "azure")
        assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked
