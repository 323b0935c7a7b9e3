"""A solver-neutral linear model: what every back end takes, and what ``build_model`` functions return.

Columns have bounds, a cost and an integrality flag; rows are sparse with a lower and an upper
bound (``-inf``/``inf`` for one-sided rows). The objective is minimised. An optional ``start`` is a
feasible assignment handed to back ends that accept a MIP start (STYLE.md habits 4 and 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from synth.outcome import Status

__all__ = ["INF", "Model", "ModelBuilder", "Solution", "Status", "relative_gap"]

INF = math.inf


@dataclass(frozen=True, eq=False)
class Model:
    """A minimisation over columns ``x`` with ``row_lower <= A x <= row_upper`` (see module docstring)."""

    name: str
    col_names: tuple[str, ...]
    col_lower: np.ndarray
    col_upper: np.ndarray
    col_cost: np.ndarray
    integer: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    a_rows: np.ndarray
    a_cols: np.ndarray
    a_vals: np.ndarray
    start: np.ndarray | None = None
    rel_gap: float = 1e-6
    """Stop once the incumbent is proven within this relative gap of the best bound."""

    @property
    def num_cols(self) -> int:
        return len(self.col_names)

    @property
    def num_rows(self) -> int:
        return len(self.row_lower)

    @property
    def num_integer(self) -> int:
        return int(self.integer.sum())

    @property
    def num_nonzeros(self) -> int:
        return len(self.a_vals)

    @property
    def is_mip(self) -> bool:
        return bool(self.integer.any())

    def size(self) -> str:
        """``cols (integer) x rows, nonzeros`` for progress logs."""
        return (
            f"{self.num_cols} vars ({self.num_integer} integer) x {self.num_rows} rows, "
            f"{self.num_nonzeros} nonzeros"
        )

    def row_activity(self, x: np.ndarray) -> np.ndarray:
        out = np.zeros(self.num_rows)
        np.add.at(out, self.a_rows, self.a_vals * x[self.a_cols])
        return out

    def is_feasible(self, x: np.ndarray, tol: float = 1e-6) -> bool:
        """Whether ``x`` satisfies bounds, rows and integrality (used to check MIP starts)."""
        scale = 1 + np.abs(x)
        if np.any(x < self.col_lower - tol * scale) or np.any(x > self.col_upper + tol * scale):
            return False
        if np.any(np.abs(x[self.integer] - np.round(x[self.integer])) > tol):
            return False
        act = self.row_activity(x)
        slack = tol * (1 + np.abs(act))
        return bool(np.all(act >= self.row_lower - slack) and np.all(act <= self.row_upper + slack))


def relative_gap(status: Status, objective: float | None, bound: float | None) -> float | None:
    """Relative gap between an objective and the best bound (0 when proven optimal; None without
    a finite bound)."""
    if status is Status.OPTIMAL:
        return 0.0
    if objective is None or bound is None or not math.isfinite(bound):
        return None
    return max(0.0, objective - bound) / max(abs(objective), 1e-12)


@dataclass(frozen=True)
class Solution:
    """What a back end returns: the status (its native one mapped to :class:`synth.outcome.Status`),
    objective, best bound and values."""

    status: Status
    objective: float | None = None
    bound: float | None = None
    values: np.ndarray | None = None
    time_s: float = 0.0
    solver: str = ""
    interrupted: bool = False
    detail: str = ""
    """The back end's native status, for logs."""

    @property
    def gap(self) -> float | None:
        return relative_gap(self.status, self.objective, self.bound)


@dataclass
class ModelBuilder:
    """Accumulates columns and rows; :meth:`build` freezes them into a :class:`Model`."""

    name: str
    _names: list[str] = field(default_factory=list)
    _lower: list[float] = field(default_factory=list)
    _upper: list[float] = field(default_factory=list)
    _cost: list[float] = field(default_factory=list)
    _integer: list[bool] = field(default_factory=list)
    _row_lower: list[float] = field(default_factory=list)
    _row_upper: list[float] = field(default_factory=list)
    _rows: list[int] = field(default_factory=list)
    _cols: list[int] = field(default_factory=list)
    _vals: list[float] = field(default_factory=list)

    def var(
        self, name: str, lower: float = 0.0, upper: float = INF, cost: float = 0.0, integer: bool = False
    ) -> int:
        self._names.append(name)
        self._lower.append(lower)
        self._upper.append(upper)
        self._cost.append(cost)
        self._integer.append(integer)
        return len(self._names) - 1

    def row(
        self, terms: dict[int, float] | list[tuple[int, float]], lower: float = -INF, upper: float = INF
    ) -> int:
        """Add ``lower <= sum(coef * x[col]) <= upper``; repeated columns are summed."""
        items = terms.items() if isinstance(terms, dict) else terms
        index = len(self._row_lower)
        merged: dict[int, float] = {}
        for col, coef in items:
            merged[col] = merged.get(col, 0.0) + coef
        for col, coef in merged.items():
            if coef != 0.0:
                self._rows.append(index)
                self._cols.append(col)
                self._vals.append(coef)
        self._row_lower.append(lower)
        self._row_upper.append(upper)
        return index

    @property
    def num_cols(self) -> int:
        return len(self._names)

    def build(self, start: np.ndarray | None = None, rel_gap: float = 1e-6) -> Model:
        return Model(
            name=self.name,
            col_names=tuple(self._names),
            col_lower=np.array(self._lower, dtype=float),
            col_upper=np.array(self._upper, dtype=float),
            col_cost=np.array(self._cost, dtype=float),
            integer=np.array(self._integer, dtype=bool),
            row_lower=np.array(self._row_lower, dtype=float),
            row_upper=np.array(self._row_upper, dtype=float),
            a_rows=np.array(self._rows, dtype=np.int64),
            a_cols=np.array(self._cols, dtype=np.int64),
            a_vals=np.array(self._vals, dtype=float),
            start=start,
            rel_gap=rel_gap,
        )
