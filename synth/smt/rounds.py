"""Rounds in Booleans: unary per-step rounds, per-step capacity, and the total.

Step ``s`` lasts ``sum(units[s])`` rounds where ``units[s] = [exists, more than 1, more than 2, ...]``
is a descending unary number (``units[s][k]`` implies ``units[s][k-1]``). A capacity constraint of
``cap`` chunks per round then reads ``load + cap * (number of false units) <= cap * K`` with only
positive coefficients, which z3's pseudo-Boolean solver handles natively.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

from synth.smt.formula import TRUE, Formula, neg
from topologies.logical import CapacityConstraint, ChunkCapacity

__all__ = ["capacity_constraints", "guarded_ge", "guarded_le", "step_units", "total_rounds"]

Terms = list[tuple[int, str]]


def step_units(f: Formula, exists: Sequence[str], k_max: int) -> list[list[str]]:
    """Unary rounds of each step; ``exists[s]`` is the step's first unit (``true`` for fixed steps)."""
    units = []
    for s, first in enumerate(exists):
        row = [first] + [f.var(f"u_{s}_{k}") for k in range(1, k_max)]
        for a, b in pairwise(row):
            f.implies(b, a)
        units.append(row)
    return units


def spare(con: CapacityConstraint, units: Sequence[str]) -> Terms:
    """``cap`` for each round the step does not have."""
    return [(con.capacity, neg(unit)) for unit in units]


def capacity_constraints(
    f: Formula,
    capacity: ChunkCapacity,
    load: Callable[[CapacityConstraint, int], Terms],
    units: list[list[str]],
) -> None:
    """Per step, each constraint carries at most ``capacity * rounds`` chunks."""
    for con in capacity.constraints:
        for s, row in enumerate(units):
            f.pb_le(load(con, s) + spare(con, row), con.capacity * len(row))


def guarded_le(f: Formula, guard: str, terms: Terms, k: int) -> None:
    """``guard`` implies ``sum <= k`` (one pseudo-Boolean constraint with a big-M term)."""
    if guard == TRUE:
        f.pb_le(terms, k)
        return
    big = sum(c for c, _ in terms) - k
    if big > 0:
        f.pb_le([*terms, (big, guard)], k + big)


def guarded_ge(f: Formula, guard: str, terms: Terms, k: int) -> None:
    """``guard`` implies ``sum >= k``."""
    f.pb_ge(terms if guard == TRUE else [*terms, (k, neg(guard))], k)


def total_rounds(f: Formula, units: list[list[str]], rounds: int, guard: str = TRUE) -> None:
    """The steps' rounds add up to ``rounds`` (under ``guard``)."""
    terms = [(1, unit) for row in units for unit in row]
    guarded_le(f, guard, terms, rounds)
    guarded_ge(f, guard, terms, rounds)
