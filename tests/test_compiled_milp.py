"""A compiled MILP schedule runs as the MILP planned it: the IR simulator (``runtime.sim``) close
to the Algorithm model (``synth.cost.simulate``) at the size it was synthesized for, and the IR
still passes the static checker and computes its collective.

The bounds are what the compiler reaches (``benchmarks/RESULTS.md``, "Compiled MILP schedules"):
NDv2 x2 1.02x and DGX-A100 x2 1.00x the model, within ``agreement.TOLERANCE`` (docs/runtime.md,
"Agreement"); DGX-2 x2 1.12x, where aggregated relays and head-of-line blocking in threadblocks
remain (see there; 1.26x before the timing engine's tie rule: the call that waited longest first).
"""

from __future__ import annotations

import pytest
from agreement import TOLERANCE

from codegen.check import check_ir
from codegen.compiler import compile_algorithm
from runtime.numpy import run
from runtime.sim import simulate as simulate_ir
from synth.milp import Options, synthesize
from synth.timing import IDEAL
from topologies import load

SIZE = 1 << 30

CASES = {
    # topology: (shipped sketch, largest compiled / model time at SIZE)
    "ndv2x2": ("ndv2x2-relay", 1 + TOLERANCE),
    "dgx-a100x2": ("dgx-a100x2-direct", 1 + TOLERANCE),
    "dgx2x2": ("dgx2x2-relay", 1.15),
}


SLOW = {"dgx2x2"}
"""Its MILP takes 17 s of the suite; ``benchmarks/compiled_sketches.py`` compiles and times it."""


@pytest.fixture(
    scope="module",
    params=[pytest.param(t, marks=[pytest.mark.slow] if t in SLOW else []) for t in sorted(CASES)],
)
def compiled_allgather(request):
    topo = load(request.param)
    result = synthesize(topo, "allgather", CASES[request.param][0], SIZE, options=Options(params=IDEAL))
    return topo, result, compile_algorithm(result.algorithm, topo), CASES[request.param][1]


def test_compiled_schedule_keeps_the_models_time(compiled_allgather):
    topo, result, ir, bound = compiled_allgather
    model = result.makespan_us  # synth.cost.simulate's time of the algorithm (test_milp_synthesis.py)
    compiled = simulate_ir(ir, topo, SIZE, params=IDEAL).time_us  # the model the MILP was made in
    assert compiled <= bound * model, f"{topo.name}: compiled {compiled:.0f} us vs model {model:.0f} us"


def test_compiled_schedule_is_checked_and_correct(compiled_allgather):
    _, _, ir, _ = compiled_allgather
    check_ir(ir, "azure")
    assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked
