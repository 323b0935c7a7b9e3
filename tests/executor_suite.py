"""Test support: the standard set of compiled schedules an executor must run correctly, and the calls
to run them at.

Every shipped DSL example (small parameters) and every baseline on the topologies where it applies,
compiled by codegen, out of place and in place where the collective has an in-place form. Each is
run for float32, float16, int32 and int64 with sum and max, at a size whose chunks are not a
multiple of the tile (tiny tiles force several per chunk, the last one short), and once with the
protocol's own tile. The tests run a representative subset (every baseline kind and every
collective appear); ``benchmarks/runtime_suite.py`` runs all of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import numpy as np

from codegen.compiler import compile_algorithm, compile_program
from codegen.ir import IR
from codegen.loader import example_names, load_program
from synth.baselines import BASELINES, BaselineError, applies, default_chunks, make_baseline
from synth.collectives import COLLECTIVES, make_collective
from topologies import load

__all__ = [
    "DTYPES",
    "EXAMPLE_PARAMS",
    "OPS",
    "TOPOLOGIES",
    "Call",
    "Case",
    "baseline_cases",
    "calls",
    "example_cases",
    "representative",
]

TOPOLOGIES = ("ring:4", "fully-connected:4", "star:5", "line:4", "hypercube:3", "dgx1", "ndv2x2")
"""The topologies codegen's tests compile every baseline on, smallest first."""

EXAMPLE_PARAMS: dict[str, dict[str, object]] = {
    "ring_allreduce": {"num_ranks": 6},
    "allpairs_allreduce": {"num_ranks": 4},
    "recursive_doubling_allgather": {"num_ranks": 8, "chunks": 2},
    "binomial_tree_broadcast": {"num_ranks": 5, "chunks": 2},
    "hierarchical_allreduce": {"topology": "dgx-a100x2"},
    "two_step_alltoall": {"topology": "dgx-a100x2"},
}
"""Small parameters for each shipped example (a test checks every example is listed)."""

DTYPES = ("float32", "float16", "int32", "int64")
OPS = ("sum", "max")
ELEMS_PER_CHUNK = 37
"""Elements per chunk: a multiple of no tile, so every chunk ends with a short tile."""
TILE_ELEMS = 8


@dataclass(frozen=True)
class Case:
    """One compiled schedule: ``name`` says what it is; ``kind`` and ``collective`` group cases."""

    name: str
    kind: str
    collective: str
    topology: str
    inplace: bool
    instances: int = 1

    def compile(self) -> IR:
        return _compile(self)


@dataclass(frozen=True)
class Call:
    """How to run a case once: nccl-tests' size, dtype, reduction, placement, tile (None: the
    protocol's)."""

    size_bytes: int
    dtype: str
    op: str
    inplace: bool
    tile_bytes: int | None


@cache
def _compile(case: Case) -> IR:
    if case.kind.startswith("example:"):
        params = {**EXAMPLE_PARAMS[case.kind.removeprefix("example:")], "instances": case.instances}
        return compile_program(load_program(case.kind, params))
    topo = load(case.topology)
    coll = make_collective(
        case.collective, topo.num_ranks, default_chunks(case.kind, case.collective, topo.num_ranks, topo)
    )
    algo = make_baseline(case.kind, topo, coll)
    return compile_algorithm(algo, topo, inplace=case.inplace, instances=case.instances)


def example_cases(instances: tuple[int, ...] = (1,)) -> list[Case]:
    """Every shipped example (its program declares whether it is in place)."""
    out = []
    for name in example_names():
        for inst in instances:
            prog = load_program(f"example:{name}", {**EXAMPLE_PARAMS[name], "instances": inst})
            topo = prog.topology.name if prog.topology is not None else "-"
            label = f"example:{name}" + (f" x{inst}" if inst > 1 else "")
            out.append(Case(label, f"example:{name}", prog.collective.name, topo, prog.inplace, inst))
    return out


def baseline_cases(topologies: tuple[str, ...] = TOPOLOGIES) -> list[Case]:
    """Every baseline kind and collective on each topology where it applies, compiled out of
    place and (except alltoall, which has no in-place form in MSCCL) in place."""
    out = []
    for name in topologies:
        topo = load(name)
        for kind in BASELINES:
            for coll in COLLECTIVES:
                if not applies(kind, coll):
                    continue
                try:
                    make_baseline(
                        kind,
                        topo,
                        make_collective(coll, topo.num_ranks, default_chunks(kind, coll, topo.num_ranks, topo)),
                    )
                except BaselineError:
                    continue
                for inplace in (False, True) if coll != "alltoall" else (False,):
                    where = "in place" if inplace else "out of place"
                    out.append(Case(f"{kind} {coll} on {name}, {where}", kind, coll, name, inplace))
    return out


def representative(cases: list[Case]) -> list[Case]:
    """The cases on the first topology (in ``TOPOLOGIES`` order) of each (kind, collective)."""
    rank = {name: k for k, name in enumerate(TOPOLOGIES)}
    first: dict[tuple[str, str], str] = {}
    for case in cases:
        key = (case.kind, case.collective)
        if key not in first or rank.get(case.topology, 99) < rank.get(first[key], 99):
            first[key] = case.topology
    return [c for c in cases if first[(c.kind, c.collective)] == c.topology]


def calls(ir: IR, dtypes: tuple[str, ...] = DTYPES, ops: tuple[str, ...] = OPS) -> Iterator[Call]:
    """Each placement the IR allows x each dtype and reduction with tiny tiles (several per chunk,
    the last short), then float32 sum with the protocol's tile."""
    placements = [p for p, ok in ((False, ir.outofplace), (True, ir.inplace)) if ok]
    for inplace in placements:
        for dtype in dtypes:
            item = np.dtype(dtype).itemsize
            for op in ops:
                size = ir.nchunksperloop * ELEMS_PER_CHUNK * item
                yield Call(size, dtype, op, inplace, TILE_ELEMS * item)
        yield Call(ir.nchunksperloop * ELEMS_PER_CHUNK * 4, "float32", "sum", inplace, None)
