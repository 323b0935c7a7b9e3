"""The dual: a collective solved as the one whose schedule, run backwards on the reversed
topology, implements it (reducescatter <- allgather, reduce <- broadcast, gather <- scatter).

Where the dual copied chunk ``a`` from u to v, the original sends it from v to u, in the mirrored
step; for a combining collective the send becomes a reduction (v's partial sum of address ``a``
is reduced into u's). A timed schedule is mirrored in time as well: a send starts when the
makespan minus its image's end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache

from synth.algorithm import Algorithm, Send, Step
from synth.collectives import Collective, CollectiveError, make_collective
from synth.reductions.base import Problem, Reduced, Reduction, ReductionError, Solution
from topologies.model import Topology

__all__ = ["DUAL", "Dual", "invert"]


def _reversed(topology: Topology) -> Topology:
    """A symmetric topology is its own reverse (equal to it): the dual gets the topology itself,
    so it shares its logical view and what else is cached on it (a 512-GPU cluster's 261,632
    logical links are not routed a second time)."""
    return topology if topology.is_symmetric() else _reverse(topology)


@lru_cache(maxsize=16)
def _reverse(topology: Topology) -> Topology:
    """Kept per topology: a search applies the dual once per instance."""
    return topology.reverse()


def _order(s: Send) -> tuple:
    """A send's place in :class:`Send`'s own order, as a key (sorting by ``Send.__lt__`` builds
    two tuples per comparison: seconds on a 512-rank schedule)."""
    return (s.chunk, s.src, s.dst, s.op)


def invert(dual: Algorithm, primal: Collective) -> Algorithm:
    """Turn an algorithm for ``primal.dual()`` on the reversed topology into one for ``primal``
    (not verified): steps run backwards and every send is turned around, a reduction where
    ``primal`` combines."""
    if dual.collective != primal.dual():
        raise CollectiveError(f"cannot invert {dual.collective!r}: {primal!r} has dual {primal.dual()!r}")
    op = "reduce" if primal.combining else "copy"
    steps = tuple(
        Step(st.rounds, tuple(sorted((Send(s.chunk, s.dst, s.src, op) for s in st.sends), key=_order)))
        for st in reversed(dual.steps)
    )
    via = f"inverted {dual.collective.name} on the reversed topology"
    return Algorithm(primal, dual.topology, steps, replace(dual.provenance, via=via))


def _mirrored_in_time(
    algo: Algorithm, finish_us: Mapping[tuple[int, int, int], float], makespan: float
) -> Algorithm:
    """Start every send of the inverted ``algo`` at ``makespan`` minus the end of its image (the
    dual's send the other way); within each step, sends are listed by those times."""
    steps = []
    for st in algo.steps:
        timed = [
            Send(s.chunk, s.src, s.dst, s.op, max(0.0, makespan - finish_us[(s.chunk, s.dst, s.src)]))
            for s in st.sends
        ]
        steps.append(Step(st.rounds, tuple(sorted(timed, key=lambda s: (s.start_us, *_order(s))))))
    return replace(algo, steps=tuple(steps))


class Dual(Reduction):
    """reducescatter, reduce, gather -> allgather, broadcast, scatter on the reversed topology
    (and the reversed sketch restriction); inverted as the module docstring says."""

    name = "dual"

    def accepts(self, problem: Problem) -> bool:
        return problem.collective.has_dual

    def apply(self, problem: Problem) -> Reduced:
        if not self.accepts(problem):
            raise ReductionError(
                f"{problem.collective.name} has no dual (reducescatter, reduce and gather do)"
            )
        dual = problem.collective.dual()
        if problem.restriction is not None:
            restriction = problem.restriction.reverse()
            sub = Problem(restriction.topology, dual, restriction)
        else:
            sub = Problem(_reversed(problem.topology), dual)
        return Reduced(self, problem, (sub,), f"dual: {dual.name} on the reversed topology, inverted")

    def invert(self, reduced: Reduced, solutions: Sequence[Solution]) -> Solution:
        (solution,) = solutions
        original = reduced.original.collective
        dual = solution.algorithm
        primal = make_collective(original.name, original.num_ranks, dual.chunks, original.root)
        algo = invert(dual, primal)
        if solution.makespan_us is not None and solution.finish_us:
            algo = _mirrored_in_time(algo, solution.finish_us, solution.makespan_us)
        algo.verify(reduced.original.topology)
        return Solution(algo, solution.makespan_us)


DUAL = Dual()
