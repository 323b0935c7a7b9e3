"""The root of the one family of exceptions.

Every package raises a subclass of :class:`XcclError`; the command line catches it, prints its
message on one line and exits with status 2. Messages name the file, the field and what was expected.
"""

from __future__ import annotations

__all__ = ["XcclError", "quoted"]


class XcclError(Exception):
    """Base class of every error a user can cause (bad input, impossible request)."""


def quoted(value: object, limit: int = 60) -> str:
    """``value`` as a message quotes what the user typed: its ``repr``, cut to ``limit`` characters
    (a 5,000-digit size stays one readable line; an int too long for ``repr`` is described)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4,300 digits for str()
        return f"an {type(value).__name__} too long to print"
    return text if len(text) <= limit else text[: limit - 3] + "..."
