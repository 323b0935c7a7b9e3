"""The instance the routing MILP sees: demands, their symmetry orbits and their candidate links.

A *demand* is one chunk of the collective before chunkup (a source and the ranks that need it);
chunkup splits it into ``k`` pieces that the router moves as a count per link. The sketch's
symmetry group partitions demands into orbits: only one representative per orbit gets variables,
and every other demand uses the image of its representative's routes (TACCL's symmetry, applied by
fixing orbits). A representative's candidate links form a DAG (ranks ordered by hop distance from
the source, then by offset), so any choice of one incoming link per rank is a tree, and no big-M
is needed against cycles. Times are those of :func:`synth.cost.simulate` under the instance's
timing parameters (:class:`synth.timing.Params`): a transfer over a logical link arrives
``send cost + alpha + bytes / rate`` after it starts, holds one server of every physical edge on its
path for ``bytes / edge rate`` and, where sends cost time, its connection for ``send cost + bytes / rate``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from sketches.restrict import Restriction
from synth.collectives import ROOTED, Collective
from synth.errors import InfeasibleError
from synth.timing import CONNECTION, IDEAL, Params

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["Demand", "Instance", "build_instance"]

Pair = tuple[int, int]
Perm = tuple[int, ...]
Edge = tuple


@dataclass(frozen=True)
class Demand:
    """A chunk before chunkup: ``source`` must reach every rank of ``dests``; ``pieces`` are its chunk ids."""

    source: int
    dests: frozenset[int]
    pieces: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Instance:
    """A non-combining collective on a restricted topology at one size (see module docstring)."""

    restriction: Restriction
    collective: Collective
    size_bytes: float
    demands: tuple[Demand, ...]
    reps: tuple[int, ...]
    """Index of one demand per orbit."""
    images: dict[int, tuple[tuple[Perm, int], ...]]
    """Representative -> ``(g, demand index)`` for every demand of its orbit (identity first)."""
    candidates: dict[int, tuple[Pair, ...]]
    """Representative -> its candidate links, in DAG order of their heads."""
    position: dict[int, dict[int, int]]
    """Representative -> rank -> place in its DAG order (the source is 0)."""
    params: Params = IDEAL
    """The timing model the instance is solved under."""

    @property
    def topology(self) -> Topology:
        return self.restriction.topology

    @property
    def chunkup(self) -> int:
        return self.collective.chunks_per_rank

    @property
    def piece_bytes(self) -> float:
        return self.size_bytes / self.collective.size_chunks

    def is_spanning(self, rep: int) -> bool:
        d = self.demands[rep]
        return len(d.dests) == self.topology.num_ranks - 1

    # -- the simulator's time model ---------------------------------------------------------
    @cached_property
    def delay_us(self) -> dict[Pair, float]:
        """Arrival delay of one piece over every allowed logical link."""
        logical = self.topology.logical()
        nbytes = self.piece_bytes
        return {pair: self.params.delay_us(logical.links[pair], nbytes) for pair in self.restriction.links}

    @cached_property
    def hold_us(self) -> dict[Edge, float]:
        """How long one piece holds one server of each physical edge."""
        nbytes = self.piece_bytes
        return {
            edge: self.params.hold_us(res.bandwidth_GBps, nbytes)
            for edge, res in self.topology.logical().resources.items()
        }

    @cached_property
    def load_terms(self) -> dict[Edge, dict[tuple[int, Pair], float]]:
        """Resource -> ``{(rep, candidate link): us of its time per piece}``, summed over the orbit
        (a resource with ``count`` servers counts each piece as ``1/count`` of its time). Where sends
        cost time, each connection is a resource too."""
        logical = self.topology.logical()
        resources = logical.resources
        out: dict[Edge, dict[tuple[int, Pair], float]] = {}
        nbytes = self.piece_bytes
        for rep in self.reps:
            for g, _ in self.images[rep]:
                for u, v in self.candidates[rep]:
                    link = logical.links[(g[u], g[v])]
                    loads = [(edge, self.hold_us[edge] / resources[edge].count) for edge in link.edges]
                    if self.params.send_us > 0:
                        lanes = min(resources[e].count for e in link.edges)
                        loads.append(((CONNECTION, g[u], g[v]), self.params.occupy_us(link, nbytes) / lanes))
                    for edge, load in loads:
                        terms = out.setdefault(edge, {})
                        key = (rep, (u, v))
                        terms[key] = terms.get(key, 0.0) + load
        return out


def _demands(collective: Collective) -> tuple[Demand, ...]:
    groups: dict[tuple[frozenset, frozenset], list[int]] = {}
    for cid, chunk in enumerate(collective.chunks):
        if chunk.post - chunk.pre:
            groups.setdefault((chunk.pre, chunk.post), []).append(cid)
    out = []
    for (pre, post), ids in groups.items():
        if len(pre) != 1:
            raise InfeasibleError(
                f"MILP synthesis needs one source per chunk; {collective.name} has {len(pre)}"
            )
        (src,) = pre
        out.append(Demand(src, frozenset(post - pre), tuple(sorted(ids))))
    return tuple(sorted(out, key=lambda d: d.pieces))


def _orbits(demands: tuple[Demand, ...], group: tuple[Perm, ...]) -> tuple[tuple[int, ...], dict]:
    index = {(d.source, d.dests): i for i, d in enumerate(demands)}
    seen: set[int] = set()
    reps: list[int] = []
    images: dict[int, tuple[tuple[Perm, int], ...]] = {}
    for i, d in enumerate(demands):
        if i in seen:
            continue
        reps.append(i)
        orbit: list[tuple[Perm, int]] = []
        for g in group:
            j = index.get((g[d.source], frozenset(g[x] for x in d.dests)))
            if j is None:
                raise InfeasibleError("the sketch's symmetry does not map the collective onto itself")
            if j not in seen:
                seen.add(j)
                orbit.append((g, j))
        images[i] = tuple(orbit)
    return tuple(reps), images


def _bfs(n: int, succ: dict[int, list[int]], start: int) -> list[int]:
    dist = [-1] * n
    dist[start] = 0
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for v in succ.get(u, ()):
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def _candidates(restriction: Restriction, demand: Demand) -> tuple[tuple[Pair, ...], dict[int, int]]:
    """The DAG of links a demand's pieces may use (see module docstring)."""
    n = restriction.num_ranks
    s = demand.source
    links = sorted(restriction.links_for(s))
    succ: dict[int, list[int]] = {}
    pred: dict[int, list[int]] = {}
    for u, v in links:
        succ.setdefault(u, []).append(v)
        pred.setdefault(v, []).append(u)
    dist = _bfs(n, succ, s)
    missing = sorted(d for d in demand.dests if dist[d] < 0)
    if missing:
        raise InfeasibleError(
            f"{restriction.sketch.where}: the sketch leaves rank {missing[0]} unreachable from rank {s}"
        )
    key = {v: (dist[v], (v - s) % n) for v in range(n) if dist[v] >= 0}
    position = {v: i for i, v in enumerate(sorted(key, key=key.__getitem__))}
    if len(demand.dests) == n - 1:
        chosen = [(u, v) for u, v in links if u in key and v != s and key[u] < key[v] and dist[v] >= dist[u]]
    else:
        back = _bfs(n, pred, next(iter(demand.dests))) if len(demand.dests) == 1 else None
        if back is None:
            raise InfeasibleError("MILP synthesis routes chunks to one destination or to every rank")
        (d,) = demand.dests
        chosen = [
            (u, v) for u, v in links if dist[u] >= 0 and back[v] >= 0 and dist[u] + 1 + back[v] == dist[d]
        ]
    chosen.sort(key=lambda p: (position[p[1]], position[p[0]]))
    return tuple(chosen), position


def build_instance(
    restriction: Restriction, collective: Collective, size_bytes: float, params: Params = IDEAL
) -> Instance:
    """Demands, orbits (no symmetry for rooted collectives: their root is fixed) and candidate DAGs,
    timed under ``params``."""
    if collective.combining:
        raise InfeasibleError(f"{collective.name} combines; synthesize it through its dual")
    demands = _demands(collective)
    group = restriction.group if collective.name not in ROOTED else (tuple(range(collective.num_ranks)),)
    reps, images = _orbits(demands, group)
    candidates: dict[int, tuple[Pair, ...]] = {}
    position: dict[int, dict[int, int]] = {}
    for rep in reps:
        candidates[rep], position[rep] = _candidates(restriction, demands[rep])
    return Instance(
        restriction, collective, float(size_bytes), demands, reps, images, candidates, position, params
    )
