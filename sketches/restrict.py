"""Sketch + topology -> the restricted instance a synthesizer searches (and the checks between them).

:func:`restrict` validates a sketch against the topology it is used with and returns a
:class:`Restriction`: the logical links the sketch allows, through which links each rank's chunks
may leave their machine, and the symmetry group the sketch's rotations generate (each checked to be
a symmetry of the topology and of the allowed links). :meth:`Restriction.reverse` gives the same
restriction on the reversed topology, for combining collectives synthesized through their dual.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from functools import lru_cache

from networkx.algorithms.isomorphism import DiGraphMatcher

from sketches.model import Sketch, rotation
from topologies.model import Topology

__all__ = ["MAX_GROUP", "Restriction", "restrict"]

Pair = tuple[int, int]
Perm = tuple[int, ...]

MAX_GROUP = 4096
"""Largest symmetry group we enumerate; rotations of a 512-GPU cluster stay far below it."""


@dataclass(frozen=True, eq=False)
class Restriction:
    """What a sketch leaves of a topology (see module docstring)."""

    topology: Topology
    sketch: Sketch
    links: frozenset[Pair]
    """Logical links the sketch allows (intra-machine and relay links)."""
    leave_via: dict[int, frozenset[Pair]]
    """Source rank -> the relay links its chunks may leave their machine by (absent: any allowed)."""
    group: tuple[Perm, ...]
    """Rank permutations (identity first), closed under composition, that the algorithm respects."""
    connection_pairs: frozenset[Pair]
    """Intra-machine links the hyperedge policy counts (empty without one)."""
    policy: str | None
    reversed: bool = False

    @property
    def num_ranks(self) -> int:
        return self.topology.num_ranks

    def crossing(self, pair: Pair) -> bool:
        """Whether a logical link joins two machines."""
        return self.topology.node_of[pair[0]] != self.topology.node_of[pair[1]]

    def links_for(self, source: int) -> frozenset[Pair]:
        """The links chunks from ``source`` may use: the relay links out of its machine are limited by
        ``senders``, and no relay link leads back into it."""
        node = self.topology.node_of
        home = node[source]
        out = set()
        for pair in self.links:
            if node[pair[0]] != node[pair[1]]:
                if node[pair[1]] == home:
                    continue
                if node[pair[0]] == home and source in self.leave_via and pair not in self.leave_via[source]:
                    continue
            out.add(pair)
        return frozenset(out)

    def reverse(self) -> Restriction:
        """The restriction on the reversed topology: every allowed link turned around.

        ``senders`` describes chunks leaving their machine; turned around it would describe sums
        entering it, which the dual allgather cannot express, so it is dropped.
        """
        return replace(
            self,
            topology=self.topology.reverse(),
            links=frozenset((v, u) for u, v in self.links),
            leave_via={},
            connection_pairs=frozenset((v, u) for u, v in self.connection_pairs),
            reversed=not self.reversed,
        )


def _machines(topo: Topology) -> tuple[int, list[list[int]]]:
    machines = [list(topo.machine_ranks(m)) for m in range(topo.num_machines)]
    return len(machines[0]), machines


def _check_topology_field(sketch: Sketch, topo: Topology) -> None:
    """The topology a sketch was written for (its ``topology`` field) must have the ranks and
    machines of the one it is used with. A shipped name is compared by shape even when the
    topology in use carries the same name (a user's file reusing it); another name must be the
    topology in use."""
    if sketch.topology is None:
        return
    from topologies.errors import TopologyError
    from topologies.registry import load

    try:
        named = load(sketch.topology)
    except TopologyError:
        if sketch.topology == topo.name:
            return  # the user's own topology, named in the sketch
        raise sketch.fail(
            "topology",
            f"the topology in use ({topo.name!r}) or a shipped one, got {sketch.topology!r}; "
            f"set it to {topo.name!r} or leave it out",
        ) from None
    shape = (named.num_ranks, named.num_machines)
    if shape != (topo.num_ranks, topo.num_machines):
        raise sketch.fail(
            "topology",
            f"written for {named.name} ({shape[0]} ranks on {shape[1]} machine(s)), "
            f"used with {topo.name} ({topo.num_ranks} ranks on {topo.num_machines} machine(s))",
        )


def _via_switch(topo: Topology, a: int, b: int) -> bool:
    link = topo.logical().links.get((a, b))
    kinds = topo.switches
    return link is not None and any(kinds.get(v) not in (None, "nic", "network") for v in link.path[1:-1])


def _intra_links(sketch: Sketch, topo: Topology, g: int, machines: list[list[int]]) -> tuple[set, set]:
    logical = topo.logical()
    node = topo.node_of
    intra = {p for p in logical.links if node[p[0]] == node[p[1]]}
    if sketch.intranode.strategy == "none":
        return intra, set()
    allowed: set[Pair] = set()
    for i, group in enumerate(sketch.intranode.switches):
        field = f"intranode.switches[{i}]"
        for gpu in group:
            if gpu >= g:
                raise sketch.fail(
                    field, f"GPU {gpu} does not exist; expected machine-local indices 0..{g - 1}"
                )
        for ranks in machines:
            for a in group:
                for b in group:
                    if a != b and not _via_switch(topo, ranks[a], ranks[b]):
                        raise sketch.fail(
                            field, f"GPUs {a} and {b} are not joined by a switch in {topo.name}"
                        )
                    if a != b:
                        allowed.add((ranks[a], ranks[b]))
    return allowed, set(allowed)


def _relay_links(sketch: Sketch, topo: Topology, g: int, machines: list[list[int]]) -> tuple[set, dict]:
    inter = sketch.internode
    if topo.num_machines == 1:
        if inter is not None:
            raise sketch.fail("internode", f"nothing: {topo.name} is a single machine")
        return set(), {}
    if inter is None:
        raise sketch.fail("internode", f"a relay strategy: {topo.name} has {topo.num_machines} machines")
    if isinstance(inter.connections, tuple):
        for sender, receivers in inter.connections:
            for gpu in (sender, *receivers):
                if gpu >= g:
                    raise sketch.fail(
                        "internode.connections",
                        f"GPU {gpu} does not exist; expected machine-local indices 0..{g - 1}",
                    )
    logical = topo.logical()
    allowed: set[Pair] = set()
    for s, r in inter.pairs(g):
        for m, src_ranks in enumerate(machines):
            for m2, dst_ranks in enumerate(machines):
                if m == m2:
                    continue
                pair = (src_ranks[s], dst_ranks[r])
                if pair not in logical.links:
                    raise sketch.fail(
                        "internode.connections",
                        f"GPU {s} of machine {m} has no link to GPU {r} of machine {m2} in {topo.name}",
                    )
                allowed.add(pair)
    leave_via: dict[int, frozenset[Pair]] = {}
    senders_of_map = {s for s, _ in inter.pairs(g)}
    for sender, gpus in inter.senders:
        if sender not in senders_of_map:
            raise sketch.fail(
                f"internode.senders.{sender}", f"a sender of internode.connections ({sorted(senders_of_map)})"
            )
        for gpu in gpus:
            if gpu >= g:
                raise sketch.fail(
                    f"internode.senders.{sender}",
                    f"GPU {gpu} does not exist; expected machine-local indices 0..{g - 1}",
                )
        for ranks in machines:
            via = frozenset(p for p in allowed if p[0] == ranks[sender])
            for gpu in gpus:
                leave_via[ranks[gpu]] = via
    return allowed, leave_via


@lru_cache(maxsize=256)
def _is_symmetry(topo: Topology, perm: Perm) -> bool:
    """Whether the rank permutation extends to a link-preserving map of the whole graph."""
    src = topo.graph.copy()
    dst = topo.graph.copy()
    for r in topo.ranks:
        src.nodes[r]["pin"] = perm[r]
        dst.nodes[r]["pin"] = r
    for v in topo.switches:
        src.nodes[v]["pin"] = dst.nodes[v]["pin"] = topo.switches[v]

    def node_match(x: dict, y: dict) -> bool:
        return x["pin"] == y["pin"]

    def edge_match(x: dict, y: dict) -> bool:
        return x["link"] == y["link"]

    return DiGraphMatcher(src, dst, node_match=node_match, edge_match=edge_match).is_isomorphic()


def _compose(p: Perm, q: Perm) -> Perm:
    return tuple(p[x] for x in q)


def _group(sketch: Sketch, topo: Topology, links: frozenset[Pair], leave_via: dict) -> tuple[Perm, ...]:
    n = topo.num_ranks
    gens: list[Perm] = []
    for i, (offset, size) in enumerate(sketch.symmetry_offsets):
        field = f"symmetry_offsets[{i}]"
        if n % size:
            raise sketch.fail(field, f"a group size dividing the {n} ranks of {topo.name}, got {size}")
        perm = rotation(offset, size, n)
        what = f"rotation by {offset} in groups of {size}"
        if not _is_symmetry(topo, perm):
            raise sketch.fail(
                field, f"{what} is not a symmetry of {topo.name} (it does not map links onto equal links)"
            )
        moved = sorted(p for p in links if (perm[p[0]], perm[p[1]]) not in links)
        if moved:
            u, v = moved[0]
            raise sketch.fail(
                field,
                f"{what} maps the allowed link {u}->{v} to {perm[u]}->{perm[v]}, which the sketch does not allow",
            )
        for r, via in sorted(leave_via.items()):
            image = frozenset((perm[a], perm[b]) for a, b in via)
            if leave_via.get(perm[r]) != image:
                raise sketch.fail(field, f"{what} does not map internode.senders onto itself (rank {r})")
        gens.append(perm)
    identity = tuple(range(n))
    seen = {identity: None}
    queue = deque([identity])
    while queue:
        p = queue.popleft()
        for gen in gens:
            q = _compose(gen, p)
            if q not in seen:
                if len(seen) >= MAX_GROUP:
                    raise sketch.fail(
                        "symmetry_offsets", f"rotations generating at most {MAX_GROUP} symmetries"
                    )
                seen[q] = None
                queue.append(q)
    return tuple(seen)


def restrict(sketch: Sketch, topology: Topology) -> Restriction:
    """Check ``sketch`` against ``topology`` (one-line :class:`SketchError` naming the field)."""
    _check_topology_field(sketch, topology)
    g, machines = _machines(topology)
    if any(len(m) != g for m in machines):
        raise sketch.fail(
            "(top level)", f"{topology.name} has machines of different sizes; sketches need equal ones"
        )
    intra, counted = _intra_links(sketch, topology, g, machines)
    relay, leave_via = _relay_links(sketch, topology, g, machines)
    links = frozenset(intra | relay)
    group = _group(sketch, topology, links, leave_via)
    policy = sketch.intranode.hyperedge if sketch.intranode.strategy == "switch" else None
    return Restriction(topology, sketch, links, leave_via, group, frozenset(counted), policy)
