"""What every solver front end answers (SMT instances, MILP synthesis, solver back ends): one
:class:`Status` vocabulary, and one :class:`Outcome`.

Each solver's native statuses map to the four of :class:`Status` where the solver is called
(z3's sat/unsat/unknown in :mod:`synth.smt.session`, HiGHS's and CBC's model statuses in
:mod:`synth.milp.solvers`). What a command prints may keep the solver's own words (the SMT
commands print ``sat``, ``unsat``, ``unknown``): an outcome carries the words of its front end.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from synth.milp.pipeline import StageReport

__all__ = ["SMT_WORDS", "WORDS", "Outcome", "Question", "Status", "Words"]


class Status(Enum):
    """Every solver's answer mapped to one of four."""

    OPTIMAL = "optimal"
    """A solution proven optimal (within the solver's gap)."""
    FEASIBLE = "feasible"
    """A solution (for a front end: a verified algorithm) not proven optimal: a time limit or an
    interrupt stopped the search, or the question asked for existence only (an SMT instance)."""
    INFEASIBLE = "infeasible"
    """A proof that no solution exists (within the outcome's ``scope`` when one is given)."""
    UNKNOWN = "unknown"
    """No solution and no proof: a limit ran out first, or the solver failed."""

    @property
    def has_solution(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)

    @property
    def answered(self) -> bool:
        """A solution or a proof that there is none: the question is closed."""
        return self is not Status.UNKNOWN


@dataclass(frozen=True)
class Words:
    """How a front end's commands print each status."""

    optimal: str = Status.OPTIMAL.value
    feasible: str = Status.FEASIBLE.value
    infeasible: str = Status.INFEASIBLE.value
    unknown: str = Status.UNKNOWN.value

    def __getitem__(self, status: Status) -> str:
        return getattr(self, status.name.lower())


WORDS = Words()
"""The words of the enum itself (MILP stage reports, provenance parameters)."""
SMT_WORDS = Words(optimal="sat", feasible="sat", infeasible="unsat", unknown="unknown")
"""SAT solvers' words, which the SMT commands print."""


@dataclass(frozen=True)
class Question:
    """What a front end was asked: a collective and, where the method takes them, the steps S,
    rounds R and chunks per rank C."""

    collective: str
    steps: int | None = None
    rounds: int | None = None
    chunks: int | None = None

    @property
    def parameters(self) -> str:
        """``S=2 R=3 C=2`` (the numbers that were given)."""
        named = (("S", self.steps), ("R", self.rounds), ("C", self.chunks))
        return " ".join(f"{key}={value}" for key, value in named if value is not None)

    def __str__(self) -> str:
        return f"{self.collective} {self.parameters}".rstrip()


@dataclass(frozen=True)
class Outcome:
    """A front end's answer: the status, and the verified algorithm when there is one."""

    status: Status
    question: Question
    seconds: float
    """Wall time spent answering."""
    algorithm: Algorithm | None = None
    """Set, and verified, exactly when ``status.has_solution``."""
    scope: str | None = None
    """For an infeasible answer about a restricted family, e.g. "among reducescatter + allgather compositions"."""
    via: str | None = None
    """How the question was reduced (the dual, a composition, the direct allreduce encoding)."""
    time_limit_s: float | None = None
    """The time limit the question was given (``None``: none)."""
    interrupted: bool = False
    """Ctrl-C (or SIGTERM) stopped the search; the algorithm is the best verified one found before."""
    timed_out: bool = False
    """The time limit cut the search short; the algorithm is the best verified one found by then."""
    makespan_us: float | None = None
    """The algorithm's modeled time, where the front end times its schedules (MILP)."""
    chunkup: int | None = None
    """Pieces each chunk was split into, where the front end chooses it (MILP)."""
    reports: tuple[StageReport, ...] = ()
    """What each stage did, where the front end runs stages (MILP's :class:`StageReport` lines)."""
    words: Words = WORDS
    """How the front end's commands print the status (:data:`SMT_WORDS` for SMT)."""

    @property
    def word(self) -> str:
        return self.words[self.status]

    @property
    def instance(self) -> str:
        """``allgather S=2 R=3 C=2``: the question, as progress lines show it."""
        return str(self.question)

    def summary(self) -> str:
        """The result part of a progress line: ``sat (0.41 s)``."""
        return f"{self.word} ({self.seconds:.2f} s)"

    def message(self) -> str:
        """One sentence for people."""
        if self.algorithm is not None:
            return f"found {self.algorithm.name} in {self.seconds:.2f} s (verified)"
        if self.status is Status.INFEASIBLE:
            where = f" {self.scope}" if self.scope else ""
            q = self.question
            return f"{self.word}: no {q.collective} algorithm with {q.parameters}{where}"
        limit = "" if self.time_limit_s is None else f" of {self.time_limit_s:g} s"
        return (
            f"{self.word}: no answer for {self.instance} within the time limit{limit} ({self.seconds:.2f} s)"
        )
