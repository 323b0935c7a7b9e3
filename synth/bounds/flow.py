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
"""

from __future__ import annotations

from collections.abc import Hashable

import highspy
import numpy as np

from synth.errors import InfeasibleError
from synth.milp.solvers.highs import new_highs
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


def max_rate(arcs: list[Arc], commodities: list[dict[Node, float]], shared: bool) -> float:
    """Largest ``x`` such that every commodity can ship ``x * supply`` within the capacities."""
    commodities = [c for c in commodities if any(v for v in c.values())]
    if not commodities:
        return float("inf")
    nodes = sorted(
        {a[0] for a in arcs} | {a[1] for a in arcs} | {v for c in commodities for v in c}, key=repr
    )
    index = {v: i for i, v in enumerate(nodes)}
    n_arcs, n_nodes, k = len(arcs), len(nodes), len(commodities)
    n_cols = 1 + k * n_arcs
    caps = np.array([a[2] for a in arcs], dtype=float)
    tails = np.array([index[a[0]] for a in arcs])
    heads = np.array([index[a[1]] for a in arcs])

    rows, cols, vals = [], [], []
    n_rows = k * n_nodes + (n_arcs if shared else 0)
    for i, supply in enumerate(commodities):
        base_col = 1 + i * n_arcs
        base_row = i * n_nodes
        arc_cols = base_col + np.arange(n_arcs)
        rows += [base_row + tails, base_row + heads]  # out(w) - in(w) - supply(w) * x = 0
        cols += [arc_cols, arc_cols]
        vals += [np.ones(n_arcs), -np.ones(n_arcs)]
        for v, amount in supply.items():
            if amount:
                rows.append(np.array([base_row + index[v]]))
                cols.append(np.array([0]))
                vals.append(np.array([-float(amount)]))
    lower = np.zeros(n_rows)
    upper = np.zeros(n_rows)
    if shared:
        for i in range(k):
            rows.append(k * n_nodes + np.arange(n_arcs))
            cols.append(1 + i * n_arcs + np.arange(n_arcs))
            vals.append(np.ones(n_arcs))
        lower[k * n_nodes :] = 0.0
        upper[k * n_nodes :] = caps
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    v = np.concatenate(vals)
    order = np.lexsort((r, c))
    r, c, v = r[order], c[order], v[order]
    starts = np.searchsorted(c, np.arange(n_cols + 1))

    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    lp.col_cost_ = np.concatenate([[-1.0], np.zeros(n_cols - 1)])  # maximise x
    lp.col_lower_ = np.zeros(n_cols)
    lp.col_upper_ = np.concatenate([[inf], np.tile(caps, k) if not shared else np.full(k * n_arcs, inf)])
    lp.row_lower_ = lower
    lp.row_upper_ = upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = starts.astype(np.int32)
    lp.a_matrix_.index_ = r.astype(np.int32)
    lp.a_matrix_.value_ = v
    h = new_highs()
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kUnbounded:
        return float("inf")
    if status != highspy.HighsModelStatus.kOptimal:
        raise InfeasibleError(f"bandwidth bound LP: HiGHS ended with {h.modelStatusToString(status)}")
    return float(h.getSolution().col_value[0])
