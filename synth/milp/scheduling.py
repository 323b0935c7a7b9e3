"""Stage 3: send times for fixed routes and orders (an LP), and which consecutive sends to merge.

Variables: every send's start ``s``, its pieces' arrival ``a`` and the makespan ``T``. Rows:

- a send starts after its piece arrived at its source: ``s[i] >= a[parent(i)]``;
- on every server of every physical edge, stage 2's order is kept: ``s[next] >= s[prev] + hold``;
- ``a[i] >= s[i] + delay(i)`` and ``T >= a[i]``.

With orders fixed this is a difference-constraint LP whose optimum (with a tiny weight on the sum
of starts) is the earliest start of every send, i.e. the list schedule's times when stage 2 left
no gap. *Merging* (TACCL's contiguity): consecutive sends over the same network link may travel as
one send. Under the simulator's time model (alpha is latency, not link occupancy) a merged send
never finishes earlier, so merging only pays with a per-send occupancy ``overhead_us`` (what a
runtime spends per send); with ``overhead_us > 0`` the pairs become binaries ``m`` of a MILP:
``m = 1`` removes the second send's overhead and makes both arrive with the later one.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from synth.milp.ordering import Schedule
from synth.milp.solvers import Backend, Model, ModelBuilder, Status
from synth.timing import DEFAULT
from topologies.model import Topology

__all__ = ["MERGE_WINDOW", "Timing", "build_model", "schedule_times"]

MERGE_WINDOW = 6
"""At most this many consecutive sends of one network link form one merged send (TACCL's window)."""


@dataclass(frozen=True)
class Layout:
    makespan: int
    start: list[int]
    arrive: list[int]
    merge: dict[tuple[int, int], int]


@dataclass(frozen=True)
class Timing:
    """Stage 3's result: start times (same order as the schedule's sends) and merged runs."""

    start_us: tuple[float, ...]
    makespan_us: float
    merged: tuple[tuple[int, ...], ...]
    status: Status
    gap: float | None
    model_size: str
    solve_s: float
    solver: str
    interrupted: bool = False


def _delays(topology: Topology, schedule: Schedule, piece_bytes: float) -> tuple[list[float], list[float]]:
    logical = topology.logical()
    alpha, transfer = [], []
    for s in schedule.sends:
        link = logical.links[(s.src, s.dst)]
        alpha.append(link.alpha_us)
        transfer.append(DEFAULT.hold_us(link.bandwidth_GBps, piece_bytes))
    return alpha, transfer


def _merge_pairs(topology: Topology, schedule: Schedule) -> list[tuple[int, int]]:
    """Consecutive sends of the same network link on the same server (candidates to merge)."""
    node = topology.node_of
    pairs = []
    for (edge, _), seq in sorted(schedule.servers.items(), key=lambda item: repr(item[0])):
        if not any(topology.switches.get(v) == "network" for v in edge):
            continue
        for a, b in itertools.pairwise(seq):
            sa, sb = schedule.sends[a], schedule.sends[b]
            if (sa.src, sa.dst) == (sb.src, sb.dst) and node[sa.src] != node[sa.dst]:
                pairs.append((a, b))
    return pairs


def build_model(
    topology: Topology, schedule: Schedule, piece_bytes: float, overhead_us: float = 0.0
) -> tuple[Model, Layout]:
    """The stage-3 model (module docstring); merge binaries only when ``overhead_us > 0``."""
    sends = schedule.sends
    count = len(sends)
    alpha, transfer = _delays(topology, schedule, piece_bytes)
    resources = topology.logical().resources
    horizon = schedule.makespan_us + overhead_us * count + 1.0
    mb = ModelBuilder(f"schedule-{topology.name}")
    makespan = mb.var("T", 0.0, horizon, 1.0)
    weight = 1e-6 / max(1, count)
    s = [mb.var(f"s[{i}]", 0.0, horizon, weight) for i in range(count)]
    a = [mb.var(f"a[{i}]", 0.0, horizon, 0.0) for i in range(count)]
    pairs = _merge_pairs(topology, schedule) if overhead_us > 0 else []
    merge = {pair: mb.var(f"m[{pair[0]},{pair[1]}]", 0, 1, 0.0, integer=True) for pair in pairs}
    follows = {b: (a_, col) for (a_, b), col in merge.items()}
    leads = {a_: (b, col) for (a_, b), col in merge.items()}
    for i, send in enumerate(sends):
        if send.parent >= 0:
            mb.row({s[i]: 1.0, a[send.parent]: -1.0}, lower=0.0)
        mb.row({a[i]: 1.0, s[i]: -1.0}, lower=alpha[i] + transfer[i] + overhead_us)
        mb.row({makespan: 1.0, a[i]: -1.0}, lower=0.0)
        if i in leads:  # merged with the next: arrives with it
            nxt, col = leads[i]
            mb.row({a[i]: 1.0, a[nxt]: -1.0, col: -horizon}, lower=-horizon)
    for (edge, _), seq in schedule.servers.items():
        hold = DEFAULT.hold_us(resources[edge].bandwidth_GBps, piece_bytes)
        for prev, nxt in itertools.pairwise(seq):
            if nxt in follows and follows[nxt][0] == prev:  # a merged pair saves one overhead
                mb.row({s[nxt]: 1.0, s[prev]: -1.0, follows[nxt][1]: overhead_us}, lower=hold + overhead_us)
            else:
                mb.row({s[nxt]: 1.0, s[prev]: -1.0}, lower=hold + overhead_us)
    chain: list[tuple[int, int]] = []
    for pair in pairs:  # at most MERGE_WINDOW sends per run: any WINDOW consecutive pairs keep one apart
        if chain and chain[-1][1] != pair[0]:
            chain = []
        chain.append(pair)
        if len(chain) >= MERGE_WINDOW:
            mb.row({merge[p]: 1.0 for p in chain[-MERGE_WINDOW:]}, upper=MERGE_WINDOW - 1)
    return mb.build(rel_gap=1e-4), Layout(makespan, s, a, merge)


def schedule_times(
    topology: Topology,
    schedule: Schedule,
    piece_bytes: float,
    backend: Backend,
    time_limit_s: float,
    threads: int = 1,
    overhead_us: float = 0.0,
) -> Timing:
    """Solve stage 3; without a solution the list schedule's own times are kept."""
    began = time.perf_counter()
    model, layout = build_model(topology, schedule, piece_bytes, overhead_us)
    sol = backend.solve(model, time_limit_s, threads)
    elapsed = time.perf_counter() - began
    if not sol.status.has_solution or sol.values is None:
        return Timing(
            tuple(x.start_us for x in schedule.sends),
            schedule.makespan_us,
            (),
            sol.status,
            None,
            model.size(),
            elapsed,
            backend.name,
            sol.interrupted,
        )
    x = sol.values
    starts = [float(x[c]) for c in layout.start]
    merged_with = {b: a_ for (a_, b), col in layout.merge.items() if x[col] > 0.5}
    run_of: dict[int, list[int]] = {}
    runs: list[list[int]] = []
    for i in range(len(starts)):
        if i in merged_with:
            run = run_of[merged_with[i]]
            run.append(i)
            starts[i] = starts[run[0]]
        else:
            run = [i]
            runs.append(run)
        run_of[i] = run
    return Timing(
        tuple(starts),
        float(x[layout.makespan]),
        tuple(tuple(r) for r in runs if len(r) > 1),
        sol.status,
        sol.gap,
        model.size(),
        elapsed,
        backend.name,
        sol.interrupted,
    )
