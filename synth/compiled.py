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

__all__ = ["compiled", "heap_pop", "heap_push"]


def compiled(fn: Callable) -> Callable:
    """``fn`` compiled by numba and cached on disk where numba finds a place."""
    try:
        return njit(cache=True)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return njit(fn)


@njit(inline="always")
def heap_push(at, what, size, t, w):
    """Add ``w`` with key ``t`` to the binary heap ``at/what[:size]`` (the least key at the root;
    the caller counts ``size`` up): the event loop's events by instant, Kahn's ready nodes."""
    pos = size
    while pos > 0:
        up = (pos - 1) >> 1
        if not t < at[up]:
            break
        at[pos], what[pos] = at[up], what[up]
        pos = up
    at[pos], what[pos] = t, w


@njit(inline="always")
def heap_pop(at, what, size):
    """Remove and return the item of the least key of the heap ``at/what[:size]`` (the caller
    counts ``size`` down)."""
    top = what[0]
    n = size - 1
    t, w = at[n], what[n]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and at[child + 1] < at[child]:
            child += 1
        if not at[child] < t:
            break
        at[pos], what[pos] = at[child], what[child]
        pos = child
    if n > 0:
        at[pos], what[pos] = t, w
    return top
