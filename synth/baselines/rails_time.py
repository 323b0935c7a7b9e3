"""The modeled time of a held rail-aligned alltoall from its parts, without the engine's run of all of it.

:func:`simulate_rails` returns exactly what :func:`synth.cost.simulate` returns for the
:class:`~synth.baselines.rails.VerifiedRails`' Algorithm, by feeding the same engine
(:func:`synth.cost.feed`) smaller sets of sends. Why the pieces add up to the whole, each condition
checked on the schedule and topology at hand (where one fails, more is run at once):

- *NVLink apart from the rails.* The engine couples two transfers only through a resource (a
  physical edge, a connection) or a data dependency (:mod:`synth.reductions.hierarchy_time`, "Parts
  apart"). A send inside a machine reads its origin's own chunk (no dependency); a send across
  reads its origin's chunk or one the shuffle wrote, so only the relayed sends across wait, for
  that one write. When no edge of a route inside a machine is on a route across (connections differ:
  one pair is inside, the other across), the whole run is one run of the NVLink sends and one of
  the sends across, each relayed send ready at its shuffle's arrival (an arrival is a later instant
  than its start where every transfer takes longer than the engine's tolerance; else all at once).
- *One machine for all.* Machines whose routes share no edge run apart; where every machine's
  NVLink rows are machine 0's moved (``across`` sends every machine the same distance on, so the
  rows, ordered by keys relative to the machine with the machine last, are), and its routes have
  machine 0's shape (rates, counts, latencies, which pairs share an edge), machine 0's run stands
  for all (:func:`synth.reductions.hierarchy_time` argues the same for its machines).
- *One rail for all.* Rails whose routes share no edge run apart; where every rail has rail 0's
  map of the machines, routes of rail 0's shape and each relayed row ready when rail 0's matching
  row is (the order is relative to the rail, the rail last), rail 0's run stands for all g rails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from synth.algorithm import Send
from synth.baselines.rails import off_diagonal
from synth.cost import SimResult, algbw_GBps, calls_apart, chunk_bytes, feed
from synth.timing import DEFAULT, Network, Params
from topologies.numeric import distinct

if TYPE_CHECKING:
    from synth.baselines.rails import Rails, Routes, VerifiedRails
    from topologies.model import Topology

__all__ = ["simulate_rails"]


def simulate_rails(
    verified: VerifiedRails,
    topology: Topology,
    size_bytes: float,
    params: Params = DEFAULT,
    *,
    log: Callable[[str], None] | None = None,
) -> SimResult:
    """:func:`synth.cost.simulate` of ``verified``'s Algorithm from the engine's runs of its parts
    (module docstring); ``log`` gets one line saying which runs were made."""
    rails, n = verified.rails, verified.rails.num_ranks
    network = Network(topology, params)
    nbytes = chunk_bytes(verified.collective, size_bytes)
    merge = not calls_apart(verified.provenance)
    run = _Run(network, nbytes, merge, rails, verified)
    finish, how = _finish(run, topology)
    if log is not None:
        log(f"alltoall timed: {how}")
    if finish > 0:
        finish += params.launch_us
    algbw = algbw_GBps(size_bytes, finish)
    factor = (n - 1) / n
    return SimResult(size_bytes, finish, algbw, algbw * factor, params.label)


class _Run:
    """What the runs share: the engine's network, a chunk's bytes, whether calls merge, the rows."""

    def __init__(self, network: Network, nbytes: float, merge: bool, rails: Rails, verified: VerifiedRails):
        self.network, self.nbytes, self.merge = network, nbytes, merge
        self.rails, self.routes = rails, verified.routes
        self.steps = verified.steps

    def feed(self, blocks: list[np.ndarray], ready: list[np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
        """(start, arrival) per row of ``blocks`` (one per Algorithm step, in order) in one run."""
        sends = [(k, Send(c, s, d)) for k, block in enumerate(blocks) for c, s, d in block.tolist()]
        self.network.topology.logical().route((s.src, s.dst) for _, s in sends)  # one search per source
        at = np.concatenate(ready).tolist() if ready is not None and blocks else None
        started, arrived = feed(sends, self.network, self.nbytes, self.merge, at)
        return np.array(started, np.float64), np.array(arrived, np.float64)


def _finish(run: _Run, topology: Topology) -> tuple[float, str]:
    """The last arrival and how it was found."""
    rails, routes = run.rails, run.routes
    k, g, n = rails.machines, rails.size, rails.num_ranks
    why = _fault(run, topology)
    if why:
        blocks = [rails.rows(t)[0] for t in run.steps]
        return float(
            run.feed(blocks, None)[1].max(initial=0.0)
        ), f"one run of all {rails.num_sends:,} sends ({why})"
    began = time.perf_counter()
    one_machine = _machines_alike(rails, routes)
    nv, rail0, first = (
        [],
        [],
        [],
    )  # NVLink rows (machine 0's where it stands for all), rail 0's, machine 0's across
    for t in run.steps:
        made = rails.rows(t)
        nv.append(_pick(made, 0, 0 if one_machine else None, g))
        rail0.append(_pick(made, 1, 0, g, by_rail=True))
        first.append(_pick(made, 1, 0 if one_machine else None, g))
    _, nv_arrived = run.feed(nv, None)
    arrival = _Arrivals(nv, nv_arrived, n, rails, relative=one_machine)
    nv_done = float(nv_arrived.max(initial=0.0))
    one_rail = _rails_alike(rails, routes) and _ready_alike(first, arrival, g)
    across = rail0 if one_rail else [_pick(rails.rows(t), 1, None, g) for t in run.steps]
    ready = [arrival.ready(block) for block in across]
    _, rail_arrived = run.feed(across, ready)
    finish = max(nv_done, float(rail_arrived.max(initial=0.0)))
    nv_sends, rail_sends = sum(map(len, nv)), sum(map(len, across))
    machines = (
        f"machine 0's {nv_sends:,} NVLink sends for all {k}"
        if one_machine
        else f"all {k} machines' {nv_sends:,}"
    )
    rails_how = (
        f"rail 0's {rail_sends:,} sends for all {g} rails" if one_rail else f"all {g} rails' {rail_sends:,}"
    )
    return finish, f"{machines}; {rails_how} in one run each ({time.perf_counter() - began:.1f} s)"


def _pick(
    made: tuple[np.ndarray, np.ndarray], kind: int, only: int | None, g: int, by_rail: bool = False
) -> np.ndarray:
    """The rows of one kind (NVLink 0, rail 1), of machine (or rail) ``only`` where given."""
    rows, kinds = made
    rows = rows[kinds == kind]
    if only is None:
        return rows
    key = rows[:, 1] % g if by_rail else rows[:, 1] // g
    return rows[key == only]


class _Arrivals:
    """When each NVLink row's chunk arrived, looked up by (rank, chunk): relative to the machine
    where machine 0's run stands for all."""

    def __init__(self, blocks: list[np.ndarray], arrived: np.ndarray, n: int, rails: Rails, relative: bool):
        self.n, self.rails, self.relative = n, rails, relative
        rows = np.concatenate(blocks) if blocks else np.zeros((0, 3), np.int64)
        codes = self._code(rows[:, 2], rows[:, 0])
        order = np.argsort(codes, kind="stable")
        self.codes, self.times = codes[order], arrived[order]

    def _code(self, rank: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        n, c, g = self.n, self.rails.chunks, self.rails.size
        if self.relative:  # counted from the rank's machine: origin and final moved back by it
            shift = rank // g * g
            origin, final, piece = chunk // (n * c), chunk // c % n, chunk % c
            chunk = ((origin - shift) % n * n + (final - shift) % n) * c + piece
            rank = rank - shift
        return rank * (n * n * c) + chunk

    def ready(self, block: np.ndarray) -> np.ndarray:
        """Per rail row, when the shuffle's write of its chunk at its source arrived (0.0: none)."""
        if not len(self.codes) or not len(block):
            return np.zeros(len(block))
        want = self._code(block[:, 1], block[:, 0])
        at = np.minimum(np.searchsorted(self.codes, want), len(self.codes) - 1)
        return np.where(self.codes[at] == want, self.times[at], 0.0)


def _fault(run: _Run, topology: Topology) -> str:
    """Why the NVLink and rail sends cannot run apart ('' where they can)."""
    routes, g = run.routes, run.rails.size
    src, dst = routes.codes // routes.num_ranks, routes.codes % routes.num_ranks
    inside = np.repeat(src // g == dst // g, np.diff(routes.start))
    if np.intersect1d(routes.edges[inside], routes.edges[~inside]).size:
        return "a route inside a machine shares an edge with a route across"
    params = run.network.params
    fastest = max(r.bandwidth_GBps for r in topology.logical().resources.values())
    if params.send_us + params.hold_us(fastest, run.nbytes) <= 2 * params.tolerance_us:
        return "a transfer takes no longer than the engine's tolerance"
    return ""


def _shapes(routes: Routes, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the pairs (indices, in order): edges per pair, and per edge its rate/count/latency key
    and its first place among the pairs' edges (which pairs share an edge)."""
    edges, count = routes.edges_of(pairs)
    _, where, inverse = np.unique(edges, return_index=True, return_inverse=True)
    return count, routes.props[edges], where[inverse]


def _alike(routes: Routes, groups: list[np.ndarray]) -> bool:
    """Whether every group of pairs (same length, matching order) has the first's route shape,
    and no edge is used by two groups."""
    base = _shapes(routes, groups[0])
    seen: list[np.ndarray] = []
    for pairs in groups:
        shape = _shapes(routes, pairs)
        if any(not np.array_equal(a, b) for a, b in zip(shape, base, strict=True)):
            return False
        seen.append(distinct(routes.edges_of(pairs)[0]))
    every = np.concatenate(seen)
    return len(distinct(every)) == len(every)


def _machines_alike(rails: Rails, routes: Routes) -> bool:
    """Every machine's NVLink rows are machine 0's moved and its routes have machine 0's shape."""
    k, g = rails.machines, rails.size
    ahead = (rails.across - np.arange(k)[None, None, :]) % k
    if g < 2 or not np.all(ahead == ahead[:, :, :1]):
        return False
    a, b = off_diagonal(g)
    return _alike(routes, [routes.index(m * g + a, m * g + b) for m in range(k)])


def _rails_alike(rails: Rails, routes: Routes) -> bool:
    """Every rail has rail 0's map of the machines, and routes of rail 0's shape."""
    k, g = rails.machines, rails.size
    if g < 2 or not np.all(rails.across == rails.across[:, :1, :]):
        return False
    m, x = off_diagonal(k)
    return _alike(routes, [routes.index(m * g + b, x * g + b) for b in range(g)])


def _ready_alike(blocks: list[np.ndarray], arrival: _Arrivals, g: int) -> bool:
    """Every rail's rows are ready when rail 0's matching rows are: ``blocks``, per step, the rows
    across of machine 0 where machines are alike (the others' are then machine 0's), else all."""
    for rows in blocks:
        if not len(rows):
            continue
        at = arrival.ready(rows)
        rail = rows[:, 1] % g
        counts = np.bincount(rail, minlength=g)
        if np.any(counts != counts[0]):
            return False
        by = at[np.argsort(rail, kind="stable")].reshape(g, -1)
        if not np.array_equal(by, np.broadcast_to(by[0], by.shape)):
            return False
    return True
