"""The root of the one family of exceptions.

Every package raises a subclass of :class:`XcclError`; the command line catches it, prints its
message on one line and exits with status 2. Messages name the file, the field and what was expected.
"""

from __future__ import annotations

__all__ = ["XcclError"]


class XcclError(Exception):
    """Base class of every error a user can cause (bad input, impossible request)."""
