"""Least steps: the fewest steps S of any algorithm with R = S + extra rounds (SCCL's least-steps).

The search starts at the steps lower bound (hop distances) and goes up one step at a time. It
always ends: ``max_steps`` defaults to the length of the shortest-path schedule with one round per
step (:mod:`synth.smt.witness`), a verified algorithm with R = S, so some S up to it is always
satisfiable (for allreduce, the composition the witness uses). Past a user's smaller limit the
answer is "no algorithm with at most N steps".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from synth.algorithm import Algorithm
from synth.bounds import steps_lower_bound
from synth.collectives import Collective
from synth.deadline import Deadline
from synth.errors import InfeasibleError
from synth.outcome import Outcome, Status
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

__all__ = ["LeastSteps", "default_max_steps", "least_steps"]


@dataclass(frozen=True)
class LeastSteps:
    algorithm: Algorithm | None
    outcomes: tuple[Outcome, ...]
    steps_bound: int
    max_steps: int
    stop: str
    """``found``, ``limit`` (every S up to ``max_steps`` tried), ``time limit`` (the search's
    wall-time limit came first) or ``interrupted`` (Ctrl-C)."""
    time_limit_s: float | None = None
    instance_time_limit_s: float | None = None

    @property
    def proven(self) -> bool:
        """Every smaller S was proven unsatisfiable (none timed out), and the search ended by
        finding an algorithm or trying every S up to ``max_steps``: one cut short by its time limit
        or Ctrl-C between two answered instances proved nothing about the S it never tried."""
        return self.stop in ("found", "limit") and all(o.status.answered for o in self.outcomes)

    def message(self) -> str:
        if self.algorithm is not None:
            how = "least steps, proven" if self.proven else "not proven least: a smaller S timed out"
            return f"{self.algorithm.name}: {self.algorithm.num_steps} steps ({how})"
        if self.stop == "interrupted":
            return "interrupted before an algorithm was found"
        if self.stop == "time limit":
            return f"no algorithm found within the time limit of {self.time_limit_s:g} s"
        if self.proven:
            return f"no algorithm with at most {self.max_steps} steps"
        return f"no algorithm found with at most {self.max_steps} steps (some instances timed out)"


def default_max_steps(topology: Topology, collective: Collective) -> int:
    """Steps of the one-round-per-step shortest-path schedule: least-steps never needs more."""
    return shortest_path_schedule(topology, collective, single_round_steps=True).num_steps


def least_steps(
    topology: Topology,
    collective: Collective,
    extra_rounds: int = 0,
    max_steps: int | None = None,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
    options: SmtOptions = DEFAULT_OPTIONS,
    allreduce: str = "auto",
    on_start: Callable[[str], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    instance_time_limit_s: float | None = DEFAULT_INSTANCE_TIME_LIMIT_S,
) -> LeastSteps:
    """Try S = lower bound, lower bound + 1, ... (R = S + ``extra_rounds``) until one is satisfiable.

    The search ends after ``time_limit_s`` seconds of wall time (``None``: no limit), each instance
    after ``instance_time_limit_s``. Ctrl-C (or a ``KeyboardInterrupt`` raised by ``on_outcome``)
    stops the search and returns what was found.
    """
    deadline = Deadline.after(time_limit_s)
    check_ranks(topology)
    if extra_rounds < 0:
        raise InfeasibleError(f"extra rounds: expected >= 0, got {extra_rounds}")
    lower = steps_lower_bound(topology, collective)
    limit = default_max_steps(topology, collective) if max_steps is None else max_steps
    if limit < 1:
        raise InfeasibleError(f"max steps: expected >= 1, got {limit}")
    synth = Synthesizer(topology, collective.name, collective.root, options, allreduce)
    outcomes: list[Outcome] = []
    stop = "limit"
    chunks = collective.chunks_per_rank
    try:
        for steps in range(lower, limit + 1):
            if deadline.expired():
                stop = "time limit"
                break
            check_size(topology, collective, steps, steps + extra_rounds)
            if on_start is not None:
                index, total = steps - lower + 1, limit - lower + 1
                on_start(
                    f"{collective.name} S={steps} R={steps + extra_rounds} C={chunks} "
                    f"(instance {index} of at most {total})"
                )
            out = synth.solve(steps, steps + extra_rounds, chunks, deadline.limit(instance_time_limit_s))
            outcomes.append(out)
            if out.algorithm is not None:
                stop = "found"
            if on_outcome is not None:
                on_outcome(out)
            if stop == "found":
                break
    except KeyboardInterrupt:
        stop = "found" if outcomes and outcomes[-1].algorithm is not None else "interrupted"
    limits = (time_limit_s, instance_time_limit_s)
    if stop != "found":
        return LeastSteps(None, tuple(outcomes), lower, limit, stop, *limits)
    earlier = tuple(outcomes[:-1])
    algo = outcomes[-1].algorithm.with_provenance(optimal=all(o.status is Status.INFEASIBLE for o in earlier))
    return LeastSteps(algo, earlier, lower, limit, stop, *limits)
