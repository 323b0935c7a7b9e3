"""Stage 1: the routing MILP. Which links carry how many pieces of each chunk (no ordering yet).

Per representative demand ``r`` and candidate link ``l`` (see :mod:`synth.milp.instance`):
``y[r,l]`` in ``0..k`` pieces, ``z[r,l]`` whether ``l`` is used at all, ``t[r,v]`` a lower bound on
when a piece can first reach rank ``v``, and the makespan ``T``. Constraints:

- every destination receives each of the ``k`` pieces once (``sum_in y = k``); a one-destination
  demand is a flow of ``k`` from its source (paths);
- ``y <= k z`` and ``z <= y``;
- ``t[v] >= t[u] + delay(l)`` where ``z[l] = 1`` (big-M from the upper bound ``T_ub``: a feasible
  routing's value, so ``M = T_ub + delay - lb(v)`` is tight and no sentinel is needed), ``T >= t[d]``;
- bandwidth relaxed to totals: every physical edge's busy time over the whole orbit ``<= T``.

The objective is ``T`` plus two tie-breaks worth at most 0.01% of ``T_ub`` each: the total link time
of the routes (shorter trees when the bottleneck fixes ``T``) and the sketch's hyperedge policy
(``uc-min``/``uc-max``: fewer or more distinct GPU-to-GPU connections through a switch). Because
any choice of one incoming link per rank in the candidate DAG is a tree, the counts decompose into
``k`` trees (paths for one destination) directly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from synth.milp.instance import Instance, Pair
from synth.milp.solvers import INF, Backend, Model, ModelBuilder, Solution, Status, relative_gap

__all__ = ["Routing", "build_model", "decompose", "expand", "heuristic_counts", "relaxed_makespan", "route"]

TIE_BREAK = 1e-4
"""Weight of each secondary objective, relative to the upper bound on ``T``."""
REL_GAP = 5e-4
"""Stop once proven within 0.05%: below that the tie-breaks only steer which optimum is found."""

Counts = dict[int, dict[Pair, int]]
"""Representative -> candidate link -> pieces on it."""


@dataclass(frozen=True)
class Layout:
    """Where each variable sits in the model's columns."""

    y: dict[tuple[int, Pair], int]
    z: dict[tuple[int, Pair], int]
    t: dict[tuple[int, int], int]
    makespan: int


@dataclass(frozen=True)
class Routing:
    """Stage 1's result: every chunk's tree (arcs, parents first) and how the model was solved."""

    trees: dict[int, tuple[Pair, ...]]
    counts: Counts
    status: Status
    objective_us: float
    """The relaxed makespan of the chosen routes (a lower bound on their real makespan)."""
    bound_us: float | None
    model_size: str
    build_s: float
    solve_s: float
    solver: str
    interrupted: bool = False

    @property
    def gap(self) -> float | None:
        return relative_gap(self.status, self.objective_us, self.bound_us)


def _earliest(inst: Instance, rep: int) -> dict[int, float]:
    """Shortest arrival delay from the source to every rank, over the candidate DAG."""
    src = inst.demands[rep].source
    lb = {src: 0.0}
    for u, v in inst.candidates[rep]:
        if u in lb:
            lb[v] = min(lb.get(v, INF), lb[u] + inst.delay_us[(u, v)])
    return lb


def heuristic_counts(inst: Instance) -> Counts:
    """A feasible routing: every piece on the shortest-delay tree (path) of its demand."""
    out: Counts = {}
    k = inst.chunkup
    for rep in inst.reps:
        lb = _earliest(inst, rep)
        best: dict[int, Pair] = {}
        for u, v in inst.candidates[rep]:
            if u in lb and (
                v not in best or lb[u] + inst.delay_us[(u, v)] < lb[best[v][0]] + inst.delay_us[best[v]]
            ):
                best[v] = (u, v)
        counts: dict[Pair, int] = {}
        if inst.is_spanning(rep):
            for pair in best.values():
                counts[pair] = k
        else:
            (v,) = inst.demands[rep].dests
            while v != inst.demands[rep].source:
                pair = best[v]
                counts[pair] = k
                v = pair[0]
        out[rep] = counts
    return out


def relaxed_makespan(inst: Instance, counts: Counts) -> float:
    """The routing model's objective ``T`` for given counts (max of edge loads and arrival times)."""
    loads = [
        sum(c * counts[r].get(p, 0) for (r, p), c in terms.items()) for terms in inst.load_terms.values()
    ]
    latest = 0.0
    for rep in inst.reps:
        t = {inst.demands[rep].source: 0.0}
        for u, v in inst.candidates[rep]:
            if counts[rep].get((u, v), 0) > 0 and u in t:
                t[v] = max(t.get(v, 0.0), t[u] + inst.delay_us[(u, v)])
        latest = max([latest, *(t.get(d, 0.0) for d in inst.demands[rep].dests)])
    return max([latest, *loads])


def _work(inst: Instance, counts: Counts) -> float:
    return sum(n * inst.delay_us[p] for rep in inst.reps for p, n in counts[rep].items())


@dataclass
class _Builder:
    """The routing model under construction: its columns (the layout) and the MIP start."""

    inst: Instance
    mb: ModelBuilder
    layout: Layout
    values: dict[int, float]
    t_ub: float
    work_scale: float

    def arrivals(self, rep: int, counts: dict[Pair, int], lb: dict[int, float]) -> None:
        """``t[rep, v]`` for every rank the demand can reach, started at the start routes' times."""
        inst, src = self.inst, self.inst.demands[rep].source
        start_t = {src: 0.0}
        for u, v in inst.candidates[rep]:
            if counts.get((u, v), 0) and u in start_t:
                start_t[v] = max(start_t.get(v, 0.0), start_t[u] + inst.delay_us[(u, v)])
        for v in sorted(lb):
            if v != src:
                col = self.layout.t[rep, v] = self.mb.var(f"t[{rep},{v}]", lb[v], self.t_ub)
                self.values[col] = min(max(start_t.get(v, lb[v]), lb[v]), self.t_ub)

    def link(self, rep: int, u: int, v: int, pieces: int, lb: dict[int, float]) -> None:
        """``y`` and ``z`` of one candidate link, and ``t[v] >= t[u] + delay`` where it is used."""
        mb, k, src = self.mb, self.inst.chunkup, self.inst.demands[rep].source
        d = self.inst.delay_us[(u, v)]
        y = self.layout.y[rep, (u, v)] = mb.var(f"y[{rep},{u},{v}]", 0, k, self.work_scale * d, integer=True)
        self.values[y] = pieces
        if k > 1:
            z = self.layout.z[rep, (u, v)] = mb.var(f"z[{rep},{u},{v}]", 0, 1, 0.0, integer=True)
            self.values[z] = 1.0 if pieces else 0.0
            mb.row({y: 1.0, z: -float(k)}, upper=0.0)
            mb.row({y: 1.0, z: -1.0}, lower=0.0)
        else:
            z = self.layout.z[rep, (u, v)] = y
        m = self.t_ub + d - lb[v]
        terms = {self.layout.t[rep, v]: 1.0, z: -m}
        if u != src:
            terms[self.layout.t[rep, u]] = -1.0
        mb.row(terms, lower=d - m)

    def delivery(self, rep: int, lb: dict[int, float]) -> None:
        """Every destination gets the ``k`` pieces (a flow of ``k`` for one destination), and ``T``
        is no earlier than any arrival."""
        inst, mb, k, y = self.inst, self.mb, self.inst.chunkup, self.layout.y
        src, dests = inst.demands[rep].source, inst.demands[rep].dests
        incoming: dict[int, list[int]] = {}
        outgoing: dict[int, list[int]] = {}
        for u, v in inst.candidates[rep]:
            incoming.setdefault(v, []).append(y[rep, (u, v)])
            outgoing.setdefault(u, []).append(y[rep, (u, v)])
        if inst.is_spanning(rep):
            for v in dests:
                mb.row({c: 1.0 for c in incoming[v]}, lower=k, upper=k)
        else:
            for v in sorted(lb):
                if v == src:
                    continue
                flow = {c: 1.0 for c in incoming.get(v, [])}
                for c in outgoing.get(v, []):
                    flow[c] = flow.get(c, 0.0) - 1.0
                need = float(k) if v in dests else 0.0
                mb.row(flow, lower=need, upper=need)
        for v in dests:
            mb.row({self.layout.makespan: 1.0, self.layout.t[rep, v]: -1.0}, lower=0.0)


def build_model(inst: Instance, start: Counts | None = None) -> tuple[Model, Layout]:
    """The routing MILP (module docstring); ``start`` (default: :func:`heuristic_counts`) gives
    the MIP start and the upper bound ``T_ub`` behind every big-M."""
    start = start if start is not None else heuristic_counts(inst)
    t_ub = relaxed_makespan(inst, start) * (1 + 1e-9) + 1e-9
    mb = ModelBuilder(f"routing-{inst.collective.name}-{inst.topology.name}-k{inst.chunkup}")
    makespan = mb.var("T", 0.0, t_ub, 1.0)
    work_scale = TIE_BREAK * t_ub / max(_work(inst, start), 1e-12)
    b = _Builder(
        inst, mb, Layout({}, {}, {}, makespan), {makespan: relaxed_makespan(inst, start)}, t_ub, work_scale
    )
    for rep in inst.reps:
        lb = _earliest(inst, rep)
        b.arrivals(rep, start[rep], lb)
        for u, v in inst.candidates[rep]:
            b.link(rep, u, v, start[rep].get((u, v), 0), lb)
        b.delivery(rep, lb)
    for terms in inst.load_terms.values():
        row = {b.layout.y[key]: coef for key, coef in terms.items()}
        row[makespan] = -1.0
        mb.row(row, upper=0.0)
    _policy(inst, mb, b.layout.z, b.values, t_ub)
    x0 = np.array([b.values.get(i, 0.0) for i in range(mb.num_cols)])
    return mb.build(start=x0, rel_gap=REL_GAP), b.layout


def _policy(inst: Instance, mb: ModelBuilder, z: dict, values: dict[int, float], t_ub: float) -> None:
    """The hyperedge policy: ``used[o]`` per orbit of counted connections, priced +/- epsilon."""
    restriction = inst.restriction
    policy = restriction.policy
    if policy is None or not restriction.connection_pairs:
        return
    orbit_of: dict[Pair, Pair] = {}
    members: dict[Pair, list[Pair]] = {}
    for pair in sorted(restriction.connection_pairs):
        if pair in orbit_of:
            continue
        images = {(g[pair[0]], g[pair[1]]) for g in restriction.group}
        for img in images:
            orbit_of[img] = pair
        members[pair] = sorted(images)
    eps = TIE_BREAK * t_ub / max(1, len(restriction.connection_pairs))
    users: dict[Pair, list[int]] = {}
    for (_rep, pair), col in z.items():
        if pair in orbit_of:
            users.setdefault(orbit_of[pair], []).append(col)
    for orbit, cols in sorted(users.items()):
        size = len(members[orbit])
        used = mb.var(
            f"used[{orbit[0]},{orbit[1]}]", 0, 1, eps * size if policy == "uc-min" else -eps * size, True
        )
        values[used] = 1.0 if any(values.get(c, 0.0) > 0.5 for c in cols) else 0.0
        for c in cols:
            mb.row({used: 1.0, c: -1.0}, lower=0.0)
        if policy == "uc-max":
            mb.row({used: 1.0, **{c: -1.0 for c in cols}}, upper=0.0)


def _counts_from(inst: Instance, layout: Layout, x: np.ndarray) -> Counts:
    out: Counts = {rep: {} for rep in inst.reps}
    for (rep, pair), col in layout.y.items():
        n = round(x[col])
        if n > 0:
            out[rep][pair] = n
    return out


def _consistent(inst: Instance, counts: Counts) -> bool:
    k = inst.chunkup
    for rep in inst.reps:
        into: dict[int, int] = {}
        out: dict[int, int] = {}
        for (u, v), n in counts[rep].items():
            into[v] = into.get(v, 0) + n
            out[u] = out.get(u, 0) + n
        dests = inst.demands[rep].dests
        if inst.is_spanning(rep):
            if any(into.get(v, 0) != k for v in dests):
                return False
        elif any(into.get(v, 0) - out.get(v, 0) != (k if v in dests else 0) for v in into):
            return False
    return True


def decompose(inst: Instance, rep: int, counts: dict[Pair, int]) -> list[tuple[Pair, ...]]:
    """Split a representative's counts into ``k`` trees (one incoming link per rank) or paths."""
    k = inst.chunkup
    pos = inst.position[rep]
    src = inst.demands[rep].source
    if inst.is_spanning(rep):
        parents: dict[int, list[int]] = {}
        for (u, v), n in sorted(counts.items(), key=lambda item: (pos[item[0][1]], pos[item[0][0]])):
            parents.setdefault(v, []).extend([u] * n)
        order = sorted(parents, key=pos.__getitem__)
        return [tuple((parents[v][i], v) for v in order) for i in range(k)]
    (dst,) = inst.demands[rep].dests
    left = dict(counts)
    paths = []
    for _ in range(k):
        path = []
        u = src
        while u != dst:
            pair = min((p for p, n in left.items() if p[0] == u and n > 0), key=lambda p: pos[p[1]])
            left[pair] -= 1
            path.append(pair)
            u = pair[1]
        paths.append(tuple(path))
    return paths


def expand(inst: Instance, counts: Counts) -> dict[int, tuple[Pair, ...]]:
    """Every chunk's tree: each representative's trees mapped onto its whole orbit."""
    trees: dict[int, tuple[Pair, ...]] = {}
    for rep in inst.reps:
        for i, tree in enumerate(decompose(inst, rep, counts[rep])):
            for g, j in inst.images[rep]:
                trees[inst.demands[j].pieces[i]] = tuple((g[u], g[v]) for u, v in tree)
    return trees


def route(inst: Instance, backend: Backend, time_limit_s: float, threads: int = 1) -> Routing:
    """Build and solve the routing MILP; on time-out keep the incumbent, with no solution the start."""
    began = time.perf_counter()
    start = heuristic_counts(inst)
    model, layout = build_model(inst, start)
    built = time.perf_counter() - began
    sol: Solution = backend.solve(model, time_limit_s, threads)
    counts = start
    status = Status.FEASIBLE
    bound = sol.bound
    if sol.status.has_solution and sol.values is not None:
        found = _counts_from(inst, layout, sol.values)
        if _consistent(inst, found):
            counts = found
            status = sol.status
    elif sol.status is Status.INFEASIBLE:
        bound = None
    objective = relaxed_makespan(inst, counts)
    if bound is not None:
        bound = min(bound, objective)
    return Routing(
        trees=expand(inst, counts),
        counts=counts,
        status=status,
        objective_us=objective,
        bound_us=bound,
        model_size=model.size(),
        build_s=built,
        solve_s=sol.time_s,
        solver=backend.name,
        interrupted=sol.interrupted,
    )
