"""MILP synthesis of a named collective from a sketch (TACCL style), every result verified.

allgather, alltoall and broadcast go through the three stages directly. reducescatter (reduce) is
the inverted allgather (broadcast) synthesized on the reversed topology with the sketch turned
around; allreduce is that reducescatter followed by the allgather, at the allgather's chunkup.

>>> from topologies import load
>>> from sketches import Sketch
>>> result = synthesize(load("ring:4"), "allgather", Sketch("ring"), size_bytes=1 << 20)
>>> result.algorithm.collective.name, result.algorithm.provenance.method
('allgather', 'milp')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sketches.io import load_sketch
from sketches.model import Sketch
from sketches.restrict import Restriction, restrict
from synth.algorithm import Algorithm, Step, compose, invert
from synth.collectives import COLLECTIVES, make_collective
from synth.cost import chunk_bytes
from synth.deadline import Deadline
from synth.errors import InfeasibleError
from synth.milp.pipeline import Log, Options, Outcome, StageReport, check_chunkup, run_stages
from synth.milp.solvers import Backend, get_backend
from synth.timing import DEFAULT
from topologies.model import Topology

__all__ = ["SUPPORTED", "MilpResult", "synthesize"]

SUPPORTED = ("allgather", "alltoall", "broadcast", "reducescatter", "reduce", "allreduce")


@dataclass(frozen=True)
class MilpResult:
    """A verified algorithm and how it was found."""

    algorithm: Algorithm
    makespan_us: float
    """The schedule's time in the simulator's model (sum of the parts for allreduce)."""
    chunkup: int
    reports: tuple[StageReport, ...]
    interrupted: bool
    seconds: float
    """Wall time of the synthesis (kept out of the algorithm file, which is deterministic)."""
    timed_out: bool = False
    """The time limit cut the search short; the algorithm is the best found by then."""


def _makespan(out: Outcome) -> float:
    return out.makespan_us if out.timing is None else out.timing.makespan_us


def _time_reversed(
    primal: Algorithm, dual: Algorithm, topology: Topology, piece_bytes: float, makespan: float
) -> Algorithm:
    """Give the inverted schedule start times: a dual send arriving at ``a`` starts at ``T - a``
    once turned around; within each step, sends are listed by those times."""
    logical = topology.logical()
    starts: dict[tuple[int, int, int], float] = {}
    for st in dual.steps:
        for s in st.sends:
            link = logical.links[(s.dst, s.src)]
            starts[(s.chunk, s.dst, s.src)] = (s.start_us or 0.0) + DEFAULT.delay_us(link, piece_bytes)

    steps = []
    for st in primal.steps:
        timed = [replace(s, start_us=max(0.0, makespan - starts[(s.chunk, s.src, s.dst)])) for s in st.sends]
        steps.append(Step(st.rounds, tuple(sorted(timed, key=lambda s: (s.start_us, s)))))
    return replace(primal, steps=tuple(steps))


def _via_dual(
    restriction: Restriction,
    name: str,
    size: float,
    root: int | None,
    backend: Backend,
    options: Options,
    log: Log,
    deadline: Deadline,
) -> tuple[Algorithm, Outcome]:
    """``name``'s dual synthesized on the reversed topology, inverted; verified on the original."""
    dual_name = make_collective(name, restriction.num_ranks, 1, root).dual().name
    label = f"{name} via {dual_name}: "
    out = run_stages(restriction.reverse(), dual_name, size, root, backend, options, log, label, deadline)
    dual = out.algorithm
    if dual is None:  # run_stages always returns one; keeps type checkers honest
        raise InfeasibleError(f"no {dual_name} found")
    piece_bytes = chunk_bytes(dual.collective, size)
    primal = invert(dual, make_collective(name, restriction.num_ranks, out.chunkup, root))
    primal = _time_reversed(primal, dual, restriction.topology.reverse(), piece_bytes, _makespan(out))
    primal.verify(restriction.topology)
    return primal, out


def _check_chunkup(
    restriction: Restriction, name: str, size: float, root: int | None, options: Options
) -> None:
    """The chunkup limit, checked on what is routed first: allreduce's allgather, a combining
    collective's dual on the reversed topology."""
    first = "allgather" if name == "allreduce" else name
    if first in ("reducescatter", "reduce"):
        first = make_collective(first, restriction.num_ranks, 1, root).dual().name
        restriction = restriction.reverse()
    check_chunkup(restriction, first, size, root, options)


def _shifted(algo: Algorithm, shift: float) -> Algorithm:
    steps = tuple(
        Step(st.rounds, tuple(replace(s, start_us=(s.start_us or 0.0) + shift) for s in st.sends))
        for st in algo.steps
    )
    return replace(algo, steps=steps)


def synthesize(
    topology: Topology,
    collective: str,
    sketch: Sketch | str,
    size_bytes: float | None = None,
    root: int | None = None,
    options: Options | None = None,
    log: Log | None = None,
) -> MilpResult:
    """A verified algorithm for ``collective`` on ``topology`` guided by ``sketch`` at ``size_bytes``
    (default: the sketch's target size). ``log`` receives one line per stage (model size, status,
    value, time). ``options.time_limit_s`` bounds the whole run (an allreduce's allgather half gets
    half of it), ``options.stage_time_limit_s`` each solve. Ctrl-C keeps the best verified result
    found so far (``interrupted``); an allreduce interrupted before its allgather half is done has
    none, and :class:`KeyboardInterrupt` propagates."""
    options = options or Options()
    emit: Callable[[str], None] = log or (lambda _: None)
    sketch = load_sketch(sketch)
    name = collective.lower()
    if name not in COLLECTIVES:
        raise InfeasibleError(f"unknown collective {collective!r}: expected one of {', '.join(COLLECTIVES)}")
    if name not in SUPPORTED:
        raise InfeasibleError(f"MILP synthesis does not handle {name}; it handles {', '.join(SUPPORTED)}")
    size = size_bytes if size_bytes is not None else sketch.target_size_bytes
    if size is None:
        raise InfeasibleError(f"{sketch.where}: no size given (--size) and the sketch has no target_size")
    restriction = restrict(sketch, topology)
    backend = get_backend(options.solver)
    if options.chunkup or sketch.chunkup:
        _check_chunkup(restriction, name, size, root, options)
    total = "none" if options.time_limit_s is None else f"{options.time_limit_s:g} s"
    emit(f"time limit {total} in all, {options.stage_time_limit_s:g} s per stage solve")
    deadline = Deadline.after(options.time_limit_s)
    if name in ("allgather", "alltoall", "broadcast"):
        out = run_stages(restriction, name, size, root, backend, options, emit, deadline=deadline)
        if out.algorithm is None:
            raise InfeasibleError(f"no {name} found")
        return MilpResult(
            out.algorithm,
            _makespan(out),
            out.chunkup,
            tuple(out.reports),
            out.interrupted,
            out.seconds,
            out.timed_out,
        )
    if name in ("reducescatter", "reduce"):
        algo, out = _via_dual(restriction, name, size, root, backend, options, emit, deadline)
        return MilpResult(
            algo, _makespan(out), out.chunkup, tuple(out.reports), out.interrupted, out.seconds, out.timed_out
        )
    half = deadline.sooner((deadline.left() or 0.0) / 2) if deadline.end is not None else deadline
    ag = run_stages(restriction, "allgather", size, None, backend, options, emit, "allgather: ", half)
    if ag.algorithm is None:
        raise InfeasibleError("no allgather found")
    if ag.interrupted:  # an allgather alone is no allreduce: nothing verified to keep
        raise KeyboardInterrupt
    rs, rs_out = _via_dual(
        restriction,
        "reducescatter",
        size,
        None,
        backend,
        replace(options, chunkup=ag.chunkup),
        emit,
        deadline,
    )
    n = topology.num_ranks
    first = _makespan(rs_out)
    algo = compose(
        rs,
        _shifted(ag.algorithm, first),
        make_collective("allreduce", n, n * ag.chunkup),
        "reducescatter + allgather",
    )
    algo = replace(algo, provenance=replace(algo.provenance, params=ag.algorithm.provenance.params))
    algo.verify(topology)
    reports = tuple(rs_out.reports) + tuple(ag.reports)
    return MilpResult(
        algo,
        first + _makespan(ag),
        ag.chunkup,
        reports,
        rs_out.interrupted,
        ag.seconds + rs_out.seconds,
        ag.timed_out or rs_out.timed_out,
    )
