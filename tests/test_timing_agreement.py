"""One schedule, two timings, one engine: an Algorithm timed by the Algorithm model
(``synth.cost.simulate``) and its compiled IR timed by the IR simulator (``runtime.sim``) agree within
``agreement.TOLERANCE`` (docs/runtime.md, "Agreement"). The shipped NDv2 x2 MILP schedule is checked
in ``test_compiled_milp.py``, the demo's two columns in ``test_demo.py``."""

from __future__ import annotations

import pytest
from agreement import TOLERANCE

from codegen.compiler import compile_algorithm
from runtime.sim import simulate as simulate_ir
from synth.baselines import default_chunks, make_baseline
from synth.collectives import make_collective
from synth.cost import simulate
from synth.smt import pareto_front
from topologies import load

GIB, MIB = 1 << 30, 1 << 20


def _agree(algo, ir, topology, size: int) -> None:
    model = simulate(algo, topology, size).time_us
    compiled = simulate_ir(ir, topology, size).time_us
    assert compiled == pytest.approx(model, rel=TOLERANCE), (
        f"{algo.name} at {size} B: compiled {compiled:.2f} us vs model {model:.2f} us"
    )


@pytest.fixture(scope="module")
def dgx1():
    return load("dgx1")


@pytest.fixture(scope="module", params=["allgather", "allreduce"])
def front(request, dgx1):
    """The SMT Pareto front of DGX-1 (SCCL's walk), each algorithm compiled."""
    algos = pareto_front(dgx1, request.param).algorithms
    assert algos
    return request.param, [(a, compile_algorithm(a, dgx1)) for a in algos]


def test_smt_fronts_on_dgx1(front, dgx1):
    name, compiled = front
    for algo, ir in compiled:
        _agree(algo, ir, dgx1, GIB)
        if name == "allgather":  # at 1 MiB the allreduce front's IR waits for FIFO room (up to 1.09x)
            _agree(algo, ir, dgx1, MIB)


RINGS = [
    ("allgather", "dgx1"),
    ("allreduce", "dgx1"),
    ("allgather", "ring:8"),
    ("reducescatter", "ring:8"),
    ("allgather", "ndv2x2"),
    ("allreduce", "ndv2x2"),
]


@pytest.mark.parametrize(("coll", "name"), RINGS, ids=["-".join(c) for c in RINGS])
def test_ring_baselines(coll, name):
    topology = load(name)
    n = topology.num_ranks
    algo = make_baseline("ring", topology, make_collective(coll, n, default_chunks("ring", coll, n)))
    ir = compile_algorithm(algo, topology)
    for size in (MIB, GIB):
        _agree(algo, ir, topology, size)
