"""MILP synthesis of a named collective from a sketch (TACCL style), every result verified.

allgather, alltoall and broadcast go through the three stages directly. reducescatter (reduce) is
the inverted allgather (broadcast) synthesized on the reversed topology with the sketch turned
around; allreduce is that reducescatter followed by the allgather, at the allgather's chunkup
(both the reductions of :mod:`synth.reductions`).

>>> from topologies import load
>>> from sketches import Sketch
>>> result = synthesize(load("ring:4"), "allgather", Sketch("ring"), size_bytes=1 << 20)
>>> result.algorithm.collective.name, result.algorithm.provenance.method
('allgather', 'milp')
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sketches.io import load_sketch
from sketches.model import Sketch
from sketches.restrict import Restriction, restrict
from synth.algorithm import Algorithm
from synth.collectives import COLLECTIVES, make_collective
from synth.cost import chunk_bytes
from synth.deadline import Deadline
from synth.errors import InfeasibleError
from synth.milp.pipeline import Log, Options, check_chunkup, run_stages
from synth.milp.solvers import Backend, get_backend
from synth.outcome import Outcome, Question, Status
from synth.reductions import DUAL, REDUCESCATTER_ALLGATHER, Problem, Solution
from synth.timing import Params
from topologies.model import Topology

__all__ = ["SUPPORTED", "synthesize"]

SUPPORTED = ("allgather", "alltoall", "broadcast", "reducescatter", "reduce", "allreduce")


def _finish_us(
    algo: Algorithm, topology: Topology, piece_bytes: float, params: Params
) -> dict[tuple[int, int, int], float]:
    """When each send of a timed schedule on ``topology`` ends (its start, its link's alpha, the
    piece's transfer): what running it backwards in time needs (:class:`synth.reductions.Dual`)."""
    logical = topology.logical()
    out: dict[tuple[int, int, int], float] = {}
    for st in algo.steps:
        for s in st.sends:
            link = logical.links[(s.src, s.dst)]
            out[(s.chunk, s.src, s.dst)] = (s.start_us or 0.0) + params.delay_us(link, piece_bytes)
    return out


def _solution(
    out: Outcome, topology: Topology | None = None, size: float = 0.0, params: Params | None = None
) -> Solution:
    """A MILP outcome as a timed :class:`~synth.reductions.Solution` (with when each send ends,
    on ``topology`` at ``size``, where it is to be run backwards)."""
    algo = out.algorithm
    if algo is None:  # run_stages always returns one; keeps type checkers honest
        raise InfeasibleError(f"no {out.question.collective} found")
    if topology is None or params is None:
        return Solution(algo, out.makespan_us)
    finish = _finish_us(algo, topology, chunk_bytes(algo.collective, size), params)
    return Solution(algo, out.makespan_us, finish)


def _restriction(problem: Problem) -> Restriction:
    """The sketch's restricted instance, which every MILP problem carries (and reductions keep)."""
    if problem.restriction is None:
        raise InfeasibleError(f"MILP synthesis of {problem.collective.name} needs a sketch")
    return problem.restriction


@dataclass(frozen=True)
class _Run:
    """What every part of one synthesis shares."""

    size: float
    backend: Backend
    options: Options
    log: Log

    def stages(self, problem: Problem, label: str, deadline: Deadline) -> Outcome:
        c = problem.collective
        return run_stages(
            _restriction(problem),
            c.name,
            self.size,
            c.root,
            self.backend,
            self.options,
            self.log,
            label,
            deadline,
        )


def _via_dual(run: _Run, problem: Problem, deadline: Deadline) -> Outcome:
    """The dual synthesized on the reversed topology (:data:`synth.reductions.DUAL`), inverted
    in steps and in time; verified on the original."""
    reduced = DUAL.apply(problem)
    (sub,) = reduced.subproblems
    out = run.stages(sub, f"{problem.collective.name} via {sub.collective.name}: ", deadline)
    primal = reduced.invert([_solution(out, sub.topology, run.size, run.options.params)])
    return replace(
        out, question=Question(problem.collective.name), algorithm=primal.algorithm, via=reduced.via
    )


def _allreduce(run: _Run, problem: Problem, deadline: Deadline) -> Outcome:
    """The allgather first (half the time left), then the reducescatter at its chunkup
    (:data:`synth.reductions.REDUCESCATTER_ALLGATHER`)."""
    reduced = REDUCESCATTER_ALLGATHER.apply(problem)
    rs_problem, ag_problem = reduced.subproblems
    half = deadline.sooner((deadline.left() or 0.0) / 2) if deadline.end is not None else deadline
    ag = run.stages(ag_problem, "allgather: ", half)
    if ag.interrupted:  # an allgather alone is no allreduce: nothing verified to keep
        raise KeyboardInterrupt
    rs_run = replace(run, options=replace(run.options, chunkup=ag.chunkup))
    rs = _via_dual(rs_run, rs_problem, deadline)
    whole = reduced.invert([_solution(rs), _solution(ag)])
    algo = whole.algorithm.with_provenance(params=ag.algorithm.provenance.params)
    return Outcome(
        Status.FEASIBLE,
        Question("allreduce"),
        ag.seconds + rs.seconds,
        algo,
        via=reduced.via,
        interrupted=rs.interrupted,
        timed_out=ag.timed_out or rs.timed_out,
        makespan_us=whole.makespan_us,
        chunkup=ag.chunkup,
        reports=rs.reports + ag.reports,
    )


def _check_chunkup(problem: Problem, size: float, options: Options) -> None:
    """The chunkup limit, checked on what is routed first: allreduce's allgather, a combining
    collective's dual on the reversed topology."""
    if problem.collective.name == "allreduce":
        problem = REDUCESCATTER_ALLGATHER.apply(problem).subproblems[1]
    if problem.collective.combining:
        problem = DUAL.apply(problem).subproblems[0]
    c = problem.collective
    check_chunkup(_restriction(problem), c.name, size, c.root, options)


def _name(collective: str) -> str:
    name = collective.lower()
    if name not in COLLECTIVES:
        raise InfeasibleError(f"unknown collective {collective!r}: expected one of {', '.join(COLLECTIVES)}")
    if name not in SUPPORTED:
        raise InfeasibleError(f"MILP synthesis does not handle {name}; it handles {', '.join(SUPPORTED)}")
    return name


def synthesize(
    topology: Topology,
    collective: str,
    sketch: Sketch | str,
    size_bytes: float | None = None,
    root: int | None = None,
    options: Options | None = None,
    log: Log | None = None,
) -> Outcome:
    """A verified algorithm for ``collective`` on ``topology`` guided by ``sketch`` at ``size_bytes``
    (default: the sketch's target size), with its modeled time, chunkup and stage reports.
    ``log`` receives one line per stage (model size, status, value, time). ``options.time_limit_s``
    bounds the whole run (an allreduce's allgather half gets half of it),
    ``options.stage_time_limit_s`` each solve. Ctrl-C keeps the best verified result found so far
    (``interrupted``); an allreduce interrupted before its allgather half is done has none, and
    :class:`KeyboardInterrupt` propagates."""
    options = options or Options()
    emit: Log = log or (lambda _: None)
    sketch = load_sketch(sketch)
    name = _name(collective)
    size = size_bytes if size_bytes is not None else sketch.target_size_bytes
    if size is None:
        raise InfeasibleError(f"{sketch.where}: no size given (--size) and the sketch has no target_size")
    restriction = restrict(sketch, topology)
    run = _Run(size, get_backend(options.solver), options, emit)
    n = topology.num_ranks  # the solver chooses the chunks (chunkup): one per rank's piece here
    problem = Problem(topology, make_collective(name, n, n if name == "allreduce" else 1, root), restriction)
    if options.chunkup or sketch.chunkup:
        _check_chunkup(problem, size, options)
    total = "none" if options.time_limit_s is None else f"{options.time_limit_s:g} s"
    emit(f"time limit {total} in all, {options.stage_time_limit_s:g} s per stage solve")
    deadline = Deadline.after(options.time_limit_s)
    if problem.collective.name == "allreduce":
        return _allreduce(run, problem, deadline)
    if problem.collective.combining:
        return _via_dual(run, problem, deadline)
    return run.stages(problem, "", deadline)
