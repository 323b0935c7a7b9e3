"""The narrow interface every solver back end implements (STYLE.md habit 4)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from synth.milp.solvers.model import Model, Solution

__all__ = ["CAPABILITIES", "Backend"]

CAPABILITIES = frozenset({"lp", "mip", "mip_start", "bound", "interrupt"})
"""``mip_start``: accepts ``Model.start``; ``bound``: reports the best bound (hence a gap) on
time-out; ``interrupt``: Ctrl-C stops the search and returns the incumbent."""


class Backend(ABC):
    """A solver: ``name``, ``available()`` (without importing the solver), ``capabilities``, ``solve``."""

    name: str = ""
    capabilities: frozenset[str] = frozenset()

    @abstractmethod
    def available(self) -> bool:
        """Whether the solver can run here; must not import it (the CLI lists back ends cheaply)."""

    @abstractmethod
    def solve(self, model: Model, time_limit_s: float, threads: int = 1) -> Solution:
        """Minimise ``model`` within ``time_limit_s``; statuses mapped to :class:`Status`."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
