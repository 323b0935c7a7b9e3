"""The answer to one instance: an algorithm, a proof that none exists, or unknown (time limit)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from synth.algorithm import Algorithm

__all__ = ["STATUSES", "Outcome"]

STATUSES = ("sat", "unsat", "unknown")


@dataclass(frozen=True)
class Outcome:
    status: str
    """``sat`` (``algorithm`` is set and verified), ``unsat`` (proof that no algorithm exists, within
    ``scope`` when one is given) or ``unknown`` (the time limit ran out first)."""
    collective: str
    steps: int
    rounds: int
    chunks: int
    seconds: float
    algorithm: Algorithm | None = None
    scope: str | None = None
    """For an unsat answer about a restricted family, e.g. "among reducescatter + allgather compositions"."""
    via: str | None = None
    """How the instance was solved (the dual, a composition, the direct allreduce encoding)."""
    time_limit_s: float | None = None
    """The time limit the instance was given (``None``: none)."""

    @property
    def instance(self) -> str:
        return f"{self.collective} S={self.steps} R={self.rounds} C={self.chunks}"

    @property
    def rounds_per_chunk(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)

    def summary(self) -> str:
        """The result part of a progress line: ``sat (0.41 s)``."""
        return f"{self.status} ({self.seconds:.2f} s)"

    def message(self) -> str:
        """One sentence for people."""
        if self.status == "sat":
            return f"found {self.algorithm.name} in {self.seconds:.2f} s (verified)"
        if self.status == "unsat":
            where = f" {self.scope}" if self.scope else ""
            return f"unsat: no {self.collective} algorithm with S={self.steps} R={self.rounds} C={self.chunks}{where}"
        limit = "" if self.time_limit_s is None else f" of {self.time_limit_s:g} s"
        return f"unknown: no answer for {self.instance} within the time limit{limit} ({self.seconds:.2f} s)"
