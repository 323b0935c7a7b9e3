"""NumPy helpers every layer above uses: here, in the lowest package that may import NumPy.

:func:`distinct` is the sorted unique of an array where NumPy's own call is slow for the arrays
we make; :func:`ranges` the indices of many runs at once.

``np.unique(a)`` with no ``return_*`` option takes a hash-table path in NumPy 2.3 and later that
is an order of magnitude slower than sorting once the values are mostly distinct (NumPy 2.4.6 on
the 2-core machine: 20 M distinct int64 codes in 31 s, against 1.4 s by a sort; 4 M in 4.8 s
against 0.25 s). The codes we deduplicate (pairs of ranks, of groups, of instructions) are mostly
distinct, so :func:`distinct` sorts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct", "ranges"]


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted: what ``np.unique(values)`` returns.

    >>> distinct(np.array([3, 1, 3, 2, 1])).tolist()
    [1, 2, 3]
    >>> distinct(np.zeros(0, np.int64)).size
    0
    """
    ordered = np.sort(np.ravel(values))
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``start[i], ..., start[i] + count[i] - 1`` for each ``i``, one after another.

    >>> ranges(np.array([5, 0, 2]), np.array([2, 0, 3])).tolist()
    [5, 6, 2, 3, 4]
    """
    return np.repeat(start - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
