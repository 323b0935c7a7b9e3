"""Solver back ends behind one interface, in an ordered registry (first available is the default)."""

from __future__ import annotations

from synth.errors import InfeasibleError
from synth.milp.solvers.base import CAPABILITIES, Backend
from synth.milp.solvers.cbc import CbcBackend
from synth.milp.solvers.highs import HighsBackend
from synth.milp.solvers.model import INF, Model, ModelBuilder, Solution, Status, relative_gap

__all__ = [
    "BACKENDS",
    "CAPABILITIES",
    "INF",
    "Backend",
    "Model",
    "ModelBuilder",
    "Solution",
    "SolverError",
    "Status",
    "available_backends",
    "get_backend",
    "relative_gap",
]

BACKENDS: dict[str, Backend] = {b.name: b for b in (HighsBackend(), CbcBackend())}
"""name -> back end, in order of preference (HiGHS by default, CBC as the fallback)."""


class SolverError(InfeasibleError):
    """An unknown or unavailable solver back end."""


def available_backends() -> list[str]:
    return [name for name, backend in BACKENDS.items() if backend.available()]


def get_backend(name: str | None = None) -> Backend:
    """The named back end, or the first available one."""
    if name is None:
        names = available_backends()
        if not names:
            raise SolverError(f"no MILP solver available: install one of {', '.join(BACKENDS)}")
        return BACKENDS[names[0]]
    backend = BACKENDS.get(name)
    if backend is None:
        raise SolverError(f"unknown solver {name!r}: expected one of {', '.join(BACKENDS)}")
    if not backend.available():
        raise SolverError(f"solver {name!r} is not available here (its library or binary is missing)")
    return backend
