"""Fractional packing of spanning trees (arborescences) for allgather, by column generation.

Every rank r broadcasts its data along trees rooted at r: each tree T carries ``y_T`` GB/s of r's
data to every other rank. A tree arc ``u -> w`` is a logical link (``Topology.logical()``), so it
may pass through switches, and it loads every physical edge on its path: all arcs through one
switch port share that port's capacity, as the timing engine charges them. The packing maximises
the rate ``x`` every rank gets out (allgather time ``(bytes per rank) / x``) within each physical
edge's capacity (``bandwidth x count``). The optimum is ForestColl's: the min-cut bound
:mod:`synth.bounds` computes with a flow LP (Edmonds' branching theorem), reached wherever the
logical view's routes allow (they do on every shipped topology and family: a switch's routes are
unique).

The LP has one column per tree, so it is solved by column generation: the restricted LP over the
trees found so far gives prices on the physical edges (its duals); the cheapest tree at those
prices (Chu-Liu/Edmonds, :mod:`synth.trees.arborescence`) joins if it costs less than its root's
dual, and the prices also give an upper bound on ``x`` (Lagrangian), so the search stops with a
proof of optimality or at its limits with a valid packing and its gap.

Under a group of symmetries (:mod:`synth.trees.symmetry`) only one root per orbit gets trees: a
column is a tree and all its images, and the loads it puts on each edge are counted exactly over
the images (the pairs of ranks fall into orbits, each with the load of all its members).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from synth.errors import InfeasibleError
from synth.milp.solvers.highs import highs_lp, new_highs
from synth.trees.arborescence import min_arborescence, tree_cost
from synth.trees.symmetry import RankGroup

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["Packing", "PairClasses", "Tree", "pack", "pair_classes"]

GAP = 1e-7
"""Relative gap between the packing's rate and its upper bound at which the search stops."""
MAX_ITERATIONS = 500


@dataclass(frozen=True, eq=False)
class Tree:
    """An arborescence of a representative root: ``parent[v]`` (``-1`` at the root), the GB/s of
    the root's data it carries, and the load it (with all its images) puts on each resource per
    GB/s."""

    root: int
    parent: np.ndarray
    weight_GBps: float
    load: np.ndarray

    @property
    def depth(self) -> np.ndarray:
        """Arcs from the root to every vertex."""
        return tree_depths(self.parent, self.root)


def tree_depths(parent: np.ndarray, root: int) -> np.ndarray:
    depth = np.full(len(parent), -1, dtype=np.int64)
    depth[root] = 0
    while (depth < 0).any():
        todo = np.flatnonzero(depth < 0)
        known = depth[parent[todo]] >= 0
        depth[todo[known]] = depth[parent[todo[known]]] + 1
    return depth


@dataclass(frozen=True, eq=False)
class PairClasses:
    """The logical links grouped into orbits of the group, with the load of each orbit.

    ``of[u, w]``: the orbit of the link ``u -> w`` (-1: no link, or an orbit some of whose images
    are not links); orbit ``c`` puts ``count`` units on resource ``resource`` for each of its
    entries ``(entry_class == c)``.
    """

    group: RankGroup
    of: np.ndarray
    entry_class: np.ndarray
    entry_resource: np.ndarray
    entry_count: np.ndarray
    num_classes: int
    capacity: np.ndarray
    """GB/s of each resource (``bandwidth x count``), in ``Topology.logical().resources`` order."""

    def class_costs(self, prices: np.ndarray) -> np.ndarray:
        weights = self.entry_count * prices[self.entry_resource]
        return np.bincount(self.entry_class, weights=weights, minlength=self.num_classes)

    def tree_load(self, parent: np.ndarray) -> np.ndarray:
        """What one unit of a tree (with all its images) puts on each resource."""
        child = np.flatnonzero(parent >= 0)
        used = np.bincount(self.of[parent[child], child], minlength=self.num_classes)
        return np.bincount(
            self.entry_resource, weights=used[self.entry_class] * self.entry_count, minlength=len(self.capacity)
        )


def pair_classes(topology: Topology, group: RankGroup) -> PairClasses:
    """The orbits of the logical links under ``group`` and their loads (see :class:`PairClasses`)."""
    logical = topology.logical()
    index = {edge: i for i, edge in enumerate(logical.resources)}
    capacity = np.array([r.bandwidth_GBps * r.count for r in logical.resources.values()], dtype=float)
    pairs = np.array(list(logical.links), dtype=np.int64).reshape(-1, 2)
    lengths = np.array([len(link.path) - 1 for link in logical.links.values()], dtype=np.int64)
    resources = np.array([index[e] for link in logical.links.values() for e in link.edges], dtype=np.int64)
    rep, image = group.pair_class(pairs[:, 0], pairs[:, 1])
    keys, link_class, sizes = np.unique(rep * topology.num_ranks + image, return_inverse=True, return_counts=True)
    complete = sizes[link_class] == group.order
    n = topology.num_ranks
    of = np.full((n, n), -1, dtype=np.int64)
    of[pairs[complete, 0], pairs[complete, 1]] = link_class[complete]
    entry_link = np.repeat(np.arange(len(pairs)), lengths)
    keep = complete[entry_link]
    combined = link_class[entry_link[keep]] * len(capacity) + resources[keep]
    entries, counts = np.unique(combined, return_counts=True)
    return PairClasses(
        group,
        of,
        entries // len(capacity),
        entries % len(capacity),
        counts.astype(float),
        len(keys),
        capacity,
    )


@dataclass(frozen=True, eq=False)
class Packing:
    """Trees of each representative root with their rates; every rank ships ``rate_GBps``."""

    classes: PairClasses
    trees: tuple[Tree, ...]
    rate_GBps: float
    upper_GBps: float
    """No packing symmetric under the group ships more (Lagrangian bound from the last prices)."""
    iterations: int
    seconds: float
    interrupted: bool = False

    @property
    def group(self) -> RankGroup:
        return self.classes.group

    @property
    def optimal(self) -> bool:
        return self.rate_GBps >= self.upper_GBps * (1 - 1e-6)

    def trees_of(self, rep: int) -> list[Tree]:
        return [t for t in self.trees if t.root == rep]


@dataclass
class _Master:
    """The restricted LP: maximise x, each representative's trees carry at least x, each resource
    within its capacity."""

    classes: PairClasses
    reps: np.ndarray
    roots: list[int]
    parents: list[np.ndarray]
    loads: list[np.ndarray]

    def add(self, root: int, parent: np.ndarray) -> None:
        self.roots.append(root)
        self.parents.append(parent)
        self.loads.append(self.classes.tree_load(parent))

    def solve(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """(x, tree weights, each representative's dual, each resource's price)."""
        k, nrep, nres = len(self.roots), len(self.reps), len(self.classes.capacity)
        rep_row = {int(a): i for i, a in enumerate(self.reps)}
        rows = [np.arange(nrep), np.array([rep_row[r] for r in self.roots])]
        cols = [np.zeros(nrep, dtype=np.int64), 1 + np.arange(k)]
        vals = [-np.ones(nrep), np.ones(k)]
        for j, load in enumerate(self.loads):
            used = np.flatnonzero(load)
            rows.append(nrep + used)
            cols.append(np.full(len(used), 1 + j))
            vals.append(load[used])
        lp = highs_lp(
            np.concatenate([[-1.0], np.zeros(k)]),
            np.zeros(k + 1),
            np.full(k + 1, np.inf),
            np.concatenate([np.zeros(nrep), np.full(nres, -np.inf)]),
            np.concatenate([np.full(nrep, np.inf), self.classes.capacity]),
            (np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)),
        )
        h = new_highs()
        h.passModel(lp)
        h.run()
        import highspy

        status = h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise InfeasibleError(f"tree packing LP: HiGHS ended with {h.modelStatusToString(status)}")
        sol = h.getSolution()
        col, dual = np.array(sol.col_value), np.array(sol.row_dual)
        return float(col[0]), col[1:], np.maximum(dual[:nrep], 0.0), np.maximum(-dual[nrep:], 0.0)


def _hops(reachable: np.ndarray, root: int) -> np.ndarray:
    """Fewest arcs from ``root`` to every vertex over the arcs ``reachable`` marks."""
    n = len(reachable)
    dist = np.full(n, n, dtype=np.int64)
    dist[root] = 0
    frontier = np.zeros(n, dtype=bool)
    frontier[root] = True
    level = 0
    while frontier.any():
        level += 1
        nxt = reachable[frontier].any(axis=0) & (dist == n)
        dist[nxt] = level
        frontier = nxt
    return dist


def _seed(reachable: np.ndarray, root: int) -> np.ndarray:
    """A breadth-first tree: every vertex hangs off the lowest-numbered vertex one hop nearer."""
    dist = _hops(reachable, root)
    if (dist == len(dist)).any():
        stuck = int(np.flatnonzero(dist == len(dist))[0])
        raise InfeasibleError(f"rank {stuck} cannot be reached from rank {root}")
    parent = np.full(len(dist), -1, dtype=np.int64)
    for v in np.flatnonzero(dist > 0):
        parent[v] = int(np.flatnonzero(reachable[:, v] & (dist == dist[v] - 1))[0])
    return parent


def _price(cost: np.ndarray, hops: np.ndarray, root: int) -> tuple[np.ndarray, float]:
    """A cheapest tree at these costs and its cost; among near-ties one whose arcs leave vertices
    close to the root (shallow trees fill their pipeline sooner)."""
    finite = cost[np.isfinite(cost)]
    scale = float(finite[finite > 0].min()) if (finite > 0).any() else 1.0
    nudged = cost + (1e-6 * scale / max(len(cost), 1)) * hops[:, np.newaxis]
    parent = min_arborescence(nudged, root)
    exact = min_arborescence(cost, root)
    best, value = tree_cost(cost, exact), tree_cost(cost, parent)
    return (parent, value) if value <= best + 1e-9 * max(1.0, abs(best)) else (exact, best)


def pack(
    topology: Topology,
    classes: PairClasses,
    *,
    time_limit_s: float = 600.0,
    log: Callable[[str], None] | None = None,
) -> Packing:
    """The best tree packing of ``topology`` symmetric under ``classes.group`` (module docstring);
    Ctrl-C stops the search and keeps the packing found so far (``interrupted``)."""
    began = time.perf_counter()
    reps = classes.group.reps
    reachable = classes.of >= 0
    master = _Master(classes, reps, [], [], [])
    hops = {int(a): _hops(reachable, int(a)) for a in reps}
    for a in reps:
        master.add(int(a), _seed(reachable, int(a)))
    x, y, mu, prices = master.solve()
    upper, iterations, interrupted = np.inf, 0, False
    try:
        while iterations < MAX_ITERATIONS and time.perf_counter() - began < time_limit_s:
            iterations += 1
            cost_of = classes.class_costs(prices)
            cost = np.where(reachable, cost_of[np.maximum(classes.of, 0)], np.inf)
            found, total = [], 0.0
            for i, a in enumerate(reps):
                parent, value = _price(cost, hops[int(a)], int(a))
                total += value
                if value < mu[i] * (1 - GAP) - 1e-12:
                    found.append((int(a), parent))
            if total > 0:
                upper = min(upper, x / total)
            if log is not None:
                log(f"iteration {iterations}: rate {x:.6g} GB/s per rank, bound {upper:.6g}")
            if not found:
                upper = x  # no tree improves: the restricted LP is optimal
                break
            if x >= upper * (1 - GAP):
                break
            for a, parent in found:
                master.add(a, parent)
            x, y, mu, prices = master.solve()
    except KeyboardInterrupt:
        interrupted = True
    trees = tuple(
        Tree(r, p, float(w), load)
        for r, p, w, load in zip(master.roots, master.parents, y, master.loads, strict=True)
        if w > 1e-12 * max(x, 1.0)
    )
    upper = max(upper, x)
    return Packing(classes, trees, x, upper, iterations, time.perf_counter() - began, interrupted)
