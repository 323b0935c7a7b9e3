"""One schedule, two timings, one engine: an Algorithm timed by the Algorithm model
(``synth.cost.simulate``) and its compiled IR timed by the IR simulator (``runtime.sim``) agree within
the tolerances of ``agreement`` (docs/runtime.md, "Agreement"), in the ideal and in the calibrated
model. The shipped NDv2 x2 and DGX-A100 x2
MILP schedules are checked in ``test_compiled_milp.py``, the demo's two columns in ``test_demo.py``.

The DGX-1 fronts are the Pareto fronts ``pareto_front(dgx1, "allgather" | "allreduce")`` returned,
stored (``data/dgx1-fronts``) because z3's answer depends on what ran before it in the process:
the allreduce S=6 R=14 C=48 there is the one whose IR takes 1.07x (another takes 1.00x)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agreement import REDUCING_TOLERANCE, TOLERANCE

from codegen.compiler import compile_algorithm
from runtime.sim import simulate as simulate_ir
from synth.algorithm import Algorithm
from synth.baselines import default_chunks, make_baseline
from synth.collectives import make_collective
from synth.cost import simulate
from synth.timing import DEFAULT, IDEAL
from topologies import load

GIB, MIB = 1 << 30, 1 << 20
FRONTS = sorted((Path(__file__).parent / "data" / "dgx1-fronts").glob("*.json"))


MODELS = (IDEAL, DEFAULT)
"""Both timing models: the ideal one (line rate, nothing per call) and the calibrated default,
whose launch and per-send costs both sides must charge the same way (one per call)."""


def _agree(algo: Algorithm, topology, sizes: tuple[int, ...], tolerance: float, models=MODELS) -> None:
    ir = compile_algorithm(algo, topology)
    for params in models:
        for size in sizes:
            model = simulate(algo, topology, size, params).time_us
            compiled = simulate_ir(ir, topology, size, params=params).time_us
            assert compiled == pytest.approx(model, rel=tolerance), (
                f"{algo.name} at {size} B ({params.label}): compiled {compiled:.2f} us vs model {model:.2f} us"
            )


def test_the_stored_fronts_are_dgx1s():
    """SCCL's DGX-1 fronts: allgather {(2,3,2), (3,7,6)}, allreduce {(4,6,16), (5,16,48), (6,14,48)}."""
    assert [p.stem for p in FRONTS] == [
        "allgather-dgx1-s2-r3-c2",
        "allgather-dgx1-s3-r7-c6",
        "allreduce-dgx1-s4-r6-c16",
        "allreduce-dgx1-s5-r16-c48",
        "allreduce-dgx1-s6-r14-c48",
    ]


@pytest.mark.parametrize("path", FRONTS, ids=[p.stem for p in FRONTS])
def test_smt_fronts_on_dgx1(path):
    algo, dgx1 = Algorithm.load(path), load("dgx1")
    algo.verify(dgx1)
    if algo.collective.combining:
        _agree(algo, dgx1, (GIB,), REDUCING_TOLERANCE)
    else:
        _agree(algo, dgx1, (MIB, GIB), TOLERANCE)


RINGS = [
    ("ring", "allgather", "dgx1"),
    ("ring", "allreduce", "dgx1"),
    ("ring", "allgather", "ring:8"),
    ("ring", "reducescatter", "ring:8"),
    ("ring", "allgather", "ndv2x2"),
    ("ring", "allreduce", "ndv2x2"),
    # ports shared by several transfers ready at once: 1.16x, 1.10x, 1.07x when the IR simulator
    # broke ties by rank, not by waiting time
    ("ring", "alltoall", "fully-connected:4"),
    ("bidir-ring", "alltoall", "switch:6"),
    ("bidir-ring", "alltoall", "dgx-a100x2"),
]
IDEAL_ONLY = {"alltoall"}
"""The ring alltoalls agree in the ideal model only: under the calibrated one the Algorithm model
makes a step's chunks on a connection one call, the compiler one call per run of contiguous chunks
(switch:6 at 1 GiB: 98,437 us model, 80,548 us compiled; benchmarks/RESULTS.md, "Compiled schedules
keep their speed")."""


@pytest.mark.parametrize(("kind", "coll", "name"), RINGS, ids=["-".join(c) for c in RINGS])
def test_ring_baselines(kind, coll, name):
    topology = load(name)
    n = topology.num_ranks
    algo = make_baseline(kind, topology, make_collective(coll, n, default_chunks(kind, coll, n)))
    _agree(algo, topology, (MIB, GIB), TOLERANCE, (IDEAL,) if coll in IDEAL_ONLY else MODELS)
