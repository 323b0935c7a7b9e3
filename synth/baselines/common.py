"""Shared pieces of the baselines: fitting rounds to capacities, ring orders, link checks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

from synth.algorithm import Algorithm, Provenance, Send, Step
from synth.collectives import Collective
from synth.errors import InfeasibleError
from topologies.model import Topology

__all__ = [
    "BaselineError",
    "hamiltonian_cycle",
    "make_algorithm",
    "require_link",
    "schedule_paths",
]

MAX_SEARCH = 200_000
"""Node expansions allowed when looking for a Hamiltonian cycle before giving up."""


class BaselineError(InfeasibleError):
    """The topology lacks what a baseline needs (links, a ring, a power-of-two rank count)."""


def require_link(topology: Topology, src: int, dst: int, kind: str, step: int) -> None:
    if (src, dst) not in topology.logical().links:
        raise BaselineError(
            f"baseline {kind}: {topology.name} has no link {src} -> {dst} (needed in step {step})"
        )


def make_algorithm(
    kind: str, topology: Topology, collective: Collective, steps: Sequence[Iterable[Send]], **params
) -> Algorithm:
    """Drop empty steps, give each step the fewest rounds that fit its loads, check the links."""
    capacity = topology.chunk_capacity()
    built = []
    for sends in steps:
        sends = tuple(sends)
        if not sends:
            continue
        for s in sends:
            require_link(topology, s.src, s.dst, kind, len(built))
        built.append(Step(capacity.rounds_needed((s.src, s.dst) for s in sends), sends))
    prov = Provenance(method=f"baseline:{kind}", params=tuple(sorted(params.items())))
    return Algorithm(collective, topology.name, tuple(built), prov)


def _search_cycle(topology: Topology, ranks: Sequence[int], path_only: bool) -> list[int] | None:
    """Depth-first search for a Hamiltonian cycle (or path) over ``ranks``, preferring fast links."""
    logical = topology.logical()
    members = set(ranks)
    start = ranks[0]

    def order(u: int) -> list[int]:
        nbrs = [v for v in logical.successors(u) if v in members]
        return sorted(
            nbrs, key=lambda v: (-logical.links[(u, v)].bandwidth_GBps, (v - u) % topology.num_ranks)
        )

    budget = [MAX_SEARCH]
    path = [start]
    seen = {start}

    def extend() -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        if len(path) == len(members):
            return path_only or (path[-1], start) in logical.links
        for v in order(path[-1]):
            if v not in seen:
                path.append(v)
                seen.add(v)
                if extend():
                    return True
                path.pop()
                seen.discard(v)
        return False

    return list(path) if extend() else None


def hamiltonian_cycle(topology: Topology, kind: str = "ring") -> list[int]:
    """A cycle through every rank. Multi-machine topologies get one Hamiltonian path per machine
    (the same local order in each), joined machine to machine, so the ring crosses the network
    as few times as possible."""
    n = topology.num_ranks
    logical = topology.logical()
    identity = list(range(n))
    if all((r, (r + 1) % n) in logical.links for r in range(n)):
        return identity
    if topology.num_machines > 1:
        local = list(topology.machine_ranks(0))
        path = _search_cycle(topology, local, path_only=True)
        if path is not None:
            g = len(local)
            cycle = [r + m * g for m in range(topology.num_machines) for r in path]
            if all((cycle[i], cycle[(i + 1) % n]) in logical.links for i in range(n)):
                return cycle
    cycle = _search_cycle(topology, identity, path_only=False)
    if cycle is None:
        raise BaselineError(
            f"baseline {kind}: found no ring (Hamiltonian cycle) through all ranks of {topology.name}"
        )
    return cycle


def schedule_paths(routes: Iterable[tuple[int, Sequence[int], int]]) -> list[list[Send]]:
    """Store-and-forward: ``(chunk, path, depart)`` moves one hop per step from step ``depart``."""
    steps: list[list[Send]] = []
    for chunk, path, depart in routes:
        for hop, (u, v) in enumerate(pairwise(path)):
            t = depart + hop
            while len(steps) <= t:
                steps.append([])
            steps[t].append(Send(chunk, u, v))
    return [sorted(s) for s in steps]

