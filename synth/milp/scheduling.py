"""Stage 3: send times for fixed routes and orders (an LP), and which consecutive sends to merge.

Variables: every send's start ``s``, its pieces' arrival ``a`` and the makespan ``T``. Rows:

- a send starts after its piece arrived at its source: ``s[i] >= a[parent(i)]``;
- on every server of every resource (physical edge, and connection where sends cost time),
  stage 2's order is kept: ``s[next] >= s[prev] + hold(prev)``;
- ``a[i] >= s[i] + delay(i)`` and ``T >= a[i]``.

Times are the timing model's (:class:`synth.timing.Params`). With orders fixed this is a
difference-constraint LP whose optimum (with a tiny weight on the sum of starts) is the earliest
start of every send, i.e. the list schedule's times when stage 2 left no gap. *Merging* (TACCL's
contiguity): consecutive sends over the same network connection may travel as one send. Alpha is
latency, not occupancy, so a merged send never finishes earlier unless sends cost time
(``Params.send_us``, which occupies the connection); then the pairs become binaries ``m`` of a
MILP: ``m = 1`` removes the second send's cost and makes both arrive with the later one, and the
emitted schedule starts them together, which the Algorithm model and the compiler take as one send.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from synth.milp.ordering import Schedule
from synth.milp.solvers import Backend, Model, ModelBuilder, Status
from synth.timing import CONNECTION, IDEAL, Params
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


def _merge_pairs(topology: Topology, schedule: Schedule) -> list[tuple[int, int]]:
    """Consecutive sends on the same server of a connection between machines (candidates to merge)."""
    node = topology.node_of
    pairs = []
    for (key, _), seq in sorted(schedule.servers.items(), key=lambda item: repr(item[0])):
        if key[0] != CONNECTION or node[key[1]] == node[key[2]]:
            continue
        pairs.extend(itertools.pairwise(seq))
    return pairs


def _hold(topology: Topology, key: tuple, params: Params, piece_bytes: float) -> float:
    """How long one piece holds a server of ``key`` (a physical edge or a connection)."""
    logical = topology.logical()
    if key[0] == CONNECTION:
        return params.occupy_us(logical.links[(key[1], key[2])], piece_bytes)
    return params.hold_us(logical.resources[key].bandwidth_GBps, piece_bytes)


def build_model(
    topology: Topology, schedule: Schedule, piece_bytes: float, params: Params = IDEAL
) -> tuple[Model, Layout]:
    """The stage-3 model (module docstring); merge binaries only where sends cost time."""
    sends = schedule.sends
    count = len(sends)
    logical = topology.logical()
    delay = [params.delay_us(logical.links[(x.src, x.dst)], piece_bytes) for x in sends]
    overhead_us = params.send_us
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
        mb.row({a[i]: 1.0, s[i]: -1.0}, lower=delay[i])
        mb.row({makespan: 1.0, a[i]: -1.0}, lower=0.0)
        if i in leads:  # merged with the next: arrives with it
            nxt, col = leads[i]
            mb.row({a[i]: 1.0, a[nxt]: -1.0, col: -horizon}, lower=-horizon)
    for (key, _), seq in schedule.servers.items():
        hold = _hold(topology, key, params, piece_bytes)
        for prev, nxt in itertools.pairwise(seq):
            if key[0] == CONNECTION and nxt in follows and follows[nxt][0] == prev:  # saves one send cost
                mb.row({s[nxt]: 1.0, s[prev]: -1.0, follows[nxt][1]: overhead_us}, lower=hold)
            else:
                mb.row({s[nxt]: 1.0, s[prev]: -1.0}, lower=hold)
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
    params: Params = IDEAL,
) -> Timing:
    """Solve stage 3 under ``params``; without a solution the list schedule's own times are kept."""
    began = time.perf_counter()
    model, layout = build_model(topology, schedule, piece_bytes, params)
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
        else:
            run = [i]
            runs.append(run)
        run_of[i] = run
    for run in runs:  # one call carries the run: it starts when its last piece is there, not its first
        first = max(starts[i] for i in run)
        for i in run:
            starts[i] = first
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
