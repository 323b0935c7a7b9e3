"""Issue 17 item 4: the compiled XML of every shipped multi-machine sketch's MILP allgather, at the
size the sketch synthesizes for, takes within 10% of its Algorithm's time in the IR simulator, in
the model the MILP was made in (ideal) and the calibrated default, as ``xccl compile`` compiles it
(``runtime.choice``: the port order kept where it is faster); or it is listed with why not.

Measured ratios and causes: benchmarks/RESULTS.md, "Compiled schedules keep their speed". The
fast representative runs in the suite; the others (20-90 s of MILP and compile each) are slow.
"""

from __future__ import annotations

import pytest

from runtime.choice import SPEED, compile_fastest
from runtime.sim import simulate as simulate_ir
from sketches.io import load_sketch
from synth.cost import simulate
from synth.milp import synthesize
from synth.timing import DEFAULT, IDEAL
from topologies import load

SLOW = pytest.mark.slow
BEYOND = "the compiled IR takes more than 10% over its Algorithm (RESULTS.md, 'Compiled schedules keep their speed')"

SKETCHES = [
    pytest.param("dgx-h100x2-direct", id="dgx-h100x2-direct"),
    pytest.param("ndv2x2-relay", marks=SLOW, id="ndv2x2-relay"),
    pytest.param("dgx-a100x2-direct", marks=SLOW, id="dgx-a100x2-direct"),
    pytest.param("dgx-a100x4-direct", marks=SLOW, id="dgx-a100x4-direct"),
    # aggregated relays and head-of-line blocking in threadblocks: 1.12x
    pytest.param("dgx2x2-relay", marks=[SLOW, pytest.mark.xfail(strict=True, reason=BEYOND)], id="dgx2x2-relay"),
    # relay threadblocks forwarding in order behind late receives: 1.31x
    pytest.param("ndv2x4-relay", marks=[SLOW, pytest.mark.xfail(strict=True, reason=BEYOND)], id="ndv2x4-relay"),
    # ports shared by calls the IR serves in waiting order, not the schedule's: 1.14x
    pytest.param(
        "dgx-a100x8-direct", marks=[SLOW, pytest.mark.xfail(strict=True, reason=BEYOND)], id="dgx-a100x8-direct"
    ),
    # 64 KiB: a connection's two calls in flight (FIFO depth 2) bind, 2.37x (1.22x unbounded)
    pytest.param("ndv2x2-fc", marks=[SLOW, pytest.mark.xfail(strict=True, reason=BEYOND)], id="ndv2x2-fc"),
]


@pytest.mark.parametrize("name", SKETCHES)
def test_compiled_allgather_keeps_its_speed(name):
    sketch = load_sketch(name)
    topo = load(sketch.topology)
    size = sketch.target_size_bytes
    algo = synthesize(topo, "allgather", sketch, size).algorithm
    ir, choice = compile_fastest(algo, topo)
    assert choice is not None and choice.size_bytes == size
    for params in (IDEAL, DEFAULT):
        model = simulate(algo, topo, size, params).time_us
        compiled = simulate_ir(ir, topo, size, params=params).time_us
        assert compiled <= (1 + SPEED) * model, (
            f"{name} at {size} B ({params.label}): compiled {compiled:.1f} us vs Algorithm {model:.1f} us"
        )
