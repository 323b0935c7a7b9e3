"""Errors of topology descriptions (the family's root, :class:`XcclError`, lives in :mod:`common`)."""

from __future__ import annotations

from common.errors import XcclError

__all__ = ["TopologyError"]


class TopologyError(XcclError):
    """A topology description is malformed or cannot serve the request."""
