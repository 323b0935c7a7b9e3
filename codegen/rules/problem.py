"""A broken rule, located: what the rules, the static checker and the symbolic execution report."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem"]


@dataclass(frozen=True)
class Problem:
    message: str
    rank: int | None = None
    tb: int | None = None
    step: int | None = None

    def located(self, names: tuple[str, str, str] = ("rank", "threadblock", "step"), sep: str = ", ") -> str:
        """The message after where it is: ``rank 0, threadblock 1, step 2: ...`` by default (the
        runtime loader names them ``rank 0 tb 1 op 2``)."""
        where = [f"{k} {v}" for k, v in zip(names, (self.rank, self.tb, self.step), strict=True) if v is not None]
        return (sep.join(where) + ": " if where else "") + self.message

    def __str__(self) -> str:
        return self.located()
