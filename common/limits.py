"""Limits on how much work an input may ask for, each checked before the work starts.

A count in a file or a name (``ngpus="1000000000"``, ``hypercube:64``) decides how much is built or
allocated; above a limit the input is refused at once, with a message that names the limit and the
environment variable that raises it, instead of after memory runs out. Each package states its
limits next to the code that needs them, as :class:`Limit` values.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import XcclError

__all__ = ["Limit", "LimitError"]


class LimitError(XcclError):
    """A request beyond a size limit (the message names the limit and how to raise it)."""


@dataclass(frozen=True)
class Limit:
    unit: str
    """What is counted, as a message says it (``ranks``)."""
    default: int
    env: str
    """The environment variable that sets another value."""

    @property
    def value(self) -> int:
        """``default``, or the positive integer in ``env`` where it is set."""
        text = os.environ.get(self.env, "").strip()
        if not text:
            return self.default
        if not text.isdigit() or int(text) < 1:
            raise XcclError(f"{self.env}: expected a positive integer, got {text!r}")
        return int(text)

    def check(
        self,
        amount: int,
        what: str | Callable[[], str],
        error: type[XcclError] = LimitError,
        unit: str | None = None,
    ) -> None:
        """Raise ``error`` naming ``what`` (a callable is worked out only then) when ``amount``
        exceeds the limit; ``unit`` words the amount where it differs from the limit's own."""
        limit = self.value
        if amount > limit:
            where = what() if callable(what) else what
            raise error(
                f"{where}: {amount} {unit or self.unit}, more than the limit of {limit} "
                f"(set {self.env} to raise it)"
            )
