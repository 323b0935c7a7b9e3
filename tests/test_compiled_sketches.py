"""Issue 17 item 4: the compiled XML of every shipped multi-machine sketch's MILP allgather (and the
DGX H100 x2 reducescatter, the fast representative), at the size the sketch synthesizes for, takes
within 10% of its Algorithm's time in the IR simulator, in the ideal model and the calibrated one;
the MILPs are made in the ideal model, where these ratios were measured, and the H100 x2
reducescatter also in the calibrated default, as ``xccl compile`` compiles it (``runtime.choice``: the port order
kept where it is faster); or it is listed with why not.

Measured ratios and causes: benchmarks/RESULTS.md, "Compiled schedules keep their speed". The
fast representative runs in the suite; the others (20-200 s of MILP and compile each) are slow.
"""

from __future__ import annotations

import functools
import json

import pytest

import xccl
from common.errors import XcclError
from runtime.choice import PORT_ORDERS, SPEED, compile_fastest
from runtime.sim import simulate as simulate_ir
from sketches.io import load_sketch
from synth.algorithm import Algorithm
from synth.cost import simulate
from synth.milp import Options, synthesize
from synth.timing import DEFAULT, IDEAL, Params
from topologies import Topology, load

SLOW = pytest.mark.slow
BEYOND = "the compiled IR takes more than 10% over its Algorithm (RESULTS.md, 'Compiled schedules keep their speed')"

CASES = [
    # the fast representative, made in the ideal model (two chunks, proven optimal in 1 s): 1.22x its
    # Algorithm before the port order (runtime.choice); in the calibrated default its MILP takes 32
    # chunks and a 30 s scheduling stage, so that case is slow
    pytest.param("dgx-h100x2-direct", "reducescatter", IDEAL, id="dgx-h100x2-direct-reducescatter-ideal"),
    pytest.param(
        "dgx-h100x2-direct", "reducescatter", DEFAULT, marks=SLOW, id="dgx-h100x2-direct-reducescatter"
    ),
    pytest.param("dgx-h100x2-direct", "allgather", IDEAL, marks=SLOW, id="dgx-h100x2-direct"),
    pytest.param("ndv2x2-relay", "allgather", IDEAL, marks=SLOW, id="ndv2x2-relay"),
    pytest.param("dgx-a100x2-direct", "allgather", IDEAL, marks=SLOW, id="dgx-a100x2-direct"),
    pytest.param("dgx-a100x4-direct", "allgather", IDEAL, marks=SLOW, id="dgx-a100x4-direct"),
    pytest.param(
        "ndv2x4-relay", "allgather", IDEAL, marks=SLOW, id="ndv2x4-relay"
    ),  # 1.31x before the port order
    # aggregated relays and head-of-line blocking in threadblocks: 1.12x ideal (1.08x calibrated)
    pytest.param(
        "dgx2x2-relay",
        "allgather",
        IDEAL,
        marks=[SLOW, pytest.mark.xfail(strict=True, reason=BEYOND)],
        id="dgx2x2-relay",
    ),
    pytest.param("dgx-a100x8-direct", "allgather", IDEAL, marks=SLOW, id="dgx-a100x8-direct"),  # 1.14x before
    # 64 KiB: a connection's two calls in flight (FIFO depth 2) bind, 2.37x ideal (1.22x unbounded)
    pytest.param(
        "ndv2x2-fc",
        "allgather",
        IDEAL,
        marks=[SLOW, pytest.mark.xfail(strict=True, reason=BEYOND)],
        id="ndv2x2-fc",
    ),
]


@functools.cache
def _milp(name: str, collective: str, made_in: Params) -> tuple[Algorithm, Topology, int]:
    """The MILP schedule of shipped sketch ``name`` at its size, optimised in ``made_in``."""
    sketch = load_sketch(name)
    topo = load(sketch.topology)
    size = sketch.target_size_bytes
    return synthesize(topo, collective, sketch, size, options=Options(params=made_in)).algorithm, topo, size


@pytest.mark.parametrize(("name", "collective", "made_in"), CASES)
def test_compiled_schedule_keeps_its_speed(name, collective, made_in):
    algo, topo, size = _milp(name, collective, made_in)
    ir, choice = compile_fastest(algo, topo)
    assert choice is not None and choice.size_bytes == size
    for params in (IDEAL, DEFAULT):
        model = simulate(algo, topo, size, params).time_us
        compiled = simulate_ir(ir, topo, size, params=params).time_us
        assert compiled <= (1 + SPEED) * model, (
            f"{name} at {size} B ({params.label}): compiled {compiled:.1f} us vs Algorithm {model:.1f} us"
        )


def test_the_api_and_xccl_bench_compile_the_order_xccl_compile_keeps(tmp_path, cli):
    # xccl.compile (which xccl tune and xccl demo call) and xccl bench compiled without the port
    # order before: 1.22x its Algorithm here, where xccl compile's choice gives 1.03x
    algo, topo, size = _milp("dgx-h100x2-direct", "reducescatter", IDEAL)
    model = simulate(algo, topo, size, DEFAULT).time_us
    ratio = {
        order: simulate_ir(xccl.compile(algo, topo, port_order=order), topo, size).time_us / model
        for order in PORT_ORDERS
    }
    assert ratio["off"] > 1 + SPEED >= ratio["auto"] == min(ratio["on"], ratio["off"])
    path = algo.save(tmp_path / "rs.json")
    proc = cli("bench", str(path), "--backend", "sim", "--sizes", str(size), "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["rows"]
    assert row["time_us"] == pytest.approx(ratio["auto"] * model, rel=1e-6)


def test_a_port_order_the_compiler_does_not_know_is_refused():
    algo = xccl.synthesize("ring:4", "allgather", "ring")
    with pytest.raises(XcclError, match=r"port_order: expected one of auto, on, off, got 'yes'"):
        xccl.compile(algo, port_order="yes")
