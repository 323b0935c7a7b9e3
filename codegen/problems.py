"""A broken rule, located: what the static checker, the dialect rules and the symbolic execution
report (a module of its own, so that :mod:`codegen.dialects` and :mod:`codegen.check` share it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem"]


@dataclass(frozen=True)
class Problem:
    message: str
    rank: int | None = None
    tb: int | None = None
    step: int | None = None

    def __str__(self) -> str:
        where = [
            f"{k} {v}"
            for k, v in (("rank", self.rank), ("threadblock", self.tb), ("step", self.step))
            if v is not None
        ]
        return (", ".join(where) + ": " if where else "") + self.message
