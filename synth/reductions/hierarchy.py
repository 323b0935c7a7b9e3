"""Hierarchy: an allgather over identical machines as one between machines and one inside them.

On ``K`` identical machines of ``g`` ranks (machine m holds ranks ``m*g .. m*g+g-1``) whose only
way out is the network, an allgather splits into two smaller ones (the rails of NCCL's
hierarchical algorithms):

1. *between machines*: rank i of every machine gathers the data of rank i of all machines. The
   ``g`` rails run the same schedule side by side, so it is solved once on the *machine graph*: K
   ranks joined by one network switch, each link at the rate one rail gets of its machine's path
   to the network (a NIC serving several ranks is shared among their rails);
2. *inside a machine*: rank i then holds rail i's data (K chunks per chunk of its own) and
   spreads it over the machine: an allgather on one machine, solved once and run in every machine.

``invert`` lifts the first schedule onto every rail and the second onto every machine, each of the
second's chunks standing for an equal share of its rail's chunks, and runs them one after the
other: the second part's sends of a chunk come in later steps than the chunk's arrival, and the
timing engine (which has no barrier between steps) starts each as soon as its chunk has arrived,
so the two parts overlap. The result is verified on the whole topology.

The time is that of the slower part, near the bound wherever the network is the bottleneck
(``dgx-h100x16``: 99.6% at 1 GiB, benchmarks/RESULTS.md); where a single rank's links bind
instead (two machines), the flat tree packing does better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from synth.algorithm import Algorithm, Provenance, Send, Step, algorithm_name
from synth.collectives import Collective, make_collective
from synth.reductions.base import Problem, Reduced, Reduction, ReductionError, Solution
from synth.reductions.composition import refine
from synth.replay import Pairs, replay_copies
from topologies.model import Link, Topology, Vertex

__all__ = [
    "HIERARCHY",
    "Composed",
    "Composition",
    "Hierarchy",
    "Machines",
    "compose",
    "machines_of",
    "ordered",
    "to_steps",
    "verify_composition",
]

OUTSIDE = ("nic", "network")
"""Switch kinds that belong to the way out of a machine, not to the machine."""


@dataclass(frozen=True)
class Machines:
    """What the reduction found: K machines of g ranks, each rank's rail rates and latencies."""

    count: int
    size: int
    up: Link
    down: Link


def _machine_links(topology: Topology, machine: int) -> dict[tuple[Vertex, Vertex], Link]:
    """The machine's own links: between its ranks and the switches reached from them without
    leaving through a NIC or the network."""
    g = topology.num_ranks // topology.num_machines
    ranks = set(range(machine * g, (machine + 1) * g))
    kinds = topology.switches
    inside: set[Vertex] = set(ranks)
    todo = list(ranks)
    while todo:
        v = todo.pop()
        for w in (*topology.graph.successors(v), *topology.graph.predecessors(v)):
            if w not in inside and not isinstance(w, int) and kinds[w] not in OUTSIDE:
                inside.add(w)
                todo.append(w)
    return {(u, v): link for u, v, link in topology.links() if u in inside and v in inside}


def _signature(topology: Topology, links: dict, offset: int) -> list:
    """The machine's links with ranks renumbered from 0 and switches anonymised by their ranks."""
    kinds = topology.switches  # built per call: once here, not once per switch

    def key(v: Vertex) -> tuple:
        if isinstance(v, int):
            return (0, v - offset)
        near = sorted(w - offset for w in topology.graph.successors(v) if isinstance(w, int))
        return (1, kinds[v], tuple(near))

    return sorted((key(u), key(v), link.bandwidth_GBps, link.count, link.alpha_us) for (u, v), link in links.items())


def _rail(topology: Topology, rank: int, leaving: bool) -> tuple[list, int]:
    """The edges of ``rank``'s path out to the network (``leaving``) or in from it, and the position
    of the network switch on the path; raises where a path to another machine avoids the network."""
    g = topology.num_ranks // topology.num_machines
    other = (rank + g) % topology.num_ranks
    src, dst = (rank, other) if leaving else (other, rank)
    link = topology.logical().links.get((src, dst))
    kinds = topology.switches
    at = next((k for k, v in enumerate(link.path) if kinds.get(v) == "network"), None) if link else None
    if at is None:
        raise ReductionError(f"hierarchy: {topology.name}: rank {src} reaches rank {dst} without the network")
    edges = link.edges[:at] if leaving else link.edges[at:]
    return list(edges), at


def _rate(topology: Topology, leaving: bool) -> Link:
    """One rail's share of its machine's way out (or in): the least of each edge's capacity over
    the rails that use it, and the path's latency; every rank of a machine must get the same."""
    g = topology.num_ranks // topology.num_machines
    paths = {r: _rail(topology, r, leaving)[0] for r in range(g)}
    users: dict = {}
    for edges in paths.values():
        for e in edges:
            users[e] = users.get(e, 0) + 1
    rails = set()
    for edges in paths.values():
        links = [topology.link(*e) for e in edges]
        rate = min(lk.total_GBps / users[e] for lk, e in zip(links, edges, strict=True))
        rails.add((round(rate, 9), round(sum(lk.alpha_us for lk in links), 9)))
    if len(rails) != 1:
        raise ReductionError(f"hierarchy: {topology.name}: the ranks of a machine reach the network at different rates")
    ((rate, alpha),) = rails
    return Link(rate, alpha)


def machines_of(topology: Topology) -> Machines:
    """The machine structure the reduction needs, or :class:`ReductionError` saying what is missing."""
    k, n = topology.num_machines, topology.num_ranks
    if k < 2 or n % k:
        raise ReductionError(f"hierarchy: {topology.name} has {k} machine(s); it needs at least 2 of equal size")
    g = n // k
    if any(topology.node_of[r] != r // g for r in range(n)):
        raise ReductionError(f"hierarchy: {topology.name} must number machine m's ranks m*g .. m*g+g-1")
    first = _signature(topology, _machine_links(topology, 0), 0)
    for m in range(1, k):
        if _signature(topology, _machine_links(topology, m), m * g) != first:
            raise ReductionError(f"hierarchy: {topology.name}: machine {m} is not wired like machine 0")
    return Machines(k, g, _rate(topology, leaving=True), _rate(topology, leaving=False))


def machine_graph(topology: Topology, machines: Machines) -> Topology:
    """K ranks, one per machine, each joined to one network switch at one rail's rates."""
    links = {}
    for m in range(machines.count):
        links[(m, "net")] = machines.up
        links[("net", m)] = machines.down
    return Topology.build(
        f"{topology.name}/machines",
        machines.count,
        links,
        {"net": "network"},
        tuple(range(machines.count)),
        description=f"one rail of {topology.name}: {machines.count} machines on the network",
    )


def machine_topology(topology: Topology, machines: Machines) -> Topology:
    """Machine 0 on its own (its ranks and internal switches)."""
    links = _machine_links(topology, 0)
    switches = {v: topology.switches[v] for edge in links for v in edge if not isinstance(v, int)}
    if machines.size > 1 and not links:
        raise ReductionError(f"hierarchy: {topology.name}: the ranks of a machine are not linked to each other")
    return Topology.build(
        f"{topology.name}/machine", machines.size, links, switches, description=f"one machine of {topology.name}"
    )


def _rows(algo: Algorithm) -> list[np.ndarray]:
    """Each step's sends as an array of ``(chunk, src, dst)`` rows."""
    return [np.array([(s.chunk, s.src, s.dst) for s in st.sends], dtype=np.int64).reshape(-1, 3) for st in algo.steps]


@dataclass(frozen=True)
class Composition:
    """The composed allgather held as arrays, before any :class:`Send` is made: per step its rows
    ``(chunk, src, dst)`` in the order the timing engine starts them (:func:`ordered`); the first
    ``rail_steps`` steps are the rails' (the network part), the rest the machines'. At 4096 GPUs
    it is 16.8 M rows (about 400 MB as arrays; as Python objects it ran out of 7 GB)."""

    machines: Machines
    chunks: int
    """Chunks per rank of the composed allgather."""
    rail_steps: int
    blocks: tuple[np.ndarray, ...]

    @property
    def num_sends(self) -> int:
        return sum(len(b) for b in self.blocks)


def compose(first: Algorithm, second: Algorithm, machines: Machines) -> Composition:
    """The machine graph's schedule ``first`` refined until the machine's (``second``) chunks divide
    each rail's, lifted onto every rail, then ``second`` onto every machine, in the engine's order."""
    refine_by = second.chunks // math.gcd(second.chunks, machines.count * first.chunks)
    first = refine(first, refine_by)
    rails = lift_between(first, machines)
    blocks = ordered(rails + lift_within(second, machines, first.chunks), machines, first.chunks)
    return Composition(machines, first.chunks, len(rails), tuple(blocks))


def ordered(blocks: list[np.ndarray], machines: Machines, chunks: int) -> list[np.ndarray]:
    """Each step's rows sorted by how far ahead of its source machine the destination's is (mod
    K), then by keys relative to the source machine: the chunk's origin counted from it (chunk
    ``(o*g + i)*chunks + c`` has origin machine ``o``), the ranks' places in their machines, last
    the source machine. The timing engine starts sends in this order, so every machine feeds
    machine ``m + 1``, then ``m + 2``, ... (one NIC each at a time), the order in which
    :func:`lift_within` takes the rails' chunks and, run backwards (a reducescatter), hands them
    over. Sorted by absolute destination, all machines fed machine 0 first; the reducescatter's
    mirror of that timing did not match the inner order: 80.7% of the flat packing on 16 x 8 H100,
    one chunk. Relative keys make a shift of the machines a shift of the order, so machines whose
    rails deliver alike run alike and :func:`synth.reductions.hierarchy_time.simulate_composition`
    times each kind once (sorted by absolute chunk, machine 0's ties broke differently at the wrap)."""
    k, g = machines.count, machines.size
    span = g * chunks  # chunks per origin machine
    out = []
    for block in blocks:
        chunk, src, dst = block[:, 0], block[:, 1], block[:, 2]
        home = src // g
        ahead = (dst // g - home) % k
        relative = ((chunk // span - home) % k) * span + chunk % span
        out.append(block[np.lexsort((home, dst % g, src % g, relative, ahead))])
    return out


def to_steps(composition: Composition, topology: Topology, rounds: Sequence[int] | None = None) -> tuple[Step, ...]:
    """The composition's steps as :class:`Step` objects, each with the rounds its loads need on
    ``topology`` (:func:`composition_rounds`) unless given."""
    if rounds is None:
        rounds = composition_rounds(composition, topology)
    return tuple(
        Step(r, tuple(Send(c, s, d) for c, s, d in block.tolist()))
        for r, block in zip(rounds, composition.blocks, strict=True)
    )


def composition_rounds(composition: Composition, topology: Topology, pairs: Pairs | None = None) -> tuple[int, ...]:
    """Each step's rounds: the fewest in which its sends fit every edge of ``topology``
    (:meth:`~topologies.logical.ChunkCapacity.rounds_needed`, counted on arrays; its rank pairs
    routed first, one search per source)."""
    pairs = pairs if pairs is not None else Pairs(topology, composition.blocks)
    return tuple(pairs.rounds_needed(block) for block in composition.blocks)


def verify_composition(composition: Composition, topology: Topology, provenance: Provenance) -> Composed:
    """The composition verified as a whole on ``topology`` (the verifier's replay on arrays,
    :mod:`synth.replay`: its checks and messages, the algorithm named as its Algorithm would be),
    with each step's rounds; raises :class:`~synth.errors.VerificationError`."""
    pairs = Pairs(topology, composition.blocks)
    rounds = composition_rounds(composition, topology, pairs)
    collective = make_collective("allgather", topology.num_ranks, composition.chunks, lazy=True)
    name = algorithm_name("allgather", topology.name, len(rounds), sum(rounds), composition.chunks)
    replay_copies(name, collective, topology, composition.blocks, rounds, pairs=pairs)
    return Composed(composition, collective, topology.name, rounds, provenance)


@dataclass(frozen=True)
class Composed:
    """A composed allgather verified as a whole (:func:`verify_composition`), still arrays: its
    :class:`Algorithm` (one :class:`Send` per row: 16.8 M at 4096 GPUs, more memory than this
    machine has) is made only when asked for (:meth:`algorithm`)."""

    composition: Composition
    collective: Collective
    topology: str
    rounds: tuple[int, ...]
    provenance: Provenance

    @property
    def num_sends(self) -> int:
        return self.composition.num_sends

    @property
    def name(self) -> str:
        """The name its Algorithm has."""
        return algorithm_name("allgather", self.topology, len(self.rounds), sum(self.rounds), self.composition.chunks)

    def algorithm(self) -> Algorithm:
        """The same schedule as an :class:`Algorithm` (verified: it is the schedule just replayed)."""
        steps = tuple(
            Step(r, tuple(Send(c, s, d) for c, s, d in block.tolist()))
            for r, block in zip(self.rounds, self.composition.blocks, strict=True)
        )
        return Algorithm(self.collective, self.topology, steps, self.provenance)


def lift_between(algo: Algorithm, machines: Machines) -> list[np.ndarray]:
    """The machine graph's schedule on every rail: its chunk ``m*C + c`` is chunk ``c`` of rank
    ``m*g + i`` on rail i, its ranks ``m`` the ranks ``m*g + i``."""
    g, c = machines.size, algo.chunks
    rail = np.arange(g)
    out = []
    for rows in _rows(algo):
        chunk, src, dst = (rows[:, k][:, np.newaxis] for k in range(3))
        lifted = [((chunk // c) * g + rail) * c + chunk % c, src * g + rail, dst * g + rail]
        out.append(np.stack([a.ravel() for a in lifted], axis=1))
    return out


def lift_within(algo: Algorithm, machines: Machines, chunks: int) -> list[np.ndarray]:
    """The machine's schedule in every machine: its chunk ``i*C2 + j`` stands for the j-th of C2
    equal shares of rail i's ``K * chunks`` chunks, in machine m chunk c of machine ``m - d`` (mod
    K) being item ``c * K + d``: the shares follow the order in which the rail's pipeline delivers
    the chunks (chunk-major; machine m hears from m - 1, m - 2, ..., :func:`_steps`), so the inner
    schedule forwards what has arrived and, run backwards (a reducescatter), hands the network part
    its chunks in the order it sends them (to m + 1, m + 2, ...); counted from each machine's own
    (``d``), so that run backwards every machine feeds a different machine at a time (counted from
    machine 0, all fed machine 0, then 1: 0.53x the bound on 8 x 8 H100)."""
    k, g, c2 = machines.count, machines.size, algo.chunks
    share = k * chunks // c2
    machine = np.arange(k)
    out = []
    for rows in _rows(algo):
        i, j = rows[:, 0] // c2, rows[:, 0] % c2
        item = (j[:, np.newaxis] * share + np.arange(share)[np.newaxis, :])[:, :, np.newaxis]  # sends x share x 1
        origin = (machine - item % k) % k  # sends x share x machines
        chunk = (origin * g + i[:, np.newaxis, np.newaxis]) * chunks + item // k
        shape = (len(rows), share, k)
        where = machine * g
        lifted = [
            chunk,
            np.broadcast_to(rows[:, 1][:, np.newaxis, np.newaxis] + where, shape),
            np.broadcast_to(rows[:, 2][:, np.newaxis, np.newaxis] + where, shape),
        ]
        out.append(np.stack([a.ravel() for a in lifted], axis=1))
    return out


class Hierarchy(Reduction):
    """allgather on identical machines -> allgather on the machine graph (one rail) and allgather
    on one machine (module docstring)."""

    name = "hierarchy"

    def accepts(self, problem: Problem) -> bool:
        if problem.collective.name != "allgather" or problem.restriction is not None:
            return False
        try:
            machines_of(problem.topology)
        except ReductionError:
            return False
        return True

    def apply(self, problem: Problem) -> Reduced:
        if problem.collective.name != "allgather":
            raise ReductionError(f"hierarchy composes an allgather, not {problem.collective.name}")
        machines = machines_of(problem.topology)
        between = machine_graph(problem.topology, machines)
        within = machine_topology(problem.topology, machines)
        parts = (
            Problem(between, make_collective("allgather", machines.count)),
            Problem(within, make_collective("allgather", machines.size)),
        )
        via = f"hierarchy: {machines.count} machines x {machines.size} ranks"
        return Reduced(self, problem, parts, via, machines)

    def invert(self, reduced: Reduced, solutions: Sequence[Solution]) -> Solution:
        """:meth:`compose`'s result as an :class:`Algorithm`."""
        return Solution(self.compose(reduced, solutions).algorithm())

    def compose(self, reduced: Reduced, solutions: Sequence[Solution]) -> Composed:
        """The machine graph's schedule refined until the machine's chunks divide each rail's,
        lifted onto every rail, then the machine's onto every machine; verified as a whole, as
        arrays (an Algorithm is made from it only on demand)."""
        machines: Machines = reduced.data
        first, second = (s.algorithm for s in solutions)
        composition = compose(first, second, machines)
        p1, p2 = first.provenance, second.provenance
        t1, t2 = p1.solve_time_s, p2.solve_time_s
        provenance = Provenance(
            p1.method if p1.method == p2.method else f"{p1.method} + {p2.method}",
            p1.solver if p1.solver == p2.solver else None,
            None if t1 is None or t2 is None else t1 + t2,
            None,
            reduced.via,
            (("machine_chunks", second.chunks), ("network_chunks", composition.chunks)),
        )
        return verify_composition(composition, reduced.original.topology, provenance)


HIERARCHY = Hierarchy()
