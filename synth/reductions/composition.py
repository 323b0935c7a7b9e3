"""Composition: allreduce as one collective followed by another on the same topology.

Without in-network reduction an allreduce is a reducescatter followed by an allgather (each rank's
C chunks split among the n ranks: both parts have C / n chunks per rank), or a reduce to a root
followed by a broadcast from it (both with C chunks). Address ``a`` of the allreduce is address
``a`` of the first part and chunk ``a`` of the second, so the two schedules run one after the
other as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from synth.algorithm import Algorithm, Send, Step
from synth.collectives import Collective, CollectiveError, make_collective
from synth.reductions.base import Problem, Reduced, Reduction, ReductionError, Solution

__all__ = ["REDUCESCATTER_ALLGATHER", "REDUCE_BROADCAST", "Composition", "compose", "refine"]


def compose(first: Algorithm, second: Algorithm, collective: Collective, via: str) -> Algorithm:
    """Run ``first`` then ``second`` as one algorithm for ``collective`` (not verified)."""
    if first.topology != second.topology:
        raise CollectiveError(f"cannot compose algorithms for {first.topology} and {second.topology}")
    t1, t2 = first.provenance.solve_time_s, second.provenance.solve_time_s
    total = None if t1 is None or t2 is None else t1 + t2
    prov = replace(first.provenance, solve_time_s=total, optimal=None, via=via)
    return Algorithm(collective, first.topology, first.steps + second.steps, prov)


def refine(algo: Algorithm, factor: int) -> Algorithm:
    """The same schedule with every chunk split in ``factor`` (C and R both times ``factor``).

    Chunk and address ids follow MSCCL's layouts, where piece ``j`` of id ``a`` is ``a * factor + j``.
    """
    if factor == 1:
        return algo
    coll = algo.collective
    finer = make_collective(coll.name, coll.num_ranks, coll.chunks_per_rank * factor, coll.root)
    steps = tuple(
        Step(
            st.rounds * factor,
            tuple(
                sorted(
                    Send(s.chunk * factor + j, s.src, s.dst, s.op) for s in st.sends for j in range(factor)
                )
            ),
        )
        for st in algo.steps
    )
    return Algorithm(finer, algo.topology, steps, algo.provenance)


def _shifted(algo: Algorithm, shift_us: float) -> Algorithm:
    steps = tuple(
        Step(st.rounds, tuple(replace(s, start_us=(s.start_us or 0.0) + shift_us) for s in st.sends))
        for st in algo.steps
    )
    return replace(algo, steps=steps)


@dataclass(frozen=True, repr=False)
class Composition(Reduction):
    """allreduce -> ``first`` then ``second`` (module docstring); ``split``: each part has C / n
    chunks per rank (reducescatter + allgather), else C; rooted parts use ``root``."""

    first: str
    second: str
    split: bool
    root: int | None = None

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.first} + {self.second}"

    def accepts(self, problem: Problem) -> bool:
        c = problem.collective
        return c.name == "allreduce" and (not self.split or c.chunks_per_rank % c.num_ranks == 0)

    def apply(self, problem: Problem) -> Reduced:
        c = problem.collective
        if c.name != "allreduce":
            raise ReductionError(f"{self.name} composes an allreduce, not {c.name}")
        n = c.num_ranks
        if not self.accepts(problem):
            raise ReductionError(
                f"allreduce is built as {self.name} and needs chunks per rank divisible by {n} ranks, "
                f"got {c.chunks_per_rank}"
            )
        chunks = c.chunks_per_rank // n if self.split else c.chunks_per_rank
        parts = tuple(
            replace(problem, collective=make_collective(name, n, chunks, self.root, lazy=True), symmetry=None)
            for name in (self.first, self.second)
        )
        return Reduced(self, problem, parts, self.name)

    def invert(self, reduced: Reduced, solutions: Sequence[Solution]) -> Solution:
        """Both parts refined to a common chunk count (untimed ones only: refining drops start
        times), then the second after the first; timed parts shift the second by the first's makespan."""
        first, second = solutions
        a, b = first.algorithm, second.algorithm
        common = math.lcm(a.chunks, b.chunks)
        a, b = refine(a, common // a.chunks), refine(b, common // b.chunks)
        makespan = None
        if first.makespan_us is not None and second.makespan_us is not None:
            b = _shifted(b, first.makespan_us)
            makespan = first.makespan_us + second.makespan_us
        n = reduced.original.collective.num_ranks
        collective = make_collective("allreduce", n, common * n if self.split else common)
        algo = compose(a, b, collective, via=self.name)
        algo.verify(reduced.original.topology)
        return Solution(algo, makespan)


REDUCESCATTER_ALLGATHER = Composition("reducescatter", "allgather", split=True)
REDUCE_BROADCAST = Composition("reduce", "broadcast", split=False, root=0)
