"""The three stages on one non-combining collective: route, order, time; keep the best chunkup.

Chunkup is size-aware. At sizes where latency dominates, pieces smaller than
:data:`MIN_PIECE_BYTES` only add sends, so one chunk per rank is used. Where bandwidth dominates,
more pieces pipeline through the bottleneck and shorten the fill and drain around it: candidates
are 1, then powers of two from the largest that fits :data:`MAX_SENDS` downwards, tried until one
is worse than the best by more than :data:`TOLERANCE` (or the largest gains under
:data:`PIPELINE_GAIN` over 1, or the best meets the lower bound); the smallest chunkup within that
tolerance wins (fewer sends, same speed). Every candidate is routed (stage 1) and ordered with each rule of
:data:`synth.milp.ordering.PRIORITIES` (stage 2, cheap); the winner is timed (stage 3) and emitted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from common.limits import Limit
from sketches.restrict import Restriction
from synth.algorithm import Algorithm, Provenance
from synth.bounds import bandwidth_time_us, latency_time_us
from synth.collectives import make_collective
from synth.deadline import NO_DEADLINE, Deadline, OutOfTime
from synth.defaults import MILP_STAGE_TIME_LIMIT_S, MILP_TIME_LIMIT_S
from synth.milp.emit import to_algorithm
from synth.milp.instance import Instance, build_instance
from synth.milp.ordering import PRIORITIES, Schedule, list_schedule
from synth.milp.routing import Routing, route
from synth.milp.scheduling import Timing, schedule_times
from synth.milp.solvers import Backend
from synth.outcome import Outcome, Question, Status
from synth.timing import DEFAULT, IDEAL, Params

__all__ = [
    "DEFAULT_STAGE_TIME_LIMIT_S",
    "DEFAULT_TIME_LIMIT_S",
    "MAX_SENDS",
    "MIN_PIECE_BYTES",
    "Options",
    "StageReport",
    "check_chunkup",
    "chunkup_candidates",
    "run_stages",
]

MIN_PIECE_BYTES = 256
"""Smaller pieces cost a send each and pipeline nothing (their transfer is far below any alpha)."""
MAX_SENDS = 40_000
"""Largest schedule the ordering and timing stages handle in seconds on a laptop core."""
MAX_CHUNKUP = 64
GIVEN_SENDS = Limit("sends", 400_000, "XCCL_MAX_MILP_SENDS")
"""Largest schedule a chunkup the user chose (``--chunkup`` or the sketch's) may make: ten times
:data:`MAX_SENDS`, minutes and gigabytes in the ordering stage."""
TOLERANCE = 5e-4
"""A smaller chunkup within 0.05% of the best makespan is preferred; one beyond it ends the search."""
EXPLORE_SHARE = 0.25
"""Chunkups after the first two (1 and the largest) get this share of the routing time limit: their
incumbents come early, and proving them optimal rarely changes the schedule."""
PIPELINE_GAIN = 0.01
"""If the largest chunkup is not 1% faster than chunkup 1, the sizes between are not tried."""
DEFAULT_TIME_LIMIT_S = MILP_TIME_LIMIT_S
DEFAULT_STAGE_TIME_LIMIT_S = MILP_STAGE_TIME_LIMIT_S
MIN_SOLVE_S = 0.05
"""A solve started with less time left than this still gets it: the routing solver needs a moment
to hand back its MIP start."""

Log = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """Knobs of MILP synthesis (the command line's flags)."""

    solver: str | None = None
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S
    """The whole synthesis (every stage and chunkup, both halves of an allreduce); ``None``: none."""
    stage_time_limit_s: float = DEFAULT_STAGE_TIME_LIMIT_S
    """Each MILP or LP solve stops after this long and keeps its best solution."""
    threads: int = 1
    chunkup: int | None = None
    """Overrides the sketch's chunkup; ``None`` keeps the sketch's (which may be automatic)."""
    params: Params = DEFAULT
    """The timing model every stage optimizes under (its per-send cost is what merging saves): the
    calibrated one by default, so a schedule wins where it will run; ``IDEAL`` is TACCL's model."""
    max_sends: int = MAX_SENDS


@dataclass(frozen=True)
class StageReport:
    stage: str
    chunkup: int
    detail: str
    status: str
    seconds: float
    value_us: float | None = None
    gap: float | None = None

    def line(self) -> str:
        gap = "" if self.gap in (None, 0.0) else f", gap {100 * self.gap:.2f}%"
        value = "" if self.value_us is None else f": {self.value_us:.2f} us"
        return (
            f"{self.stage} k={self.chunkup}: {self.detail}; {self.status}{value}{gap} in {self.seconds:.2f} s"
        )


@dataclass(frozen=True)
class _Tried:
    """One chunkup routed (stage 1) and ordered (stage 2)."""

    chunkup: int
    inst: Instance
    routing: Routing
    schedule: Schedule
    rule: str


@dataclass
class _Search:
    """What :func:`run_stages` has done so far: the chunkups tried, the stage reports (each also
    logged), and whether Ctrl-C or the time limit cut it short."""

    log: Log
    label: str
    tried: list[_Tried] = field(default_factory=list)
    reports: list[StageReport] = field(default_factory=list)
    interrupted: bool = False
    timed_out: bool = False
    slower_timing: bool = False
    """Stage 3 ran but its times were slower than the ordering's (:func:`_kept`): not proven."""

    def say(self, line: str) -> None:
        self.log(f"{self.label}{line}")

    def report(self, report: StageReport, suffix: str = "") -> None:
        self.reports.append(report)
        self.say(report.line() + suffix)


def _sends_per_piece(inst: Instance) -> int:
    hops = inst.topology.logical().hops
    total = 0
    for d in inst.demands:
        total += (
            len(d.dests)
            if len(d.dests) == inst.topology.num_ranks - 1
            else sum(int(hops[d.source, x]) for x in d.dests)
        )
    return max(1, total)


def _solve_limit(deadline: Deadline, stage_s: float) -> float:
    """One solve's time limit: the stage's, cut to what the deadline leaves (at least MIN_SOLVE_S)."""
    return max(MIN_SOLVE_S, deadline.limit(stage_s) or 0.0)


def chunkup_candidates(base: Instance, options: Options) -> list[int]:
    """Chunkups to try (module docstring): 1 first (cheap, and enough wherever it already meets the
    bound), then from the largest down; ``base`` is the instance at chunkup 1."""
    fixed = options.chunkup or base.restriction.sketch.chunkup
    if fixed:
        sends = fixed * _sends_per_piece(base)
        GIVEN_SENDS.check(sends, f"chunkup {fixed}: the schedule")
        return [fixed]
    by_sends = options.max_sends // _sends_per_piece(base)
    by_size = int(base.piece_bytes // MIN_PIECE_BYTES)
    k_max = max(1, min(MAX_CHUNKUP, by_sends, by_size))
    k = 1
    while k * 2 <= k_max:
        k *= 2
    out = [1]
    while k > 1:
        out.append(k)
        k //= 2
    return out


def check_chunkup(
    restriction: Restriction, name: str, size_bytes: float, root: int | None, options: Options
) -> None:
    """Refuse, before any solving, a chunkup the user chose that makes too large a schedule."""
    n = restriction.topology.num_ranks
    base = build_instance(restriction, make_collective(name, n, 1, root), size_bytes, options.params)
    chunkup_candidates(base, options)


def _order(inst: Instance, routing: Routing, deadline: Deadline) -> tuple[Schedule, str]:
    """The best schedule over the ordering rules. Past the ``deadline`` the best of the rules done
    so far is kept; with none done, :class:`synth.deadline.OutOfTime` propagates."""
    n = inst.topology.num_ranks
    levels = tuple(sorted({size for _, size in inst.restriction.sketch.symmetry_offsets} | {n}))
    sources = {c: d.source for d in inst.demands for c in d.pieces}
    index = {c: i for d in inst.demands for i, c in enumerate(d.pieces)}
    best: tuple[Schedule, str] | None = None
    for rule in PRIORITIES:
        try:
            sched = list_schedule(
                inst.topology, routing.trees, inst.piece_bytes, sources, index, levels, rule, deadline, inst.params
            )
        except OutOfTime:
            if best is None:
                raise
            break
        if best is None or sched.makespan_us < best[0].makespan_us - 1e-9:
            best = (sched, rule)
    if best is None:  # PRIORITIES is never empty
        raise ValueError("no ordering rule")
    return best


def _route_and_order(
    search: _Search, inst: Instance, backend: Backend, options: Options, deadline: Deadline
) -> _Tried | None:
    """Stages 1 and 2 for one chunkup; None when the deadline cut its ordering (the first chunkup
    must give a schedule, later ones may be cut)."""
    k = inst.collective.chunks_per_rank
    search.say(f"routing k={k}: {len(inst.reps)} of {len(inst.demands)} demands after symmetry")
    share = options.stage_time_limit_s * (1 if len(search.tried) < 2 else EXPLORE_SHARE)
    routing = route(inst, backend, _solve_limit(deadline, share), options.threads)
    seconds = routing.build_s + routing.solve_s
    search.report(
        StageReport(
            "routing", k, routing.model_size, routing.status.value, seconds, routing.objective_us, routing.gap
        )
    )
    t0 = time.perf_counter()
    try:
        sched, rule = _order(inst, routing, deadline if search.tried else NO_DEADLINE)
    except OutOfTime:
        search.timed_out = True
        search.say(f"ordering k={k}: stopped at the time limit; chunkup {k} dropped")
        return None
    detail = f"{len(sched.sends)} sends, rule {rule}"
    search.report(StageReport("ordering", k, detail, "done", time.perf_counter() - t0, sched.makespan_us))
    return _Tried(k, inst, routing, sched, rule)


def _enough(tried: list[_Tried], bound: float) -> bool:
    """Whether the chunkups tried make further ones pointless (module docstring)."""
    last = tried[-1]
    fastest = min(t.schedule.makespan_us for t in tried)
    if fastest <= bound * (1 + TOLERANCE):
        return True  # at the lower bound: no chunkup can do better
    if last.chunkup > 1 and last.schedule.makespan_us > fastest * (1 + TOLERANCE):
        return True  # smaller chunkups from here on pipeline less
    # the most pieces barely beat one: latency, not bandwidth, sets the time
    return len(tried) == 2 and last.schedule.makespan_us > tried[0].schedule.makespan_us * (1 - PIPELINE_GAIN)


def _model_bound(base: Instance, size_bytes: float, params: Params) -> float:
    """The lower bound under ``params`` (line rate scaled to the model's rate; sends cost at least
    nothing more): what no chunkup can beat, so a schedule this close ends the search."""
    topo, coll = base.topology, base.collective
    return max(latency_time_us(topo, coll), bandwidth_time_us(topo, coll, size_bytes) / params.rate_fraction)


def _search_chunkups(
    search: _Search,
    base: Instance,
    size_bytes: float,
    backend: Backend,
    options: Options,
    deadline: Deadline,
) -> None:
    """Route and order each candidate chunkup until one of the stopping rules holds."""
    bound = _model_bound(base, size_bytes, options.params)
    name, n, root = base.collective.name, base.collective.num_ranks, base.collective.root
    for k in chunkup_candidates(base, options):
        if search.tried and deadline.expired():
            search.timed_out = True
            done = ", ".join(str(t.chunkup) for t in search.tried)
            search.say(f"time limit reached: keeping the best of chunkups {done}")
            return
        inst = (
            base
            if k == 1
            else build_instance(base.restriction, make_collective(name, n, k, root), size_bytes, options.params)
        )
        tried = _route_and_order(search, inst, backend, options, deadline)
        if tried is None:
            return
        search.tried.append(tried)
        if tried.routing.interrupted:
            search.interrupted = True
            return
        if _enough(search.tried, bound):
            return


def _best(tried: list[_Tried]) -> _Tried:
    """The smallest chunkup within :data:`TOLERANCE` of the fastest (fewer sends, same speed)."""
    fastest = min(t.schedule.makespan_us for t in tried)
    return min(
        (t for t in tried if t.schedule.makespan_us <= fastest * (1 + TOLERANCE)), key=lambda t: t.chunkup
    )


def _time(
    search: _Search, best: _Tried, backend: Backend, options: Options, deadline: Deadline
) -> Timing | None:
    """Stage 3 on the chosen chunkup; None when interrupted before or skipped at the time limit."""
    if search.interrupted:
        return None
    if deadline.expired():
        search.timed_out = True
        search.say(f"scheduling k={best.chunkup}: skipped at the time limit; the ordering's times are kept")
        return None
    try:
        timing = schedule_times(
            best.inst.topology,
            best.schedule,
            best.inst.piece_bytes,
            backend,
            _solve_limit(deadline, options.stage_time_limit_s),
            options.threads,
            options.params,
        )
    except KeyboardInterrupt:
        search.interrupted = True
        return None
    if timing.interrupted:  # the solver caught Ctrl-C and kept its best
        search.interrupted = True
    report = StageReport(
        "scheduling",
        best.chunkup,
        timing.model_size,
        timing.status.value,
        timing.solve_s,
        timing.makespan_us,
        timing.gap,
    )
    search.report(report, f", {len(timing.merged)} merged sends" if timing.merged else "")
    return timing


def _kept(search: _Search, best: _Tried, timing: Timing | None) -> Timing | None:
    """Stage 3's times where they beat the ordering's, else None (the ordering's are kept): a
    solve cut by its time limit can hand back a feasible schedule slower than its start (dgx-h100x2
    allgather, calibrated: 2,802 us against the ordering's 2,540 us)."""
    if timing is None or timing.makespan_us <= best.schedule.makespan_us + 1e-9:
        return timing
    search.say(
        f"scheduling k={best.chunkup}: {timing.makespan_us:.2f} us is slower than the ordering's "
        f"{best.schedule.makespan_us:.2f} us; the ordering's times are kept"
    )
    search.slower_timing = True
    return None


def _emit(
    search: _Search, best: _Tried, timing: Timing | None, backend: Backend, size_bytes: float
) -> Algorithm:
    """The chosen schedule as a verified algorithm, sends in start order, with its provenance."""
    sched, routing = best.schedule, best.routing
    starts = timing.start_us if timing is not None else tuple(s.start_us for s in sched.sends)
    order = sorted(range(len(sched.sends)), key=lambda i: (starts[i], sched.sends[i].rank))
    new = {old: pos for pos, old in enumerate(order)}
    sends = [
        (s.chunk, s.src, s.dst, new[s.parent] if s.parent >= 0 else -1, starts[i])
        for i, s in ((i, sched.sends[i]) for i in order)
    ]
    optimal = (
        routing.status is Status.OPTIMAL
        and not search.slower_timing
        and (timing is None or timing.status is Status.OPTIMAL)
    )
    makespan = sched.makespan_us if timing is None else timing.makespan_us
    params: list[tuple[str, str | int | float | bool | None]] = [
        ("sketch", best.inst.restriction.sketch.name),
        ("chunkup", best.chunkup),
        ("size_bytes", int(size_bytes)),
        ("ordering", best.rule),
        ("routing_status", routing.status.value),
        ("model_makespan_us", round(makespan, 3)),
    ]
    if routing.gap:
        params.append(("routing_gap", round(routing.gap, 6)))
    model = best.inst.params
    if model != IDEAL:  # the compiler times the schedule's arrivals in the model it was made in
        params += [("timing_model", model.model), ("protocol", model.protocol), ("send_us", model.send_us)]
    if timing is not None and timing.merged:
        params.append(("merged_sends", sum(len(r) for r in timing.merged)))
    if search.interrupted:
        params.append(("interrupted", True))
    # no solve time in the provenance: the file must be the same bytes for the same inputs
    prov = Provenance(method="milp", solver=backend.name, optimal=optimal, params=tuple(sorted(params)))
    algo = to_algorithm(best.inst.collective, best.inst.topology, sends, prov)
    algo.verify(best.inst.topology)
    return algo


def run_stages(
    restriction: Restriction,
    name: str,
    size_bytes: float,
    root: int | None,
    backend: Backend,
    options: Options,
    log: Log,
    label: str = "",
    deadline: Deadline = NO_DEADLINE,
) -> Outcome:
    """Stages 1-3 for a non-combining collective; the algorithm is verified. Ctrl-C and the
    ``deadline`` keep the best candidate so far (:class:`KeyboardInterrupt` propagates when there
    is none). The outcome is optimal when every stage's solve was."""
    began = time.perf_counter()
    collective = make_collective(name, restriction.num_ranks, 1, root)
    base = build_instance(restriction, collective, size_bytes, options.params)
    search = _Search(log, label)
    try:
        _search_chunkups(search, base, size_bytes, backend, options, deadline)
    except KeyboardInterrupt:
        search.interrupted = True
    if not search.tried:
        raise KeyboardInterrupt
    best = _best(search.tried)
    timing = _kept(search, best, _time(search, best, backend, options, deadline))
    algo = _emit(search, best, timing, backend, size_bytes)
    return Outcome(
        Status.OPTIMAL if algo.provenance.optimal else Status.FEASIBLE,
        Question(name),
        time.perf_counter() - began,
        algo,
        interrupted=search.interrupted,
        timed_out=search.timed_out,
        makespan_us=best.schedule.makespan_us if timing is None else timing.makespan_us,
        chunkup=best.chunkup,
        reports=tuple(search.reports),
    )
