"""The latency-bandwidth trade-off: algorithms no other beats in both steps S and rounds per chunk R/C.

The walk (SCCL's Pareto synthesis): for C = 1, 2, ... chunks per rank, rounds R from
``ceil(C * rounds-per-chunk bound)`` upward, and for each R the steps S from the steps lower bound
up to R; the first satisfiable instance of a C ends that C. An instance is skipped when an
algorithm already found is at least as good in both S and R/C (it could only add a dominated
point), so the walk stops raising R once the fewest-steps point is matched. It ends when an
algorithm meets the rounds-per-chunk bound ("bandwidth optimal") or after ``max_chunks``. Both
bounds come from :mod:`synth.bounds` (HiGHS); z3 only answers instances. Each C's rounds loop is
finite: the shortest-path schedule in the fewest steps (:mod:`synth.smt.witness`) is satisfiable.

Allreduce has no walk of its own here: its front is built from the reducescatter and allgather
fronts, every pair composed (both refined to a common chunk count).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from common.limits import Limit, LimitError
from synth.algorithm import Algorithm
from synth.bounds import rounds_per_chunk_bound, steps_lower_bound
from synth.collectives import make_collective
from synth.deadline import Deadline
from synth.defaults import PARETO_MAX_CHUNKS
from synth.errors import InfeasibleError
from synth.outcome import Outcome
from synth.reductions import REDUCESCATTER_ALLGATHER, Problem, Solution
from synth.smt.options import DEFAULT_OPTIONS, SmtOptions
from synth.smt.synthesizer import (
    DEFAULT_INSTANCE_TIME_LIMIT_S,
    DEFAULT_TIME_LIMIT_S,
    Synthesizer,
    check_ranks,
    check_size,
)
from synth.smt.witness import shortest_path_schedule
from topologies.model import Topology

__all__ = ["DEFAULT_MAX_CHUNKS", "MAX_CHUNKS", "Front", "pareto_front", "prune_dominated"]

DEFAULT_MAX_CHUNKS = PARETO_MAX_CHUNKS
MAX_CHUNKS = Limit("chunks per rank", 64, "XCCL_MAX_PARETO_CHUNKS")
"""Most chunks per rank a walk may go to (8 times the default; every instance grows with C, and
the walk plans each C's rounds before it starts)."""

STOPS = ("bandwidth optimal", "max chunks", "interrupted", "time limit", "size limit")


@dataclass(frozen=True)
class Front:
    collective: str
    topology: str
    algorithms: tuple[Algorithm, ...]
    """The Pareto-optimal algorithms found, by increasing steps."""
    found: tuple[Algorithm, ...]
    """Every algorithm found, in the order found (dominated ones included)."""
    outcomes: tuple[Outcome, ...]
    """Every instance tried, in order."""
    steps_bound: int
    rounds_per_chunk_bound: Fraction
    max_chunks: int
    stop: str
    """Why the walk ended: one of :data:`STOPS`."""
    time_limit_s: float | None = None
    """The walk's wall-time limit (``None``: none)."""
    instance_time_limit_s: float | None = None
    """Each instance's limit within the walk."""
    note: str = ""
    """With stop ``size limit``: the instance that was too large, and the limit."""

    @property
    def complete(self) -> bool:
        """No instance timed out (an unknown one might have added a point)."""
        return all(o.status.answered for o in self.outcomes)

    def message(self) -> str:
        points = ", ".join(f"(S={a.num_steps}, R={a.rounds}, C={a.chunks})" for a in self.algorithms)
        why = {
            "bandwidth optimal": "bandwidth optimal: an algorithm meets the rounds-per-chunk bound",
            "max chunks": f"reached the limit of {self.max_chunks} chunks per rank",
            "interrupted": "interrupted",
            "time limit": f"stopped at the time limit of {_seconds(self.time_limit_s)}",
            "size limit": f"stopped: {self.note}",
        }[self.stop]
        note = "" if self.complete else "; some instances timed out, the front may miss points"
        return f"{len(self.algorithms)} Pareto-optimal algorithm(s): {points or 'none'} ({why}{note})"


def _seconds(limit: float | None) -> str:
    return "none" if limit is None else f"{limit:g} s"


def prune_dominated(algorithms: list[Algorithm]) -> tuple[Algorithm, ...]:
    """Keep the algorithms no other beats in both steps and rounds per chunk (first of equals)."""
    keep: list[Algorithm] = []
    for i, a in enumerate(algorithms):
        point = (a.num_steps, a.rounds_per_chunk)
        beaten = any(
            b.num_steps <= point[0]
            and b.rounds_per_chunk <= point[1]
            and ((b.num_steps, b.rounds_per_chunk) != point or j < i)
            for j, b in enumerate(algorithms)
            if j != i
        )
        if not beaten:
            keep.append(a)
    return tuple(sorted(keep, key=lambda a: (a.num_steps, a.rounds_per_chunk)))


def pareto_front(
    topology: Topology,
    collective_name: str,
    root: int | None = None,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    max_steps: int | None = None,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
    options: SmtOptions = DEFAULT_OPTIONS,
    on_start: Callable[[str], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    instance_time_limit_s: float | None = DEFAULT_INSTANCE_TIME_LIMIT_S,
) -> Front:
    """Walk the front (module docstring). The walk ends after ``time_limit_s`` seconds of wall time
    (``None``: no limit) and gives each instance at most ``instance_time_limit_s``; Ctrl-C (or a
    ``KeyboardInterrupt`` from a callback) ends it too. Either way what was found is kept.
    ``on_start`` gets ``allgather S=2 R=3 C=2 (instance 5 of at most 17)``."""
    deadline = Deadline.after(time_limit_s)
    check_ranks(topology)
    MAX_CHUNKS.check(max_chunks, "max chunks")
    if max_chunks < 1:
        raise InfeasibleError(f"max chunks: expected >= 1, got {max_chunks}")
    name = make_collective(collective_name, topology.num_ranks, 1, root).name
    parts = ("reducescatter", "allgather") if name == "allreduce" else (name,)
    walks = [_Walk(topology, part, root, max_chunks, max_steps, options) for part in parts]
    limits = (time_limit_s, instance_time_limit_s)
    tried = 0
    stop = "max chunks"
    for i, walk in enumerate(walks):
        later = sum(w.at_most(None) for w in walks[i + 1 :])
        stop = walk.run(deadline, instance_time_limit_s, tried, later, on_start, on_outcome)
        tried += len(walk.outcomes)
        if stop not in ("bandwidth optimal", "max chunks"):
            break
    if name == "allreduce" and stop in ("bandwidth optimal", "max chunks"):
        stops = {w.stop for w in walks}
        stop = "bandwidth optimal" if stops == {"bandwidth optimal"} else "max chunks"
    return _front(topology, name, walks, max_chunks, stop, limits)


class _Walk:
    """One collective's walk (module docstring): the instances in order, and how many are left."""

    def __init__(self, topology, name, root, max_chunks, max_steps, options) -> None:
        self.topology = topology
        self.synth = Synthesizer(topology, name, root, options)
        self.name = name
        one = self.synth.collective(1)
        self.lower = steps_lower_bound(topology, one)
        self.rho = rounds_per_chunk_bound(topology, one)
        if max_steps is not None and max_steps < self.lower:
            raise InfeasibleError(f"max steps: {max_steps} is below the steps lower bound {self.lower}")
        self.max_chunks = max_chunks
        self.max_steps = max_steps
        self.caps: dict[int, int] = {}
        self._cap(1)
        self.found: list[Algorithm] = []
        self.outcomes: list[Outcome] = []
        self.stop = "max chunks"
        self.note = ""
        self._front: tuple[Algorithm, ...] = ()
        self._front_of = 0
        self._later = 0
        self._later_of: tuple[int, int] | None = None

    def _cap(self, chunks: int) -> int:
        """C's largest R: an R with a known algorithm at the fewest steps, so the rounds loop ends.
        The 1-chunk shortest-path schedule with each chunk split C ways has ``C * cap(1)``; the
        C-chunk one, built when the walk reaches C, may have fewer. Before that, ``C * cap(1)``
        bounds what the walk may try."""
        if chunks not in self.caps:
            witness = shortest_path_schedule(self.topology, self.synth.collective(chunks), False)
            self.caps[chunks] = min(witness.rounds, chunks * self.caps[1]) if self.caps else witness.rounds
        return self.caps[chunks]

    def _first_rounds(self, chunks: int) -> int:
        return max(math.ceil(self.rho * chunks), self.lower)

    def _top(self, rounds: int) -> int:
        return rounds if self.max_steps is None else min(rounds, self.max_steps)

    def _fewest_steps_at(self, rounds: int, chunks: int) -> float:
        """Fewest steps of an algorithm found with at most ``rounds / chunks`` rounds per chunk (or inf)."""
        if self._front_of != len(self.found):
            self._front = prune_dominated(self.found)  # by increasing steps: the first that fits is it
            self._front_of = len(self.found)
        fits = (a.num_steps for a in self._front if a.rounds * chunks <= rounds * a.chunks)
        return next(fits, math.inf)

    def _row(self, rounds: int, chunks: int, after: int) -> int:
        """Instances (S, rounds, chunks) with S > ``after`` that no algorithm found dominates."""
        first = max(self.lower, after + 1)
        last = min(self._top(rounds), self._fewest_steps_at(rounds, chunks) - 1)
        return max(0, int(last) - first + 1)

    def _rows(self, chunks: int, first_rounds: int) -> int:
        cap = self.caps.get(chunks, chunks * self.caps[1])
        return sum(self._row(r, chunks, 0) for r in range(first_rounds, cap + 1))

    def at_most(self, position: tuple[int, int, int] | None) -> int:
        """How many instances may still be tried after ``position`` (S, R, C), or from the start;
        an upper bound (an algorithm found later only removes instances)."""
        if position is None:
            return sum(self._rows(c, self._first_rounds(c)) for c in range(1, self.max_chunks + 1))
        steps, rounds, chunks = position
        if self._later_of != (len(self.found), chunks):  # whole later Cs change only with a find
            self._later = sum(
                self._rows(c, self._first_rounds(c)) for c in range(chunks + 1, self.max_chunks + 1)
            )
            self._later_of = (len(self.found), chunks)
        return self._row(rounds, chunks, steps) + self._rows(chunks, rounds + 1) + self._later

    def _instances(self):
        """(S, R, C) in the walk's order, skipping what an algorithm found dominates."""
        for chunks in range(1, self.max_chunks + 1):
            rounds = self._first_rounds(chunks)
            found = len(self.found)
            while rounds <= self._cap(chunks) and len(self.found) == found:
                if self._fewest_steps_at(rounds, chunks) <= self.lower:
                    break  # an algorithm found beats every instance of this C from here on
                for steps in range(self.lower, self._top(rounds) + 1):
                    if steps < self._fewest_steps_at(rounds, chunks):
                        yield steps, rounds, chunks
                        if len(self.found) > found:
                            break
                rounds += 1
            if self.found and self.found[-1].rounds_per_chunk <= self.rho:
                self.stop = "bandwidth optimal"
                return

    def run(self, deadline, instance_limit, tried, later, on_start, on_outcome) -> str:
        """Try the instances until the walk ends; returns why it ended (``Front.stop``)."""
        try:
            for steps, rounds, chunks in self._instances():
                if deadline.expired():
                    self.stop = "time limit"
                    break
                collective = self.synth.collective(chunks)
                try:
                    check_size(self.topology, collective, steps, rounds)
                except LimitError as exc:
                    self.stop, self.note = "size limit", str(exc)
                    break
                if on_start is not None:
                    index = tried + len(self.outcomes) + 1
                    total = index + self.at_most((steps, rounds, chunks)) + later
                    on_start(
                        f"{self.name} S={steps} R={rounds} C={chunks} (instance {index} of at most {total})"
                    )
                out = self.synth.solve(steps, rounds, chunks, deadline.limit(instance_limit))
                self.outcomes.append(out)
                if out.algorithm is not None:
                    self.found.append(out.algorithm)
                if on_outcome is not None:
                    on_outcome(out)
        except KeyboardInterrupt:
            self.stop = "interrupted"
        return self.stop


def _front(topology, name, walks, max_chunks, stop, limits) -> Front:
    """The front of one walk, or for allreduce every reducescatter algorithm followed by every
    allgather one (both refined to a common chunk count)."""
    note = next((w.note for w in walks if w.note), "")
    outcomes = tuple(o for w in walks for o in w.outcomes)
    if name != "allreduce":
        walk = walks[0]
        found = walk.found
        lower, rho = walk.lower, walk.rho
    else:
        found = _compositions(topology, walks)  # of what both walks found, however they ended
        one = make_collective("allreduce", topology.num_ranks, 1)
        lower, rho = steps_lower_bound(topology, one), rounds_per_chunk_bound(topology, one)
    return Front(
        name,
        topology.name,
        prune_dominated(found),
        tuple(found),
        outcomes,
        lower,
        rho,
        max_chunks,
        stop,
        limits[0],
        limits[1],
        note,
    )


def _compositions(topology: Topology, walks: list[_Walk]) -> list[Algorithm]:
    """Every reducescatter on the front followed by every allgather on it
    (:data:`synth.reductions.REDUCESCATTER_ALLGATHER`, which refines both to a common chunk count)."""
    n = topology.num_ranks
    reduced = REDUCESCATTER_ALLGATHER.apply(Problem(topology, make_collective("allreduce", n, n)))
    return [
        reduced.invert([Solution(rs), Solution(ag)]).algorithm
        for rs in prune_dominated(walks[0].found)
        for ag in prune_dominated(walks[1].found)
    ]
