"""Minimum-cost spanning arborescences (Chu-Liu/Edmonds) on a dense cost matrix.

The pricing step of the tree packing (:mod:`synth.trees.packing`) asks, for prices on the shared
resources, for the cheapest tree that carries one root's data to every other rank. Costs come as a
dense ``n x n`` matrix (``inf`` where there is no link), which keeps every step a NumPy operation:
each round picks every vertex's cheapest entering arc, and contracts the cycles those arcs close
into single vertices, with the costs of arcs entering a cycle lowered by the cycle arc they
would replace (Edmonds 1967). A graph of n vertices takes at most n rounds of O(n^2) work.

>>> import numpy as np
>>> inf = np.inf
>>> cost = np.array([[inf, 5, 1], [inf, inf, 1], [inf, 1, inf]])
>>> min_arborescence(cost, 0).tolist()  # 0 -> 2 -> 1 costs 2; 0 -> 1 would cost 5
[-1, 2, 0]
"""

from __future__ import annotations

import numpy as np

from synth.errors import InfeasibleError

__all__ = ["min_arborescence", "tree_cost"]


def tree_cost(cost: np.ndarray, parent: np.ndarray) -> float:
    """Sum of the costs of the arcs ``parent[v] -> v`` (the root has parent -1)."""
    children = np.flatnonzero(parent >= 0)
    return float(cost[parent[children], children].sum())


def min_arborescence(cost: np.ndarray, root: int) -> np.ndarray:
    """The parent of every vertex in a cheapest arborescence rooted at ``root`` spanning all
    vertices (``parent[root] == -1``); raises :class:`InfeasibleError` when some vertex cannot be
    reached. Ties go to the lower-numbered parent."""
    c = np.array(cost, dtype=float)
    np.fill_diagonal(c, np.inf)
    c[:, root] = np.inf
    return _solve(c, root)


def _cycles(parent: np.ndarray, root: int) -> list[list[int]]:
    """The cycles of the functional graph ``v -> parent[v]`` (the root points nowhere)."""
    n = len(parent)
    state = np.zeros(n, dtype=np.int8)  # 0 unseen, 1 on the current walk, 2 done
    cycles = []
    for start in range(n):
        walk = []
        v = start
        while v != root and state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = int(parent[v])
        if v != root and state[v] == 1:  # the walk closed a cycle at v
            cycles.append(walk[walk.index(v) :])
        for w in walk:
            state[w] = 2
    return cycles


def _solve(c: np.ndarray, root: int) -> np.ndarray:
    n = len(c)
    parent = np.argmin(c, axis=0)
    parent[root] = -1
    others = np.flatnonzero(np.arange(n) != root)
    if n > 1 and not np.isfinite(c[parent[others], others]).all():
        stuck = int(others[~np.isfinite(c[parent[others], others])][0])
        raise InfeasibleError(f"no arborescence from vertex {root}: vertex {stuck} cannot be reached")
    cycles = _cycles(parent, root)
    if not cycles:
        return parent
    group, members = _groups(n, cycles)
    entering = np.where(np.arange(n) == root, 0.0, c[np.maximum(parent, 0), np.arange(n)])
    reduced = c - entering[np.newaxis, :]  # an arc into v replaces v's chosen arc
    small, arc_u, arc_v = _contract(reduced, group, members)
    inner = _solve(small, int(group[root]))
    out = parent.copy()
    for b in range(len(members)):
        a = int(inner[b])
        if a < 0:
            continue
        out[arc_v[a, b]] = arc_u[a, b]  # the arc entering group b; its other members keep theirs
    out[root] = -1
    return out


def _groups(n: int, cycles: list[list[int]]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each vertex's group after contracting ``cycles``: one group per cycle, then one per other vertex."""
    group = np.full(n, -1, dtype=np.int64)
    members: list[np.ndarray] = []
    for cyc in cycles:
        group[cyc] = len(members)
        members.append(np.array(cyc))
    for v in np.flatnonzero(group < 0):
        group[v] = len(members)
        members.append(np.array([v]))
    return group, members


def _contract(
    reduced: np.ndarray, group: np.ndarray, members: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The contracted cost matrix, and for each of its arcs the original arc ``(u, v)`` it stands for."""
    k = len(members)
    order = np.concatenate(members)
    starts = np.cumsum([0] + [len(m) for m in members[:-1]])
    rows = reduced[order]  # rows grouped
    row_min = np.minimum.reduceat(rows, starts, axis=0)  # k x n
    row_arg = _arg_reduceat(rows, starts, row_min, order)  # original u per (group, v)
    cols = row_min[:, order]
    small = np.minimum.reduceat(cols, starts, axis=1)  # k x k
    col_pos = _arg_reduceat(cols.T, starts, small.T, order).T  # original v per (group a, group b)
    arc_u = row_arg[np.arange(k)[:, None], col_pos]
    small[np.arange(k), np.arange(k)] = np.inf
    return small, arc_u, col_pos


def _arg_reduceat(rows: np.ndarray, starts: np.ndarray, mins: np.ndarray, order: np.ndarray) -> np.ndarray:
    """For each block of ``rows`` (blocks begin at ``starts``) and column, the original index (via
    ``order``) of the first row attaining the block's minimum ``mins``."""
    block = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(rows))))
    hit = rows == mins[block]
    # first hit per block and column: position of the hit with the smallest row index
    pos = np.where(hit, np.arange(len(rows))[:, None], len(rows))
    first = np.minimum.reduceat(pos, starts, axis=0)
    first = np.minimum(first, len(rows) - 1)
    return order[first]
