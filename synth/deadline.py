"""One wall-clock budget for a whole solver run, shared by every stage and instance in it.

A solver's own time limit only bounds the solver: building an encoding in Python, a front walk's
next instance or the MILP's next chunkup would still run past it. A :class:`Deadline` is the
moment the run must end; each solve gets what is left (:meth:`Deadline.limit`), and long Python
loops call :meth:`Deadline.check`, which raises :class:`OutOfTime` once it has passed. Whoever
started the stage catches it and answers "unknown" (or keeps the best result found so far).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from common.errors import XcclError

__all__ = ["NO_DEADLINE", "Deadline", "OutOfTime", "TimeLimitError"]


class TimeLimitError(XcclError):
    """A time limit that is not a finite number of seconds >= 0."""


class OutOfTime(Exception):
    """The deadline passed inside a stage; the stage's answer is "unknown"."""


@dataclass(frozen=True)
class Deadline:
    end: float | None = None
    """A :func:`time.monotonic` value; ``None``: no limit."""

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """The deadline ``seconds`` from now (``None``: none)."""
        if seconds is None:
            return cls(None)
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not number or not math.isfinite(seconds) or seconds < 0:
            raise TimeLimitError(f"time limit: expected a finite number of seconds >= 0, got {seconds!r}")
        return cls(time.monotonic() + seconds)

    def left(self) -> float | None:
        """Seconds until the deadline (never negative), or ``None`` without one."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def check(self) -> None:
        """Raise :class:`OutOfTime` once the deadline has passed (cheap: call it in long loops)."""
        if self.end is not None and time.monotonic() >= self.end:
            raise OutOfTime

    def limit(self, seconds: float | None = None) -> float | None:
        """A solve's time limit: ``seconds`` (its own limit, if any), cut to what is left."""
        left = self.left()
        if left is None:
            return seconds
        return left if seconds is None else min(seconds, left)

    def sooner(self, seconds: float | None) -> Deadline:
        """The earlier of this deadline and ``seconds`` from now."""
        other = Deadline.after(seconds)
        if other.end is None:
            return self
        return other if self.end is None or other.end < self.end else self


NO_DEADLINE = Deadline()
