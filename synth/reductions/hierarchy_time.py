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

:func:`simulate_stages` times any sequence of such stages the same way (the composed reducescatter:
inner then rails; the allreduce: inner, rails, inner; :mod:`synth.reductions.hierarchy_dual`): each
stage runs after the ones before, a send ready no earlier than the last write of the slot it reads
in an earlier stage; one rail stands for all only where every rail is also ready as rail 0 is, and
machines are alike only where also ready alike. Two inner stages share the machines' edges: they
run apart only where the later one's first start is no earlier than the earlier one's last arrival
(no transfer of one can then delay one of the other: a transfer's arrival is no earlier than the
end of its hold on any resource); else everything runs at once.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from common.memo import SameObjects
from synth.algorithm import Send
from synth.collectives import make_collective
from synth.cost import SimResult, algbw_GBps, calls_apart, chunk_bytes, feed
from synth.timing import DEFAULT, Network, Params
from topologies.numeric import distinct
from topologies.routes import NETWORK

if TYPE_CHECKING:
    from synth.algorithm import Provenance
    from synth.collectives import Collective
    from synth.reductions.hierarchy import Composition, Machines
    from topologies.logical import Edge, LogicalTopology
    from topologies.model import Topology

__all__ = ["INNER", "RAILS", "Stage", "simulate_composition", "simulate_stages"]


RAILS, INNER = "rails", "inner"
"""The kinds of :class:`Stage`: the network's sends (on the rails) and the machines' own."""


@dataclass(frozen=True)
class Stage:
    """Consecutive steps of one part of a composed schedule, from step ``first_step``: the rails'
    sends (``RAILS``) or the machines' inner ones (``INNER``), rows ``(chunk, src, dst)``."""

    kind: str
    first_step: int
    blocks: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class _Run:
    """What one call needs: the engine's network, one chunk's bytes, whether calls merge."""

    network: Network
    nbytes: float
    merge: bool
    num_ranks: int
    chunks: int
    """Chunks per rank of the composed allgather (and of each allgather a composition is made of)."""
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
    collective = make_collective("allgather", topology.num_ranks, composition.chunks, lazy=True)
    cut = composition.rail_steps
    stages = (Stage(RAILS, 0, composition.blocks[:cut]), Stage(INNER, cut, composition.blocks[cut:]))
    return simulate_stages(
        composition,
        stages,
        composition.machines,
        composition.chunks,
        collective,
        topology,
        size_bytes,
        params,
        provenance=provenance,
        log=log,
    )


def simulate_stages(
    owner: object,
    stages: Sequence[Stage],
    machines: Machines,
    chunks: int,
    collective: Collective,
    topology: Topology,
    size_bytes: float,
    params: Params = DEFAULT,
    *,
    provenance: Provenance | None = None,
    log: Callable[[str], None] | None = None,
) -> SimResult:
    """:func:`synth.cost.simulate` of the Algorithm for ``collective`` whose steps are ``stages``'
    (a composed allgather: rails then inner; its dual, a reducescatter: inner then rails; an
    allreduce: inner, rails, inner), from the engine's runs of the parts (module docstring).
    ``chunks``: the chunks per rank of the allgathers it is made of; ``owner``: what holds the
    stages (their routes are checked once per owner and topology)."""
    run = _Run(
        Network(topology, params),
        chunk_bytes(collective, size_bytes),
        not calls_apart(provenance),
        topology.num_ranks,
        chunks,
        machines.size,
        machines.count,
    )
    finish, how = _finish(owner, tuple(stages), run)
    if log is not None:
        log(f"composition timed: {how}")
    if finish > 0:
        finish += params.launch_us
    algbw = algbw_GBps(size_bytes, finish)
    return SimResult(size_bytes, finish, algbw, algbw * collective.busbw_factor, params.label)


def _finish(owner: object, stages: tuple[Stage, ...], run: _Run) -> tuple[float, str]:
    """The last arrival and how it was found."""
    every = [b for s in stages for b in s.blocks]
    rails = [b for s in stages if s.kind == RAILS for b in s.blocks]
    inner = [b for s in stages if s.kind == INNER for b in s.blocks]
    total = sum(map(len, every))
    why = _shape_fault(rails, inner, run)
    if why:
        return _whole(every, run), f"one run of all {total:,} sends ({why})"
    began = time.perf_counter()
    ways, routes = _checked_routes(owner, rails, inner, run)
    checked = time.perf_counter()
    owners = {m: edges for m, (edges, _) in routes.items()}
    if any(e in ways.edges for edges in owners.values() for e in edges):
        why = "an inner route shares an edge with a rail"
        return _whole(every, run), f"one run of all {total:,} sends ({why})"
    apart = len({e for edges in owners.values() for e in edges}) == sum(map(len, owners.values()))
    shapes = {m: shape for m, (_, shape) in routes.items()} if apart else None
    slots = _Slots(run)
    finish, inner_done, hows, spent = 0.0, None, [], {RAILS: 0.0, INNER: 0.0}
    for stage in stages:
        t = time.perf_counter()
        ready = [slots.ready(block) for block in stage.blocks]
        if stage.kind == RAILS:
            started, arrived, how = _rails(stage, ready, ways, run)
        else:
            started, arrived, how = _machines(stage, ready, shapes, run)
            first = min((float(s.min()) for s in started if len(s)), default=float("inf"))
            if inner_done is not None and first < inner_done:
                why = "a machine's inner sends of two stages overlap in time"
                return _whole(every, run), f"one run of all {total:,} sends ({why})"
            inner_done = max(inner_done or 0.0, max((float(a.max()) for a in arrived if len(a)), default=0.0))
        slots.add(stage.blocks, arrived)
        finish = max(finish, max((float(a.max()) for a in arrived if len(a)), default=0.0))
        hows.append(how)
        spent[stage.kind] += time.perf_counter() - t
    seconds = f"routes checked in {checked - began:.1f} s, rails {spent[RAILS]:.1f} s, machines {spent[INNER]:.1f} s"
    return finish, f"{'; '.join(hows)} ({seconds})"


class _Slots:
    """When each slot ``(rank, chunk)`` written by the stages run so far was last written: a
    send of a later stage is ready no earlier (the engine's rule, :func:`synth.cost.feed`)."""

    def __init__(self, run: _Run) -> None:
        self.width = run.num_ranks * run.chunks
        self.codes = np.zeros(0, np.int64)
        self.times = np.zeros(0, np.float64)

    def ready(self, block: np.ndarray) -> np.ndarray:
        """Per row, the last write of the slot it reads (0.0: none)."""
        if not len(self.codes):
            return np.zeros(len(block))
        want = block[:, 1] * self.width + block[:, 0]
        at = np.minimum(np.searchsorted(self.codes, want), len(self.codes) - 1)
        return np.where(self.codes[at] == want, self.times[at], 0.0)

    def add(self, blocks: Sequence[np.ndarray], arrived: Sequence[np.ndarray]) -> None:
        codes = np.concatenate([self.codes, *(b[:, 2] * self.width + b[:, 0] for b in blocks)])
        times = np.concatenate([self.times, *arrived])
        order = np.argsort(codes, kind="stable")
        self.codes, first = np.unique(codes[order], return_index=True)
        self.times = np.maximum.reduceat(times[order], first) if len(first) else times


_CHECKED = SameObjects()
"""The last composition's checked routes, by the identity of its owner and the topology's logical
view: they depend on those only, so timing it in a second model (a benchmark's ideal and calibrated
times) does not search 4,096 sources' routes again (77 s)."""


def _checked_routes(
    owner: object, rails: list[np.ndarray], inner: list[np.ndarray], run: _Run
) -> tuple[_Ways, dict[int, tuple[list, tuple]]]:
    """The rails' ways and the machines' inner routes of ``owner``'s stages, found once per owner
    and topology (:data:`_CHECKED`)."""
    logical = run.network.topology.logical()
    return _CHECKED.get(
        [owner, logical], "routes", lambda: (_Ways(logical, rails), _inner_routes(logical, inner, run))
    )


def _shape_fault(rails: list[np.ndarray], inner: list[np.ndarray], run: _Run) -> str:
    """Why the stages cannot be timed by parts ('' where they can): a rail row that leaves its
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


def _whole(blocks: list[np.ndarray], run: _Run) -> float:
    """The engine's run of every send, as :func:`synth.cost.simulate` makes it."""
    return max(feed(_sends(blocks, 0), run.network, run.nbytes, run.merge)[1], default=0.0)


def _sends(blocks: tuple[np.ndarray, ...] | list[np.ndarray], first_step: int) -> list[tuple[int, Send]]:
    return [(first_step + k, Send(c, s, d)) for k, block in enumerate(blocks) for c, s, d in block.tolist()]


class _Ways:
    """The rails' routes split at the network: each source's way up and each destination's way
    down (vertex ids, the network switch in both), whether every route is up(src) + down(dst)
    (``split``), and the edges the rails use."""

    def __init__(self, logical: LogicalTopology, rails: list[np.ndarray]) -> None:
        self.logical = logical
        self.up: dict[int, tuple[int, ...]] = {}
        self.down: dict[int, tuple[int, ...]] = {}
        self.split = True
        unsplit: list[tuple[int, ...]] = []
        n, kind = logical.num_ranks, logical.graph.kind
        pairs = (
            distinct(np.concatenate([b[:, 1] * n + b[:, 2] for b in rails]))
            if rails
            else np.zeros(0, np.int64)
        )
        # the routes the verification made (one search per source for any it did not): searched
        # again from a table per source, 4,096 sources took 77 s at 4096 GPUs after the
        # verification's own search, its tables not kept (TABLES_KEPT)
        logical.route(zip((pairs // n).tolist(), (pairs % n).tolist(), strict=True))
        index = {v: i for i, v in enumerate(logical.graph.names)}
        for src, dst in zip((pairs // n).tolist(), (pairs % n).tolist(), strict=True):
            ids = tuple(index[v] for v in logical.links[(src, dst)].path)
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


def _shifted(rails: list[np.ndarray], run: _Run) -> bool:
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
    stage: Stage, ready: list[np.ndarray], ways: _Ways, run: _Run
) -> tuple[list[np.ndarray], list[np.ndarray], str]:
    """The rails' run: each row's start and arrival, and how it ran. One rail's run stands for
    all when the routes allow it (module docstring) and every rail is ready as rail 0 is."""
    g = run.size
    blocks = list(stage.blocks)
    one = ways.apart and ways.alike(g) and _shifted(blocks, run) and _alike_ready(blocks, ready, run)
    picks = [np.flatnonzero(b[:, 1] % g == 0) if one else np.arange(len(b)) for b in blocks]
    taken = [b[p] for b, p in zip(blocks, picks, strict=True)]
    sends = _sends(taken, stage.first_step)
    run.network.topology.logical().route((s.src, s.dst) for _, s in sends)  # one search per source
    at = np.concatenate([r[p] for r, p in zip(ready, picks, strict=True)]).tolist() if blocks else []
    started, arrived = (
        np.array(x, dtype=np.float64) for x in feed(sends, run.network, run.nbytes, run.merge, at)
    )
    outs = tuple(
        [_spread(b, t, g) if one else t for b, t in zip(blocks, _split(times, taken), strict=True)]
        for times in (started, arrived)
    )
    how = (
        f"one rail's {len(sends):,} sends run for all {g} rails"
        if one
        else f"all {g} rails' {len(sends):,} sends in one run (their routes meet or differ)"
    )
    return outs[0], outs[1], how


def _split(times: np.ndarray, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``times`` (one per row of ``blocks``, in order) cut into one array per block."""
    return np.split(times, np.cumsum([len(b) for b in blocks])[:-1]) if blocks else []


def _by_rail(block: np.ndarray, g: int) -> np.ndarray:
    """The block's row indices as a rails x rows matrix (rail r's rows in order; equal counts)."""
    order = np.argsort(block[:, 1] % g, kind="stable")
    return order.reshape(g, len(block) // g)


def _alike_ready(blocks: list[np.ndarray], ready: list[np.ndarray], run: _Run) -> bool:
    """Whether every rail's rows are ready when rail 0's matching rows are."""
    for block, at in zip(blocks, ready, strict=True):
        if len(block):
            by = at[_by_rail(block, run.size)]
            if not np.array_equal(by, np.broadcast_to(by[0], by.shape)):
                return False
    return True


def _spread(block: np.ndarray, times: np.ndarray, g: int) -> np.ndarray:
    """Rail 0's times (its rows in order) given to the matching row of every rail."""
    out = np.empty(len(block))
    if len(block):
        out[_by_rail(block, g)] = times[np.newaxis, :]
    return out


def _inner_routes(
    logical: LogicalTopology, inner: list[np.ndarray], run: _Run
) -> dict[int, tuple[list, tuple]]:
    """Per machine, the edges its inner sends' routes take (each once) and their shape: per rank
    pair (by place), each edge as its first place in the machine's list, rate, count, latency."""
    n, g = run.num_ranks, run.size
    pairs = (
        distinct(np.concatenate([b[:, 1] * n + b[:, 2] for b in inner])) if inner else np.zeros(0, np.int64)
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
    stage: Stage, ready: list[np.ndarray], shapes: dict[int, tuple] | None, run: _Run
) -> tuple[list[np.ndarray], list[np.ndarray], str]:
    """Each row's start and arrival when each kind of machine's inner sends run once (module
    docstring), or all machines' in one run where they share an edge (``shapes`` None); how."""
    blocks = list(stage.blocks)
    if shapes is None:
        sends = _sends(blocks, stage.first_step)
        at = np.concatenate(ready).tolist() if blocks else []
        started, arrived = (
            np.array(x, dtype=np.float64) for x in feed(sends, run.network, run.nbytes, run.merge, at)
        )
        how = f"all machines' {len(sends):,} inner sends in one run (machines share an edge)"
        return _split(started, blocks), _split(arrived, blocks), how
    cut = [_by_machine(block, run) for block in blocks]
    takes = [[order[start[m] : start[m + 1]] for order, start in cut] for m in range(run.count)]
    runs = _kinds(blocks, ready, takes, shapes, run)
    started = [np.zeros(len(b)) for b in blocks]
    arrived = [np.zeros(len(b)) for b in blocks]
    for leader, members in runs:
        rows = [block[take] for block, take in zip(blocks, takes[leader], strict=True)]
        at = np.concatenate([a[take] for a, take in zip(ready, takes[leader], strict=True)]).tolist()
        times = feed(_sends(rows, stage.first_step), run.network, run.nbytes, run.merge, at)
        for out, got in zip((started, arrived), times, strict=True):
            for k, piece in enumerate(_split(np.array(got, dtype=np.float64), rows)):
                for m in members:
                    out[k][takes[m][k]] = piece
    per = sum(map(len, blocks)) // max(run.count, 1)
    return started, arrived, f"{len(runs)} machine run(s) of {per:,} inner sends for {run.count} machines"


def _kinds(
    blocks: list[np.ndarray],
    ready: list[np.ndarray],
    takes: list[list[np.ndarray]],
    shapes: dict[int, tuple],
    run: _Run,
) -> list[tuple[int, list[int]]]:
    """The machines grouped by kind: (the one run, the machines it stands for). Alike: the same
    route shapes and the same rows counted from the machine, in the same order, ready alike."""

    def part(m: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [
            (_relative(block[take], m, run), at[take])
            for block, at, take in zip(blocks, ready, takes[m], strict=True)
        ]

    kinds: dict[bytes, list[int]] = {}
    for m in range(run.count):
        digest = hashlib.blake2b(repr(shapes.get(m)).encode())
        for rows, at in part(m):
            digest.update(np.int64(len(rows)).tobytes() + rows.tobytes() + at.tobytes())
        kinds.setdefault(digest.digest(), []).append(m)
    runs: list[tuple[int, list[int]]] = []
    for members in kinds.values():  # each member checked against its kind's first: a digest is no proof
        first = part(members[0])
        alike = [members[0]]
        for m in members[1:]:
            same = shapes.get(m) == shapes.get(members[0]) and all(
                np.array_equal(a, b) and np.array_equal(x, y)
                for (a, x), (b, y) in zip(part(m), first, strict=True)
            )
            if same:
                alike.append(m)
            else:
                runs.append((m, [m]))
        runs.append((members[0], alike))
    return runs


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
