"""The modeled time of a composed allgather from its parts, without the engine's run of all of it.

:func:`simulate_composition` returns exactly what :func:`synth.cost.simulate` returns for the
Algorithm made of a :class:`~synth.reductions.hierarchy.Composition` (``to_steps``), by feeding the
same engine (:func:`synth.cost.feed`) smaller sets of sends. Why the pieces add up to the whole,
checked on the composition and topology at hand (where a check fails, more is run at once):

- *Parts apart.* The engine couples two transfers only through a resource (a physical edge, a
  connection) or a data dependency; the sender's busy time holds nothing. The rails' sends come
  first and read only what rails wrote, so none waits for an inner send; when no edge of a rail
  route is on an inner route, the whole run is one run of the rails' sends and, per machine, one run
  of its inner sends, each ready no earlier than the rails' arrival of the chunk it reads. That
  holds when every transfer takes longer than the engine's tolerance (an arrival is then a later
  instant than the start it follows, in both runs); else everything runs at once.
- *One rail for all.* When every rail route is the source rank's way up to the network followed by
  the destination's way down, these ways share no edge and rank ``m*g + r``'s way has the edges
  (rate, count, latency) of rank ``m*g``'s, and rail r's sends are rail 0's moved by r in the same
  order, rail r runs as rail 0 does: one rail is run and its times stand for every rail (else all
  rails run together).
- *One run per kind of machine.* Machines that share no edge run apart; two whose inner sends,
  counted from the machine (chunks from its own origin, ranks by place), come in the same order,
  with the same ready times from the rails, over routes of the same shape and rates, run alike: each
  kind runs once (``ordered`` sorts by such relative keys, so on a symmetric network all machines
  are one kind). Machines that share an edge run together.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from synth.algorithm import Send
from synth.collectives import make_collective
from synth.cost import SimResult, algbw_GBps, calls_apart, chunk_bytes, feed
from synth.timing import DEFAULT, Network, Params
from topologies.routes import NETWORK

if TYPE_CHECKING:
    from synth.algorithm import Provenance
    from synth.reductions.hierarchy import Composition
    from topologies.logical import Edge, LogicalTopology
    from topologies.model import Topology

__all__ = ["simulate_composition"]


@dataclass(frozen=True)
class _Run:
    """What one call needs: the engine's network, one chunk's bytes, whether calls merge."""

    network: Network
    nbytes: float
    merge: bool
    num_ranks: int
    chunks: int
    """Chunks per rank of the composed allgather."""
    size: int
    """Ranks per machine."""
    count: int
    """Machines."""


def simulate_composition(
    composition: Composition,
    topology: Topology,
    size_bytes: float,
    params: Params = DEFAULT,
    *,
    provenance: Provenance | None = None,
    log: Callable[[str], None] | None = None,
) -> SimResult:
    """:func:`synth.cost.simulate` of the composition's Algorithm (``provenance``: the one it
    carries, which says whether a step's sends on one connection are one call), from the engine's
    runs of its parts (module docstring); ``log`` gets one line saying which runs were made."""
    machines = composition.machines
    collective = make_collective("allgather", topology.num_ranks, composition.chunks, lazy=True)
    run = _Run(
        Network(topology, params),
        chunk_bytes(collective, size_bytes),
        not calls_apart(provenance),
        topology.num_ranks,
        composition.chunks,
        machines.size,
        machines.count,
    )
    finish, how = _finish(composition, run)
    if log is not None:
        log(f"composition timed: {how}")
    if finish > 0:
        finish += params.launch_us
    algbw = algbw_GBps(size_bytes, finish)
    return SimResult(size_bytes, finish, algbw, algbw * collective.busbw_factor, params.label)


def _finish(composition: Composition, run: _Run) -> tuple[float, str]:
    """The last arrival and how it was found."""
    rails, inner = composition.blocks[: composition.rail_steps], composition.blocks[composition.rail_steps :]
    why = _shape_fault(rails, inner, run)
    if why:
        return _whole(composition.blocks, run), f"one run of all {composition.num_sends:,} sends ({why})"
    began = time.perf_counter()
    ways, routes = _checked_routes(composition, run)
    checked = time.perf_counter()
    owners = {m: edges for m, (edges, _) in routes.items()}
    if any(e in ways.edges for edges in owners.values() for e in edges):
        why = "an inner route shares an edge with a rail"
        return _whole(composition.blocks, run), f"one run of all {composition.num_sends:,} sends ({why})"
    one_rail = ways.apart and ways.alike(run.size) and _shifted(rails, run)
    rail_finish, codes, arrivals, rails_how = _rails(rails, run, one_rail)
    railed = time.perf_counter()
    ready = [_ready(block, codes, arrivals, run, one_rail) for block in inner]
    machines_apart = len({e for edges in owners.values() for e in edges}) == sum(map(len, owners.values()))
    if machines_apart:
        shapes = {m: shape for m, (_, shape) in routes.items()}
        inner_finish, inner_how = _machines(inner, ready, composition.rail_steps, shapes, run)
    else:
        sends = _sends(inner, composition.rail_steps)
        at = np.concatenate(ready).tolist() if ready else []
        inner_finish = max(feed(sends, run.network, run.nbytes, run.merge, at)[1], default=0.0)
        inner_how = f"all machines' {len(sends):,} inner sends in one run (machines share an edge)"
    done = time.perf_counter()
    seconds = f"routes checked in {checked - began:.1f} s, rails {railed - checked:.1f} s, machines {done - railed:.1f} s"
    return max(rail_finish, inner_finish), f"{rails_how}; {inner_how} ({seconds})"


_CHECKED: list = []
"""The last composition's checked routes, ``[(weak composition, weak logical view, ways, inner
routes)]``: they depend on the composition and topology only, so timing it in a second model (a
benchmark's ideal and calibrated times) does not search 4,096 sources' routes again (77 s)."""


def _checked_routes(composition: Composition, run: _Run) -> tuple[_Ways, dict[int, tuple[list, tuple]]]:
    """The rails' ways and the machines' inner routes of ``composition``, found once per
    composition and topology (:data:`_CHECKED`)."""
    logical = run.network.topology.logical()
    if _CHECKED:
        was, where, ways, routes = _CHECKED[0]
        if was() is composition and where() is logical:
            return ways, routes
    rails, inner = composition.blocks[: composition.rail_steps], composition.blocks[composition.rail_steps :]
    ways = _Ways(logical, rails, run.size)
    routes = _inner_routes(logical, inner, run)
    _CHECKED[:] = [(weakref.ref(composition), weakref.ref(logical), ways, routes)]
    return ways, routes


def _shape_fault(rails: tuple[np.ndarray, ...], inner: tuple[np.ndarray, ...], run: _Run) -> str:
    """Why the composition cannot be timed by parts ('' where it can): a rail row that leaves its
    rail or machine pair, an inner row that leaves its machine, a transfer within the tolerance."""
    g, c = run.size, run.chunks
    for block in rails:
        chunk, src, dst = block[:, 0], block[:, 1], block[:, 2]
        if np.any(src // g == dst // g) or np.any(src % g != dst % g) or np.any(chunk // c % g != src % g):
            return "a network step's send is not on its chunk's rail"
    for block in inner:
        if np.any(block[:, 1] // g != block[:, 2] // g):
            return "an inner step's send leaves its machine"
    params = run.network.params
    fastest = max(r.bandwidth_GBps for r in run.network.topology.logical().resources.values())
    if params.send_us + params.hold_us(fastest, run.nbytes) <= 2 * params.tolerance_us:
        return "a transfer takes no longer than the engine's tolerance"
    return ""


def _whole(blocks: tuple[np.ndarray, ...], run: _Run) -> float:
    """The engine's run of every send, as :func:`synth.cost.simulate` makes it."""
    return max(feed(_sends(blocks, 0), run.network, run.nbytes, run.merge)[1], default=0.0)


def _sends(blocks: tuple[np.ndarray, ...] | list[np.ndarray], first_step: int) -> list[tuple[int, Send]]:
    return [(first_step + k, Send(c, s, d)) for k, block in enumerate(blocks) for c, s, d in block.tolist()]


class _Ways:
    """The rails' routes split at the network: each source's way up and each destination's way
    down (vertex ids, the network switch in both), whether every route is up(src) + down(dst)
    (``split``), and the edges the rails use."""

    def __init__(self, logical: LogicalTopology, rails: tuple[np.ndarray, ...], g: int) -> None:
        self.logical = logical
        self.up: dict[int, tuple[int, ...]] = {}
        self.down: dict[int, tuple[int, ...]] = {}
        self.split = True
        unsplit: list[tuple[int, ...]] = []
        n, kind = logical.num_ranks, logical.graph.kind
        pairs = (
            np.unique(np.concatenate([b[:, 1] * n + b[:, 2] for b in rails]))
            if rails
            else np.zeros(0, np.int64)
        )
        sources, first = np.unique(pairs // n, return_index=True)
        ends = [*first[1:].tolist(), len(pairs)]
        for src, lo, hi in zip(sources.tolist(), first.tolist(), ends, strict=True):
            table = logical.table(src)  # one search per source
            for dst in (pairs[lo:hi] % n).tolist():
                ids = table[dst]
                if src % g == 0:
                    logical.link(src, dst)  # rail 0's links, read off the table: one rail's run needs them
                at = next((k for k, v in enumerate(ids) if kind[v] == NETWORK), None)
                if (
                    at is None
                    or self.up.setdefault(src, ids[: at + 1]) != ids[: at + 1]
                    or self.down.setdefault(dst, ids[at:]) != ids[at:]
                ):
                    self.split = False
                    unsplit.append(ids)
        ways = [*self.up.values(), *self.down.values(), *unsplit]
        names = logical.graph.names
        edges = [(names[a], names[b]) for w in ways for a, b in pairwise(w)]
        self.edges: set[Edge] = set(edges)
        """Every edge a rail's send takes (the ways' edges cover the routes checked to split)."""
        self.apart = self.split and len(self.edges) == len(edges)
        """Whether the routes split and no two ways share an edge (so no two rails do)."""

    def alike(self, g: int) -> bool:
        """Whether rank ``m*g + r``'s ways have rank ``m*g``'s edges (rate, count, latency)."""
        for ways in (self.up, self.down):
            for rank, way in ways.items():
                base = ways.get(rank - rank % g)
                if base is None or self._rates(way) != self._rates(base):
                    return False
        return True

    def _rates(self, way: tuple[int, ...]) -> list[tuple[float, int, float]]:
        names, res = self.logical.graph.names, self.logical.resources
        edges = [res[(names[a], names[b])] for a, b in pairwise(way)]
        return [(r.bandwidth_GBps, r.count, r.alpha_us) for r in edges]


def _shifted(rails: tuple[np.ndarray, ...], run: _Run) -> bool:
    """Whether every rail's rows are rail 0's with ranks moved by r and chunks by ``r * chunks``,
    in the same order in each step."""
    g, c = run.size, run.chunks
    for block in rails:
        rail = block[:, 1] % g
        counts = np.bincount(rail, minlength=g)
        if np.any(counts != counts[0]):
            return False
        by_rail = block[np.argsort(rail, kind="stable")].reshape(g, counts[0], 3)
        shift = np.arange(g)[:, np.newaxis, np.newaxis] * np.array([c, 1, 1])
        if not np.array_equal(by_rail - shift, np.broadcast_to(by_rail[0], by_rail.shape)):
            return False
    return True


def _rails(
    rails: tuple[np.ndarray, ...], run: _Run, one_rail: bool
) -> tuple[float, np.ndarray, np.ndarray, str]:
    """The rails' run: last arrival, the written slots' codes (``dst * n * chunks + chunk``; rail 0's
    alone where one rail stands for all) sorted and unique, each slot's last arrival; how it ran."""
    g = run.size
    blocks = [b[b[:, 1] % g == 0] for b in rails] if one_rail else list(rails)
    sends = _sends(blocks, 0)
    run.network.topology.logical().route((s.src, s.dst) for _, s in sends)  # one search per source
    arrived = np.array(feed(sends, run.network, run.nbytes, run.merge)[1], dtype=np.float64)
    rows = np.concatenate(blocks) if blocks else np.zeros((0, 3), np.int64)
    codes = rows[:, 2] * (run.num_ranks * run.chunks) + rows[:, 0]
    order = np.argsort(codes, kind="stable")
    unique, first = np.unique(codes[order], return_index=True)
    last = np.maximum.reduceat(arrived[order], first) if len(first) else arrived
    how = (
        f"one rail's {len(sends):,} sends run for all {g} rails"
        if one_rail
        else f"all {g} rails' {len(sends):,} sends in one run (their routes meet or differ)"
    )
    return float(arrived.max(initial=0.0)), unique, last, how


def _ready(
    block: np.ndarray, codes: np.ndarray, arrivals: np.ndarray, run: _Run, one_rail: bool
) -> np.ndarray:
    """Per inner row, when the rails' writes of the slot it reads have all arrived (0.0: none)."""
    chunk, src = block[:, 0], block[:, 1]
    g, c = run.size, run.chunks
    if one_rail:  # rail r's slot (m*g + r, (o*g + r)*c + j) arrives as rail 0's (m*g, o*g*c + j)
        rail = src % g
        want = np.where(chunk // c % g == rail, (src - rail) * (run.num_ranks * c) + chunk - rail * c, -1)
    else:
        want = src * (run.num_ranks * c) + chunk
    if not len(codes):
        return np.zeros(len(block))
    at = np.minimum(np.searchsorted(codes, want), len(codes) - 1)
    return np.where(codes[at] == want, arrivals[at], 0.0)


def _inner_routes(
    logical: LogicalTopology, inner: tuple[np.ndarray, ...], run: _Run
) -> dict[int, tuple[list, tuple]]:
    """Per machine, the edges its inner sends' routes take (each once) and their shape: per rank
    pair (by place), each edge as its first place in the machine's list, rate, count, latency."""
    n, g = run.num_ranks, run.size
    pairs = (
        np.unique(np.concatenate([b[:, 1] * n + b[:, 2] for b in inner])) if inner else np.zeros(0, np.int64)
    )
    edges: dict[int, dict[Edge, int]] = {}
    shapes: dict[int, list] = {}
    for code in pairs.tolist():  # ascending: machine by machine; a search each, ended at the target
        src, dst = divmod(code, n)
        seen, shape = edges.setdefault(src // g, {}), shapes.setdefault(src // g, [])
        route = []
        for e in logical.links[(src, dst)].edges:
            r = logical.resources[e]
            route.append((seen.setdefault(e, len(seen)), r.bandwidth_GBps, r.count, r.alpha_us))
        shape.append((src % g, dst % g, tuple(route)))
    return {m: (list(seen), tuple(shapes[m])) for m, seen in edges.items()}


def _machines(
    inner: tuple[np.ndarray, ...],
    ready: list[np.ndarray],
    first_step: int,
    shapes: dict[int, tuple],
    run: _Run,
) -> tuple[float, str]:
    """Each kind of machine's inner sends run once (module docstring): last arrival, and how."""
    cut = [_by_machine(block, run) for block in inner]

    def part(m: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Machine m's rows counted from it, and their ready times, step by step."""
        out = []
        for block, at, (order, start) in zip(inner, ready, cut, strict=True):
            take = order[start[m] : start[m + 1]]
            out.append((_relative(block[take], m, run), at[take]))
        return out

    kinds: dict[bytes, list[int]] = {}
    for m in range(run.count):
        digest = hashlib.blake2b(repr(shapes.get(m)).encode())
        for rows, at in part(m):
            digest.update(np.int64(len(rows)).tobytes() + rows.tobytes() + at.tobytes())
        kinds.setdefault(digest.digest(), []).append(m)
    leaders: list[int] = []
    for members in kinds.values():  # each member checked against its kind's first: a digest is no proof
        first = part(members[0])
        leaders.append(members[0])
        for m in members[1:]:
            same = shapes.get(m) == shapes.get(members[0]) and all(
                np.array_equal(a, b) and np.array_equal(x, y)
                for (a, x), (b, y) in zip(part(m), first, strict=True)
            )
            if not same:
                leaders.append(m)
    finish = 0.0
    for m in leaders:
        takes = [order[start[m] : start[m + 1]] for order, start in cut]
        blocks = [block[take] for block, take in zip(inner, takes, strict=True)]
        at = np.concatenate([a[take] for a, take in zip(ready, takes, strict=True)]).tolist() if takes else []
        arrived = feed(_sends(blocks, first_step), run.network, run.nbytes, run.merge, at)[1]
        finish = max(finish, max(arrived, default=0.0))
    per = sum(map(len, inner)) // max(run.count, 1)
    return finish, f"{len(leaders)} machine run(s) of {per:,} inner sends for {run.count} machines"


def _by_machine(block: np.ndarray, run: _Run) -> tuple[np.ndarray, np.ndarray]:
    """The block's rows grouped by machine (in order within each) and where each machine's begin."""
    home = block[:, 1] // run.size
    order = np.argsort(home, kind="stable")
    return order, np.searchsorted(home[order], np.arange(run.count + 1))


def _relative(rows: np.ndarray, m: int, run: _Run) -> np.ndarray:
    """Machine m's rows counted from it: chunks by origin machine ``o - m`` (mod K), ranks by place."""
    span = run.size * run.chunks
    chunk = ((rows[:, 0] // span - m) % run.count) * span + rows[:, 0] % span
    return np.stack([chunk, rows[:, 1] % run.size, rows[:, 2] % run.size], axis=1)
