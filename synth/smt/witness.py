"""Shortest-path schedules: a verified algorithm that exists for every connected problem.

They bound the searches from above, so that least-steps and the front walk always end: every
chunk moves one hop per layer along a shortest-path tree from its sources (parents chosen to
balance the load on each link), layer ``d`` carrying the hops into ranks ``d + 1`` hops away.

- With ``single_round_steps`` each layer is split greedily into steps of one round: an algorithm
  with ``R = S``, so least-steps (which asks ``R = S + extra``) needs at most that many steps.
- Otherwise each layer is one step with the rounds its load needs: an algorithm with the fewest
  steps (the steps lower bound) and some ``R``, which ends the rounds loop of a front walk.

Combining collectives follow by the reductions every front end uses (:mod:`synth.reductions`):
reducescatter and reduce through their dual on the reversed topology, allreduce as reducescatter +
allgather (or, when the chunks are not a multiple of the ranks, reduce to rank 0 + broadcast from it).
"""

from __future__ import annotations

from collections import deque

from synth.algorithm import Algorithm, Provenance, Send, Step
from synth.collectives import Collective
from synth.errors import InfeasibleError
from synth.reductions import Problem, Solution, solve_reduced, standard_reduction
from topologies.model import Topology

__all__ = ["shortest_path_schedule"]


def _layers(topology: Topology, collective: Collective) -> list[list[Send]]:
    logical = topology.logical()
    capacity = topology.chunk_capacity()
    load: dict[tuple[int, int, int], float] = {}
    layers: list[list[Send]] = []
    for cid, chunk in enumerate(collective.chunks):
        dist = {r: 0 for r in chunk.pre}
        order = deque(sorted(chunk.pre))
        while order:
            u = order.popleft()
            for v in logical.successors(u):
                if v not in dist:
                    dist[v] = dist[u] + 1
                    order.append(v)
        missing = sorted(r for r in chunk.post if r not in dist)
        if missing:
            raise InfeasibleError(
                f"{collective.name} cannot be implemented on {topology.name}: rank {missing[0]} is unreachable"
            )
        parent: dict[int, int] = {}
        for r in sorted(chunk.post - chunk.pre, key=lambda r: (-dist[r], r)):  # farthest first
            while r not in chunk.pre and r not in parent:
                d = dist[r]
                while len(layers) < d:
                    layers.append([])
                candidates = [p for p in logical.predecessors(r) if dist.get(p) == d - 1]
                p = min(candidates, key=lambda p: (load.get((p, r, d), 0) / capacity.pair(p, r), p))
                load[(p, r, d)] = load.get((p, r, d), 0) + 1
                layers[d - 1].append(Send(cid, p, r))
                parent[r] = p
                r = p
    return layers


def _non_combining(topology: Topology, collective: Collective, single_round_steps: bool) -> Algorithm:
    capacity = topology.chunk_capacity()
    steps: list[Step] = []
    for layer in _layers(topology, collective):
        sends = sorted(set(layer))
        if not single_round_steps:
            steps.append(Step(capacity.rounds_needed((s.src, s.dst) for s in sends), tuple(sends)))
            continue
        parts: list[list[Send]] = []
        for send in sends:  # first fit into one-round steps
            for part in parts:
                if not capacity.overloaded([(s.src, s.dst) for s in part] + [(send.src, send.dst)], 1):
                    part.append(send)
                    break
            else:
                parts.append([send])
        steps.extend(Step(1, tuple(part)) for part in parts)
    return Algorithm(collective, topology.name, tuple(steps), Provenance("witness:shortest-paths"))


def shortest_path_schedule(
    topology: Topology, collective: Collective, single_round_steps: bool = True
) -> Algorithm:
    """A verified store-and-forward schedule along shortest paths (see the module docstring)."""

    def schedule(problem: Problem) -> Solution:
        algo = _non_combining(problem.topology, problem.collective, single_round_steps)
        algo.verify(problem.topology)
        return Solution(algo)

    return solve_reduced(Problem(topology, collective), standard_reduction, schedule).algorithm
