"""The fractional flow LPs behind the bandwidth bounds, solved with HiGHS.

The network is the physical graph (switches are vertices, so a 512-GPU cluster stays sparse),
with each NIC split into an up half (ranks -> network) and a down half (network -> ranks) so that
no flow goes rank -> NIC -> rank. Every commodity ships ``x`` times its supplies (positive at
sources, negative at sinks); the LP maximises the common rate ``x``.

- ``shared=True`` (unicast data): all commodities share each arc's capacity (multi-commodity flow,
  exact when every chunk has one destination).
- ``shared=False`` (data every destination needs): one commodity per destination, each bounded by
  the capacities on its own. By Edmonds' branching theorem this equals the min-cut bound
  ``min over sets S of (bandwidth into S) / (data S must receive)``, attained by packing trees.
  No constraint joins two commodities, so the LP's ``x`` is the least of each commodity's own:
  they are solved one at a time (:func:`max_rate` splits them), each a single-commodity LP.

Single-commodity LPs run HiGHS's interior-point method (with its crossover to a vertex, so the
rate is as exact as the simplex's): on tori, hypercubes and long rings the dual simplex after
presolve stalls in degenerate pivots (hypercube:10: 115,000 iterations on 1,023 rows, 12 s;
hypercube:11, 22,528 arcs, over 5 minutes) where the interior point takes under a second.
"""

from __future__ import annotations

from collections.abc import Hashable

import highspy
import numpy as np

from synth.errors import InfeasibleError
from synth.milp.solvers.highs import highs_lp, new_highs
from topologies.model import Topology, Vertex

__all__ = ["flow_network", "max_rate"]

Node = Hashable
Arc = tuple[Node, Node, float]


def flow_network(topo: Topology, capacities: dict[tuple[Vertex, Vertex], float]) -> list[Arc]:
    """Arcs ``(u, v, capacity)`` of the physical graph with NICs split into up and down halves."""
    kinds = topo.switches

    def end(v: Vertex, other: Vertex, leaving: bool) -> Node:
        if kinds.get(v) != "nic":
            return v
        # leaving the NIC towards a rank, or entering it from the network: the down half
        toward_rank = isinstance(other, int)
        return (v, "down") if (leaving == toward_rank) else (v, "up")

    arcs = []
    for (u, v), cap in capacities.items():
        arcs.append((end(u, v, leaving=True), end(v, u, leaving=False), cap))
    return arcs


def _flow_rows(
    arcs: list[Arc], commodities: list[dict[Node, float]], shared: bool, index: dict[Node, int]
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The LP's matrix (column 0 is ``x``, then one column per commodity and arc) and each row's
    upper bound (its lower bound is 0): conservation ``out(w) - in(w) - supply(w) * x = 0`` per
    commodity and node, and with ``shared`` the arcs' capacities over all commodities."""
    n_arcs, n_nodes, k = len(arcs), len(index), len(commodities)
    tails = np.array([index[a[0]] for a in arcs])
    heads = np.array([index[a[1]] for a in arcs])
    rows, cols, vals = [], [], []
    for i, supply in enumerate(commodities):
        base_row = i * n_nodes
        arc_cols = 1 + i * n_arcs + np.arange(n_arcs)
        rows += [base_row + tails, base_row + heads]
        cols += [arc_cols, arc_cols]
        vals += [np.ones(n_arcs), -np.ones(n_arcs)]
        for v, amount in supply.items():
            if amount:
                rows.append(np.array([base_row + index[v]]))
                cols.append(np.array([0]))
                vals.append(np.array([-float(amount)]))
    upper = np.zeros(k * n_nodes + (n_arcs if shared else 0))
    if shared:
        for i in range(k):
            rows.append(k * n_nodes + np.arange(n_arcs))
            cols.append(1 + i * n_arcs + np.arange(n_arcs))
            vals.append(np.ones(n_arcs))
        upper[k * n_nodes :] = [a[2] for a in arcs]
    return (np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)), upper


def max_rate(arcs: list[Arc], commodities: list[dict[Node, float]], shared: bool) -> float:
    """Largest ``x`` such that every commodity can ship ``x * supply`` within the capacities."""
    commodities = [c for c in commodities if any(v for v in c.values())]
    if not commodities:
        return float("inf")
    if not shared and len(commodities) > 1:  # separable: the least of each commodity's own rate
        return min(max_rate(arcs, [c], shared) for c in commodities)
    nodes = sorted(
        {a[0] for a in arcs} | {a[1] for a in arcs} | {v for c in commodities for v in c}, key=repr
    )
    index = {v: i for i, v in enumerate(nodes)}
    triplets, upper = _flow_rows(arcs, commodities, shared, index)
    n_cols = 1 + len(commodities) * len(arcs)
    caps = np.array([a[2] for a in arcs], dtype=float)
    arc_upper = np.full(len(caps) * len(commodities), np.inf) if shared else np.tile(caps, len(commodities))
    cost = np.concatenate([[-1.0], np.zeros(n_cols - 1)])  # maximise x
    h = new_highs()
    if len(commodities) == 1:
        h.setOptionValue("solver", "ipm")  # the dual simplex stalls on these (module docstring)
    h.passModel(
        highs_lp(
            cost,
            np.zeros(n_cols),
            np.concatenate([[np.inf], arc_upper]),
            np.zeros(len(upper)),
            upper,
            triplets,
        )
    )
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kUnbounded:
        return float("inf")
    if status != highspy.HighsModelStatus.kOptimal:
        raise InfeasibleError(f"bandwidth bound LP: HiGHS ended with {h.modelStatusToString(status)}")
    return float(h.getSolution().col_value[0])
