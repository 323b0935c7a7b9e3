"""The interface every reduction implements: a problem, a solution, ``apply`` and ``invert``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from synth.algorithm import Algorithm
from synth.collectives import Collective
from synth.errors import InfeasibleError
from topologies.model import Topology

if TYPE_CHECKING:
    from sketches.restrict import Restriction
    from synth.reductions.symmetry import ProblemSymmetry

__all__ = [
    "Chooser",
    "Problem",
    "Reduced",
    "Reduction",
    "ReductionError",
    "Solution",
    "leaves",
    "solve_reduced",
]

D = TypeVar("D")


class ReductionError(InfeasibleError):
    """A reduction was given a problem it does not accept, or solutions that do not fit it."""


@dataclass(frozen=True)
class Problem:
    """A collective on a topology, as a synthesizer is asked it."""

    topology: Topology
    collective: Collective
    restriction: Restriction | None = None
    """The sketch's restricted view of ``topology`` (MILP synthesis); reductions transform it with
    the topology."""
    symmetry: ProblemSymmetry | None = None
    """Set on a quotient (:class:`~synth.reductions.symmetry.SymmetryQuotient`): solutions must be
    invariant under these symmetries and may give one send per orbit."""


@dataclass(frozen=True)
class Solution:
    """An algorithm for a problem, with its modeled time where the front end timed it."""

    algorithm: Algorithm
    makespan_us: float | None = None
    """The schedule's modeled time (MILP); ``None`` for untimed schedules."""
    finish_us: Mapping[tuple[int, int, int], float] = field(default_factory=dict)
    """When each send ``(chunk, src, dst)`` ends, for timed schedules: running a schedule backwards
    in time (:class:`~synth.reductions.dual.Dual`) starts each send when its image ended."""


@dataclass(frozen=True)
class Reduced(Generic[D]):
    """What :meth:`Reduction.apply` returns: the simpler problems, and what ``invert`` needs."""

    reduction: Reduction
    original: Problem
    subproblems: tuple[Problem, ...]
    via: str
    """One line for people: how the original was reduced (``reducescatter + allgather``)."""
    data: D = None  # type: ignore[assignment]
    """What the reduction keeps for ``invert`` beyond the original problem (e.g. its symmetries)."""

    def invert(self, solutions: Sequence[Solution]) -> Solution:
        """A verified solution of the original from one solution per subproblem, in order."""
        if len(solutions) != len(self.subproblems):
            raise ReductionError(
                f"{self.reduction.name}: expected {len(self.subproblems)} solution(s), got {len(solutions)}"
            )
        return self.reduction.invert(self, solutions)


class Reduction(ABC):
    """Maps a problem to simpler ones and their solutions back (CVXPY's reductions; STYLE.md habit 5).

    ``apply`` may give several subproblems (a composition gives two, a hierarchy one per level);
    the front end solves each its own way, in order, and may let a later solve use what an earlier
    one found (a MILP's reducescatter takes its allgather's chunkup). The chunks per rank are the
    solver's where it chooses them: ``invert`` builds the original collective at the chunk count of
    the solutions it is given.
    """

    name: str = ""

    @abstractmethod
    def accepts(self, problem: Problem) -> bool:
        """Whether :meth:`apply` takes ``problem``."""

    @abstractmethod
    def apply(self, problem: Problem) -> Reduced:
        """The subproblems; raises :class:`ReductionError` for a problem it does not accept."""

    @abstractmethod
    def invert(self, reduced: Reduced, solutions: Sequence[Solution]) -> Solution:
        """One solution per subproblem -> a solution of ``reduced.original``, verified on its topology."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


Chooser = Callable[[Problem], "Reduction | None"]
"""Which reduction to apply to a problem (None: solve it as it is)."""


def solve_reduced(problem: Problem, choose: Chooser, solve: Callable[[Problem], Solution]) -> Solution:
    """Reduce ``problem`` by ``choose``'s reduction until it gives none, ``solve`` what is left
    (``solve`` verifies what it returns), and invert back up: a verified solution of ``problem``."""
    reduction = choose(problem)
    if reduction is None:
        return solve(problem)
    reduced = reduction.apply(problem)
    return reduced.invert([solve_reduced(sub, choose, solve) for sub in reduced.subproblems])


def leaves(problem: Problem, choose: Chooser) -> list[Problem]:
    """The problems ``choose`` reduces ``problem`` to, in order, that it reduces no further."""
    reduction = choose(problem)
    if reduction is None:
        return [problem]
    return [leaf for sub in reduction.apply(problem).subproblems for leaf in leaves(sub, choose)]
