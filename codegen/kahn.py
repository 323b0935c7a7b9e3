"""Kahn's algorithm taking the least ready node first, compiled (:mod:`synth.compiled`): the
instruction DAG's order where its priority puts an edge backwards (``expand_instructions`` at 512
ranks: a million instructions, 0.6 s as a Python loop, milliseconds compiled).

The nodes are places ``0 .. n - 1`` in the order of priority. They are scanned in that order and
taken where ready; a node found waiting is passed over, and a binary heap (the event loop's,
:func:`synth.compiled.heap_push`) holds the passed-over nodes that have become ready since. Those
come before the scan's next node, so the heap's least, where there is one, is the least ready
node, else the scan's next ready one is: the node Kahn's algorithm takes.
"""

from __future__ import annotations

import numpy as np

from synth.compiled import compiled, heap_pop, heap_push

__all__ = ["kahn", "warm_up"]


def kahn(n: int, pred: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """The places in the order Kahn's algorithm takes them, the least ready first (edges
    ``pred[k] -> succ[k]`` between places); shorter than ``n`` where a cycle stops it."""
    pred, succ = np.asarray(pred, np.int64), np.asarray(succ, np.int64)
    by_pred = np.argsort(pred, kind="stable")
    starts = np.concatenate((np.zeros(1, np.int64), np.cumsum(np.bincount(pred, minlength=n))))
    indegree = np.bincount(succ, minlength=n).astype(np.int64)
    out = np.empty(n, np.int64)
    taken = _loop(n, indegree, succ[by_pred], starts, out)
    return out[:taken]


def warm_up() -> None:
    """Compile the loop now, if no earlier run has (about 1 s): ``make`` calls this after it installs."""
    kahn(2, np.array([1]), np.array([0]))


@compiled
def _loop(n, indegree, targets, starts, out):  # pragma: no cover - compiled; tested through kahn
    """Fill ``out`` with the order; how many nodes were taken."""
    passed = np.zeros(n, np.bool_)
    heap = np.empty(n, np.int64)  # the passed-over nodes ready since, keyed by themselves
    size = 0
    p = 0
    taken = 0
    while True:
        if size:
            q = heap_pop(heap, heap, size)
            size -= 1
        else:
            while p < n and indegree[p]:
                passed[p] = True
                p += 1
            if p == n:
                return taken
            q = p
            p += 1
        out[taken] = q
        taken += 1
        for k in range(starts[q], starts[q + 1]):
            t = targets[k]
            indegree[t] -= 1
            if indegree[t] == 0 and passed[t]:
                heap_push(heap, heap, size, t, t)
                size += 1
