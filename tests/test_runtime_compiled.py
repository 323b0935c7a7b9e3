"""Every shipped example and every baseline, compiled by codegen, computes its collective on the NumPy
executor: four dtypes, sum and max, in place and out of place where the IR allows it, chunks that
are not a multiple of the tile (several tiles, the last short) and the protocol's own tile.

The fast set takes each baseline kind and collective on its smallest topology, plus the cases that
need the bounded-FIFO order; the full cross product is ``slow`` (``benchmarks/runtime_suite.py``
runs it too)."""

from __future__ import annotations

import pytest
from executor_suite import (
    DTYPES,
    EXAMPLE_PARAMS,
    OPS,
    Case,
    baseline_cases,
    calls,
    example_cases,
    representative,
)

from codegen.loader import example_names
from runtime.numpy import run
from synth.baselines import BASELINES
from synth.collectives import COLLECTIVES

ALL = baseline_cases()
FAST = representative(ALL)
HARD = [
    c
    for c in ALL
    if (c.kind, c.collective, c.topology)
    in {("ring", "alltoall", "dgx1"), ("recursive-doubling", "allgather", "dgx1")}
]
"""Cases whose plain order deadlocks with the runtime's FIFOs (the compiler bounds it; FAST has the
hierarchical ones): a ring alltoall and recursive doubling's exchanges of 4 chunks."""
SLOW = [c for c in ALL if c not in FAST and c not in HARD]


def _runs_everywhere(case: Case) -> int:
    ir = case.compile()
    n = 0
    for call in calls(ir):
        result = run(
            ir, call.size_bytes, call.dtype, call.op, inplace=call.inplace, tile_bytes=call.tile_bytes
        )
        assert result.checked, case.name
        assert result.tiles == (1 if call.tile_bytes is None else 5)
        n += 1
    return n


def test_the_sets_cover_every_example_kind_collective_dtype_and_op():
    assert sorted(EXAMPLE_PARAMS) == example_names()
    assert {c.kind for c in FAST} == set(BASELINES)
    assert {c.collective for c in FAST} == set(COLLECTIVES)
    assert {c.inplace for c in FAST} == {False, True}
    assert set(DTYPES) == {"float32", "float16", "int32", "int64"} and set(OPS) == {"sum", "max"}
    assert len(HARD) == 3 and set(FAST) | set(HARD) | set(SLOW) == set(ALL)


@pytest.mark.parametrize("case", example_cases((1, 2)), ids=lambda c: c.name)
def test_every_example_computes_its_collective(case):
    assert _runs_everywhere(case) >= 9


@pytest.mark.parametrize("case", FAST + HARD, ids=lambda c: c.name)
def test_every_baseline_computes_its_collective(case):
    assert _runs_everywhere(case) == 9


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=lambda c: c.name)
def test_every_baseline_on_every_topology_computes_its_collective(case):
    assert _runs_everywhere(case) == 9
