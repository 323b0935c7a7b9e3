"""From a tree packing to an allgather Algorithm: chunks shared out by rate, pipelined down each tree.

Each rank's buffer is cut into C chunks; a representative root's chunks go to its trees in
proportion to their rates (largest remainders), and every image of the root does the same on the
images of the trees. Chunk j of a tree carrying k of a root's C chunks leaves a vertex at depth d
in step ``floor(j C / k) + d``, so the chunks follow each other down the tree, spread over the C
waves by the tree's rate: the Algorithm's steps are the waves of a pipeline,
and the timing engine (which has no barrier between steps) lets every send go as soon as its chunk
has arrived and its links are free.

C is chosen where the modeled time is least: more chunks match the rates more closely and fill
the pipeline sooner, at the price of more sends (:func:`choose_chunks`), each of which pays the
timing model's per-send cost (the calibrated model's by default: at line rate with free sends, 64
chunks win on ``ring:4`` at 1 MiB, and take 204 us instead of 17 where sends cost 2.8 us).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from common.units import BYTES_PER_US_PER_GBPS
from synth.algorithm import Algorithm, Provenance, Send, Step
from synth.collectives import SLOTS, make_collective
from synth.timing import DEFAULT, Params
from synth.trees.packing import Packing, tree_depths
from topologies.numeric import distinct

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["MAX_CHUNKS", "MAX_SENDS", "Allocation", "allocate", "choose_chunks", "chunk_choices", "schedule"]

MAX_CHUNKS = 64
"""Most chunks per rank :func:`choose_chunks` considers."""
MAX_SENDS = 400_000
"""Most sends :func:`choose_chunks` lets an allgather have by default: building, verifying and
timing cost about 0.1 ms per send on this 2-core machine (an allgather on 512 GPUs has at least
261,632: one chunk per rank)."""


@dataclass(frozen=True)
class Allocation:
    """Chunks per rank, and how many of them each tree of the packing carries (same order)."""

    chunks: int
    per_tree: tuple[int, ...]
    stretch: float
    """The busiest resource's time over the packing's (1.0: the rates are met exactly)."""


def allocate(packing: Packing, chunks: int) -> Allocation:
    """Share ``chunks`` per rank among each root's trees by largest remainders of their rates."""
    per_tree = [0] * len(packing.trees)
    for rep in packing.group.reps:
        idx = [i for i, t in enumerate(packing.trees) if t.root == rep]
        weights = np.array([packing.trees[i].weight_GBps for i in idx])
        share = chunks * weights / weights.sum()
        count = np.floor(share).astype(int)
        for k in np.argsort(-(share - count), kind="stable")[: chunks - count.sum()]:
            count[k] += 1
        for i, c in zip(idx, count, strict=True):
            per_tree[i] = int(c)
    load = sum(c * t.load for c, t in zip(per_tree, packing.trees, strict=True))
    busiest = float(np.max(load / packing.classes.capacity))
    return Allocation(chunks, tuple(per_tree), busiest * packing.rate_GBps / chunks)


def _fill_us(
    packing: Packing, topology: Topology, allocation: Allocation, size_bytes: float, params: Params
) -> float:
    """A rough pipeline fill: the deepest tree's hops, each a chunk over the slowest link at the
    model's rate plus its latency and per-send cost."""
    logical = topology.logical()
    slowest = min(link.bandwidth_GBps for link in logical.links.values())
    alpha = max(link.alpha_us for link in logical.links.values())
    depth = max(
        int(tree_depths(t.parent, t.root).max())
        for t, c in zip(packing.trees, allocation.per_tree, strict=True)
        if c
    )
    chunk = size_bytes / (topology.num_ranks * allocation.chunks)
    return depth * (alpha + params.send_us + chunk / (slowest * params.rate_fraction * BYTES_PER_US_PER_GBPS))


def _calls_us(packing: Packing, allocation: Allocation, params: Params) -> float:
    """The per-send costs the busiest connection pays: one per wave in which it carries chunks (the
    sends of one step between two ranks go as one call, as the timing engine charges them)."""
    if params.send_us <= 0:
        return 0.0
    rows = _sends(packing, allocation)
    n = int(max(rows[:, 2].max(), rows[:, 3].max())) + 1
    calls = distinct((rows[:, 0] * n + rows[:, 2]) * n + rows[:, 3])
    return float(np.bincount(calls % (n * n)).max()) * params.send_us


def chunk_choices(topology: Topology, most_sends: int = MAX_SENDS) -> range:
    """The chunks per rank :func:`choose_chunks` may pick on ``topology``: up to :data:`MAX_CHUNKS`,
    within the collective's size limit and ``most_sends`` (an allgather sends every chunk to every
    other rank: ``n (n - 1) C`` sends), and at least one."""
    n = topology.num_ranks
    return range(1, max(1, min(MAX_CHUNKS, SLOTS.value // (n * n), most_sends // max(1, n * (n - 1)))) + 1)


def choose_chunks(
    packing: Packing,
    topology: Topology,
    size_bytes: float,
    choices: Iterable[int] | None = None,
    params: Params = DEFAULT,
) -> Allocation:
    """The chunks per rank among ``choices`` (default :func:`chunk_choices`) whose estimated time
    at ``size_bytes`` under ``params`` (default the calibrated model) is least: the busiest resource
    at the rounded rates and the model's fraction of line rate, the busiest connection's per-send
    costs, and the deepest tree's fill; a larger count must gain 0.1% to be taken."""
    n = topology.num_ranks
    ideal_us = size_bytes / n / (packing.rate_GBps * params.rate_fraction * BYTES_PER_US_PER_GBPS)
    best: tuple[float, Allocation] | None = None
    for chunks in choices if choices is not None else chunk_choices(topology):
        allocation = allocate(packing, chunks)
        estimate = (
            allocation.stretch * ideal_us
            + _calls_us(packing, allocation, params)
            + _fill_us(packing, topology, allocation, size_bytes, params)
        )
        if best is None or estimate < best[0] * (1 - 1e-3):
            best = (estimate, allocation)
    if best is None:
        raise ValueError("choose_chunks: no chunk count to choose from")
    return best[1]


def _sends(packing: Packing, allocation: Allocation) -> np.ndarray:
    """Every send as a row ``(wave, chunk, src, dst)``: chunk j of a tree with k of a root's C
    chunks leaves a vertex at depth d in wave ``floor(j * C / k) + d`` (each tree's chunks spread
    over the schedule by its rate)."""
    elements = packing.group.elements
    c = allocation.chunks
    rows = []
    first = {int(a): 0 for a in packing.group.reps}
    for tree, count in zip(packing.trees, allocation.per_tree, strict=True):
        if not count:
            continue
        slots = first[tree.root] + np.arange(count)
        first[tree.root] += count
        child = np.flatnonzero(tree.parent >= 0)
        parent = tree.parent[child]
        wave = (np.arange(count) * c // count)[np.newaxis, :, np.newaxis]
        wave = wave + tree_depths(tree.parent, tree.root)[parent][np.newaxis, np.newaxis, :]
        chunk = elements[:, tree.root][:, np.newaxis, np.newaxis] * c + slots[np.newaxis, :, np.newaxis]
        src = elements[:, parent][:, np.newaxis, :]
        dst = elements[:, child][:, np.newaxis, :]
        shape = (len(elements), count, len(child))
        columns = [np.broadcast_to(a, shape).ravel() for a in (wave, chunk, src, dst)]
        rows.append(np.stack(columns, axis=1))
    return np.concatenate(rows)


def _rounds(packing: Packing, topology: Topology, step_classes: list[np.ndarray]) -> list[int]:
    """Each step's rounds in SCCL's integer model (``ChunkCapacity.rounds_needed``), from the link
    orbits its sends belong to: a step holds whole orbits (every image of a tree's send goes in the
    same wave), so its load on each edge is its orbits' loads, without a pass over every rank pair."""
    classes = packing.classes
    chunk = topology.chunk_capacity().edge_capacity
    capacity = np.array([chunk[e] for e in topology.logical().resources], dtype=float)
    order = packing.group.order
    out = []
    for cls in step_classes:
        used = np.bincount(cls, minlength=classes.num_classes)
        load = np.bincount(
            classes.entry_resource,
            weights=used[classes.entry_class] * classes.entry_count,
            minlength=len(capacity),
        )
        out.append(max(1, int(np.ceil(float(np.max(load / (order * capacity))) - 1e-9))))
    return out


def schedule(packing: Packing, topology: Topology, allocation: Allocation, solve_time_s: float) -> Algorithm:
    """The allgather Algorithm of ``packing`` with ``allocation`` (module docstring); not verified."""
    n = topology.num_ranks
    collective = make_collective("allgather", n, allocation.chunks)
    rows = _sends(packing, allocation)
    rows = rows[np.lexsort(rows.T[::-1])]
    bounds = np.flatnonzero(np.diff(rows[:, 0])) + 1
    rounds = _rounds(
        packing, topology, [packing.classes.of[b[:, 2], b[:, 3]] for b in np.split(rows, bounds)]
    )
    steps = []
    for block, r in zip(np.split(rows[:, 1:], bounds), rounds, strict=True):
        steps.append(Step(r, tuple(Send(ch, s, d) for ch, s, d in block.tolist())))
    params = (
        ("chunks", allocation.chunks),
        ("group", packing.group.name),
        ("rate_GBps", round(packing.rate_GBps, 6)),
        ("trees", sum(1 for c in allocation.per_tree if c)),
    )
    prov = Provenance("trees", "highs", solve_time_s, packing.optimal, params=params)
    return Algorithm(collective, topology.name, tuple(steps), prov)
