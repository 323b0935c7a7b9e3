"""Synthesis as reductions (CVXPY style, STYLE.md habit 5): each maps a problem to simpler ones
(``apply``) and their solutions back to a verified solution of the original (``invert``).

- :class:`Dual` (:data:`DUAL`): reducescatter, reduce and gather as allgather, broadcast and
  scatter on the reversed topology, run backwards.
- :class:`Composition`: allreduce as reducescatter + allgather (:data:`REDUCESCATTER_ALLGATHER`)
  or reduce + broadcast (:data:`REDUCE_BROADCAST`): two subproblems.
- :class:`SymmetryQuotient` (:data:`QUOTIENT`): only the algorithms the problem's symmetries map
  onto themselves, described by one send per orbit.

Every front end goes through them: the baselines and the shortest-path schedules with
:func:`solve_reduced`, the bandwidth bounds with :func:`leaves` (both choosing by
:func:`standard_reduction` or their own rule), the SMT and MILP synthesizers by calling ``apply``
and ``invert`` around their own searches. A reduction may give any number of subproblems, so a hierarchy (one schedule
inside the machines, one between them) fits the same interface.

>>> from topologies import load
>>> from synth.collectives import make_collective
>>> reduced = DUAL.apply(Problem(load("ring:4"), make_collective("reducescatter", 4)))
>>> [(p.collective.name, p.topology.name) for p in reduced.subproblems], reduced.via
([('allgather', 'ring:4')], 'dual: allgather on the reversed topology, inverted')
"""

from synth.reductions.base import (
    Chooser,
    Problem,
    Reduced,
    Reduction,
    ReductionError,
    Solution,
    leaves,
    solve_reduced,
)
from synth.reductions.composition import (
    REDUCE_BROADCAST,
    REDUCESCATTER_ALLGATHER,
    Composition,
    compose,
    refine,
)
from synth.reductions.dual import DUAL, Dual, invert
from synth.reductions.standard import standard_reduction
from synth.reductions.symmetry import QUOTIENT, ProblemSymmetry, SymmetryQuotient, problem_symmetry

__all__ = [
    "DUAL",
    "QUOTIENT",
    "REDUCESCATTER_ALLGATHER",
    "REDUCE_BROADCAST",
    "Chooser",
    "Composition",
    "Dual",
    "Problem",
    "ProblemSymmetry",
    "Reduced",
    "Reduction",
    "ReductionError",
    "Solution",
    "SymmetryQuotient",
    "compose",
    "invert",
    "leaves",
    "problem_symmetry",
    "refine",
    "solve_reduced",
    "standard_reduction",
]
