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

from synth.algorithm import Algorithm, Send, Step, compose
from synth.bounds import rounds_per_chunk_bound, steps_lower_bound
from synth.collectives import make_collective
from synth.errors import InfeasibleError
from synth.smt.options import DEFAULT_OPTIONS, SmtOptions
from synth.smt.outcome import Outcome
from synth.smt.synthesizer import Synthesizer
from synth.smt.witness import shortest_path_schedule
from topologies.model import Topology

__all__ = ["DEFAULT_MAX_CHUNKS", "Front", "pareto_front", "prune_dominated", "refine"]

DEFAULT_MAX_CHUNKS = 8
"""Enough for the bandwidth-optimal DGX-1 allgather (C = 6); larger C grows every instance."""

STOPS = ("bandwidth optimal", "max chunks", "interrupted")


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

    @property
    def complete(self) -> bool:
        """No instance timed out (an unknown one might have added a point)."""
        return all(o.status != "unknown" for o in self.outcomes)

    def message(self) -> str:
        points = ", ".join(f"(S={a.num_steps}, R={a.rounds}, C={a.chunks})" for a in self.algorithms)
        why = {
            "bandwidth optimal": "bandwidth optimal: an algorithm meets the rounds-per-chunk bound",
            "max chunks": f"reached the limit of {self.max_chunks} chunks per rank",
            "interrupted": "interrupted",
        }[self.stop]
        note = "" if self.complete else "; some instances timed out, the front may miss points"
        return f"{len(self.algorithms)} Pareto-optimal algorithm(s): {points or 'none'} ({why}{note})"


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


def refine(algo: Algorithm, factor: int) -> Algorithm:
    """The same schedule with every chunk split in ``factor`` (C and R both times ``factor``).

    Chunk and address ids follow MSCCL's layouts, where piece ``j`` of id ``a`` is ``a * factor + j``.
    """
    if factor == 1:
        return algo
    coll = algo.collective
    finer = make_collective(coll.name, coll.num_ranks, coll.chunks_per_rank * factor, coll.root)
    steps = tuple(
        Step(
            st.rounds * factor,
            tuple(
                sorted(
                    Send(s.chunk * factor + j, s.src, s.dst, s.op) for s in st.sends for j in range(factor)
                )
            ),
        )
        for st in algo.steps
    )
    return Algorithm(finer, algo.topology, steps, algo.provenance)


def pareto_front(
    topology: Topology,
    collective_name: str,
    root: int | None = None,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    max_steps: int | None = None,
    time_limit_s: float | None = None,
    options: SmtOptions = DEFAULT_OPTIONS,
    on_start: Callable[[str], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> Front:
    """Walk the front (module docstring). ``time_limit_s`` applies to each instance; Ctrl-C (or a
    ``KeyboardInterrupt`` from a callback) ends the walk and keeps what was found."""
    if max_chunks < 1:
        raise InfeasibleError(f"max chunks: expected >= 1, got {max_chunks}")
    name = make_collective(collective_name, topology.num_ranks, 1, root).name
    if name == "allreduce":
        return _composed_front(
            topology, root, max_chunks, max_steps, time_limit_s, options, on_start, on_outcome
        )
    synth = Synthesizer(topology, name, root, options)
    one = synth.collective(1)
    lower = steps_lower_bound(topology, one)
    rho = rounds_per_chunk_bound(topology, one)
    if max_steps is not None and max_steps < lower:
        raise InfeasibleError(f"max steps: {max_steps} is below the steps lower bound {lower}")
    found: list[Algorithm] = []
    outcomes: list[Outcome] = []

    def dominated(steps: int, ratio: Fraction) -> bool:
        return any(a.num_steps <= steps and a.rounds_per_chunk <= ratio for a in found)

    stop = "max chunks"
    try:
        for chunks in range(1, max_chunks + 1):
            cap = shortest_path_schedule(topology, synth.collective(chunks), single_round_steps=False).rounds
            rounds = max(math.ceil(rho * chunks), lower)
            done = False
            while rounds <= cap and not done and not dominated(lower, Fraction(rounds, chunks)):
                top = rounds if max_steps is None else min(rounds, max_steps)
                for steps in range(lower, top + 1):
                    if dominated(steps, Fraction(rounds, chunks)):
                        continue
                    if on_start is not None:
                        on_start(f"{name} S={steps} R={rounds} C={chunks}")
                    out = synth.solve(steps, rounds, chunks, time_limit_s)
                    outcomes.append(out)
                    if out.status == "sat":
                        found.append(out.algorithm)
                        done = True
                    if on_outcome is not None:
                        on_outcome(out)
                    if done:
                        break
                rounds += 1
            if found and found[-1].rounds_per_chunk <= rho:
                stop = "bandwidth optimal"
                break
    except KeyboardInterrupt:
        stop = "interrupted"
    return Front(
        name,
        topology.name,
        prune_dominated(found),
        tuple(found),
        tuple(outcomes),
        lower,
        rho,
        max_chunks,
        stop,
    )


def _composed_front(
    topology, root, max_chunks, max_steps, time_limit_s, options, on_start, on_outcome
) -> Front:
    """Allreduce: every reducescatter front algorithm followed by every allgather one."""
    n = topology.num_ranks
    walks = []
    for part in ("reducescatter", "allgather"):
        walk = pareto_front(
            topology, part, root, max_chunks, max_steps, time_limit_s, options, on_start, on_outcome
        )
        walks.append(walk)
        if walk.stop == "interrupted":
            break
    found = []
    if len(walks) == 2:
        for rs in walks[0].algorithms:
            for ag in walks[1].algorithms:
                common = math.lcm(rs.chunks, ag.chunks)
                first, second = refine(rs, common // rs.chunks), refine(ag, common // ag.chunks)
                coll = make_collective("allreduce", n, n * common)
                algo = compose(first, second, coll, via="reducescatter + allgather")
                algo.verify(topology)
                found.append(algo)
    one = make_collective("allreduce", n, 1)
    stops = {w.stop for w in walks}
    stop = (
        "interrupted"
        if "interrupted" in stops
        else ("bandwidth optimal" if stops == {"bandwidth optimal"} else "max chunks")
    )
    return Front(
        "allreduce",
        topology.name,
        prune_dominated(found),
        tuple(found),
        tuple(o for w in walks for o in w.outcomes),
        steps_lower_bound(topology, one),
        rounds_per_chunk_bound(topology, one),
        max_chunks,
        stop,
    )
