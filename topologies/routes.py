"""Routes between ranks, found on demand on the physical graph: the engine of the logical view.

A route ``src -> dst`` is the direct link where there is one, else a fewest-hop path through
switches only that obeys two rules of real hardware: a NIC does not forward from one local rank to
another (no path ``rank -> NIC -> rank``), and a path through a network switch joins ranks of
different machines. Among several fewest-hop paths the first in breadth-first order wins (each
vertex's successors in the graph's order), as an exhaustive search over paths would pick.

The search runs over *states* (a switch, whether the path has passed a network switch, whether it
is the first switch after the source), not over paths, so one search costs time linear in the
switches and links it reaches; nothing here holds anything per rank pair. A 512-GPU cluster has
261,632 routes: they are found one source (or one pair) at a time, when asked for.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from topologies.model import Link, Topology, Vertex

__all__ = ["RouteGraph", "Table"]

RANK, PLAIN, NIC, NETWORK = 0, 1, 2, 3
"""Vertex kinds: a rank, a switch that forwards anything, a NIC, a network switch."""

_KIND = {"nic": NIC, "network": NETWORK}

Table = dict[int, tuple[int, ...]]
"""Destination rank -> the route's vertex ids, source first."""


@dataclass(frozen=True, eq=False)
class _Search:
    """One breadth-first search's states: vertex id, passed a network switch, parent state."""

    vertex: list[int]
    network: list[bool]
    parent: list[int]

    def path(self, state: int, first: int, last: int) -> tuple[int, ...]:
        out = [last]
        while state >= 0:
            out.append(self.vertex[state])
            state = self.parent[state]
        out.append(first)
        return tuple(reversed(out))

    def on_path(self, state: int, vertex: int) -> bool:
        while state >= 0:
            if self.vertex[state] == vertex:
                return True
            state = self.parent[state]
        return False


class _Rows:
    """Row ``v`` of a flat list: ``flat[bounds[v]:bounds[v + 1]]`` (a list made when read; no
    list kept per vertex)."""

    def __init__(self, flat: list, bounds: list[int]) -> None:
        self.flat, self.bounds = flat, bounds

    def __getitem__(self, v: int) -> list:
        return self.flat[self.bounds[v] : self.bounds[v + 1]]

    def __len__(self) -> int:
        return len(self.bounds) - 1


class RouteGraph:
    """The physical graph in integer ids (ranks keep theirs, switches follow) with its links,
    read from the topology's arrays (:class:`topologies.arrays.LinkArrays`)."""

    def __init__(self, topo: Topology) -> None:
        arrays = topo.arrays
        n = topo.num_ranks
        self.num_ranks = n
        self.names: list[Vertex] = list(arrays.names)
        self.kind = [RANK] * n + [_KIND.get(k, PLAIN) for k in arrays.switches.values()]
        self.machine = topo.node_of
        bounds = arrays.offsets.tolist()  # successors in the graph's order of links
        values = arrays.values
        self.succ = _Rows(arrays.heads.tolist(), bounds)
        self.succ_links: _Rows = _Rows([values[w] for w in arrays.which.tolist()], bounds)
        order, into = arrays.into  # predecessors ascending
        self.pred = _Rows(arrays.tails[order].tolist(), into.tolist())

    def link(self, a: int, b: int) -> Link:
        """The physical link ``a -> b`` (there is one: a route's hop)."""
        lo = self.succ.bounds[a]
        return self.succ_links.flat[self.succ.flat.index(b, lo, self.succ.bounds[a + 1])]

    # -- routes ---------------------------------------------------------------------------
    def routes(self, src: int, target: int | None = None, reverse: bool = False) -> Table:
        """Routes from ``src`` to every rank it reaches (to ``target`` only, when given: the
        search stops there). ``reverse`` searches backwards: routes *to* ``src``, each path
        still listed source first."""
        if target is None:
            found = dict(self.walk(src, reverse))
            return {w: path[::-1] for w, path in found.items()} if reverse else found
        for w, path in self.walk(src, reverse):
            if w == target:
                return {w: path[::-1] if reverse else path}
        return {}

    def walk(self, src: int, reverse: bool = False) -> Iterator[tuple[int, tuple[int, ...]]]:
        """``(rank, route)`` from ``src`` in the order one search finds them (each rank once):
        a caller that stops at the rank it wants can resume later for the next. ``reverse``
        walks backwards: routes *to* ``src``, each path still listed from ``src`` (``routes``
        turns them round)."""
        adj = self.pred if reverse else self.succ
        n, kind, machine = self.num_ranks, self.kind, self.machine
        found: set[int] = {src}
        for w in adj[src]:
            if w < n and w not in found:
                found.add(w)
                yield w, (src, w)
        search = _Search([], [], [])
        seen: set[tuple[int, bool, bool]] = set()
        for w in adj[src]:
            if w >= n and (w, True, True) not in seen:
                seen.add((w, True, True))
                search.vertex.append(w)
                search.network.append(kind[w] == NETWORK)
                search.parent.append(-1)
        home = machine[src]
        i = 0
        while i < len(search.vertex):
            v, net, first = search.vertex[i], search.network[i], search.parent[i] < 0
            for w in adj[v]:
                if w < n:
                    if w in found or (first and kind[v] == NIC) or (net and machine[w] == home):
                        continue
                    found.add(w)
                    yield w, search.path(i, src, w)
                    continue
                wnet = net or kind[w] == NETWORK
                if (w, wnet, False) in seen or search.on_path(i, w):
                    continue
                seen.add((w, wnet, False))
                search.vertex.append(w)
                search.network.append(wnet)
                search.parent.append(i)
            i += 1

    # -- distances ------------------------------------------------------------------------
    def alpha_distances(self, src: int) -> list[float]:
        """Least sum of link latencies from ``src`` to every rank over chains of routes (inf
        where unreachable). A chain's segments may take any rule-abiding path through switches,
        so on a fabric where a longer path is faster than the fewest-hop route this is lower
        than the chain of routes takes: still a lower bound, and equal to it wherever the paths
        between ranks through switches are unique (trees of switches: every shipped machine).

        Dijkstra over ranks and switch states; a state past a network switch keeps its two best
        distances from different machines (its segment may only end in another machine)."""
        n, kind, machine = self.num_ranks, self.kind, self.machine
        inf = float("inf")
        dist = [inf] * n
        dist[src] = 0.0
        heap: list[tuple[float, int, int, bool, bool]] = [(0.0, src, -1, False, False)]
        best: dict[tuple[int, bool, bool], list[tuple[float, int]]] = {}
        while heap:
            d, v, home, net, first = heapq.heappop(heap)
            if v < n:
                if d > dist[v]:
                    continue
                for w, lk in zip(self.succ[v], self.succ_links[v], strict=True):
                    nd = d + lk.alpha_us
                    if w < n:
                        if nd < dist[w]:
                            dist[w] = nd
                            heapq.heappush(heap, (nd, w, -1, False, False))
                    else:
                        heapq.heappush(heap, (nd, w, machine[v], kind[w] == NETWORK, True))
                continue
            if not _settle(best, (v, net, first), d, home if net else -1):
                continue
            for w, lk in zip(self.succ[v], self.succ_links[v], strict=True):
                nd = d + lk.alpha_us
                if w < n:
                    if (first and kind[v] == NIC) or (net and machine[w] == home) or nd >= dist[w]:
                        continue
                    dist[w] = nd
                    heapq.heappush(heap, (nd, w, -1, False, False))
                else:
                    heapq.heappush(heap, (nd, w, home, net or kind[w] == NETWORK, False))
        return dist

    def hop_distances(self, src: int, successors) -> list[int]:
        """Fewest routes from ``src`` to every rank (-1 where unreachable): breadth-first over
        ``successors(rank)``, stopping once every rank is reached (on a switch fabric the first
        rank's routes often reach them all)."""
        n = self.num_ranks
        dist = [-1] * n
        dist[src] = 0
        left = n - 1
        queue = deque([src])
        while queue and left:
            u = queue.popleft()
            for v in successors(u):
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    left -= 1
                    queue.append(v)
        return dist


def _settle(best: dict, key: tuple, d: float, home: int) -> bool:
    """Whether a switch state popped at distance ``d`` from machine ``home`` is worth expanding:
    the first time, or (past a network switch) the first time from a second machine."""
    seen = best.setdefault(key, [])
    if home < 0:
        if seen:
            return False
        seen.append((d, home))
        return True
    if len(seen) >= 2 or any(h == home for _, h in seen):
        return False
    seen.append((d, home))
    return True
