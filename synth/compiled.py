"""Loops compiled by numba, cached on disk: the few hot loops over a million items at 512 ranks
(the timing engine's event loop, the instruction DAG's order) that no array operation expresses.

numba keeps each compiled loop beside its module (in ``__pycache__``), else in the user's cache,
so a process loads it instead of compiling it; where it finds no writable place (a read-only
install and home), each process compiles it once instead. numba is imported only by the modules
that hold such loops, never by building the command line's parser.
"""

from __future__ import annotations

from collections.abc import Callable

from numba import njit

__all__ = ["compiled"]


def compiled(fn: Callable) -> Callable:
    """``fn`` compiled by numba and cached on disk where numba finds a place."""
    try:
        return njit(cache=True)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return njit(fn)
