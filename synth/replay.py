"""The verifier's replay of a copy-only collective, on arrays: the path :func:`synth.verify.verify`
takes for every collective that does not combine (allgather, alltoall, broadcast, gather, scatter).

What each rank holds is one boolean matrix ``holds[rank, chunk]`` (4096 x 4096 GPUs: 16 MB), and a
schedule is one array of rows ``(chunk, src, dst)`` per step, so a composed allgather of 16.8 M
sends (:class:`synth.reductions.hierarchy.Composition`) is verified without one Python object per
send. The checks, their order and their messages are :mod:`synth.verify`'s, exactly: in each step
the first send (in order) that is malformed, has no link, or sends what its source does not hold;
then any link or shared resource loaded past its capacity times the step's rounds; then a chunk
reaching a rank from several sends; at the end every postcondition. Where a collective does not
combine, each address holds one chunk, so a copy can never discard a contribution (the verifier's
other copy check) and holding is a bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from common.arrays import distinct
from synth.errors import VerificationError

if TYPE_CHECKING:
    from synth.collectives import Collective
    from topologies.logical import Overload
    from topologies.model import Topology

__all__ = ["Pairs", "copy_only", "replay_copies"]


def copy_only(collective: Collective) -> bool:
    """Whether ``collective`` replays on arrays: it does not combine and chunk ``i`` is address ``i``."""
    return not collective.combining and all(c.address == i for i, c in enumerate(collective.chunks))


class Pairs:
    """The rank pairs a schedule uses, routed once (one search per source): which are two ranks
    joined by a logical link, and the physical edges each loads, so that a step's loads are
    counted with arrays (:meth:`rounds_needed`, :meth:`overloaded` are
    :class:`~topologies.logical.ChunkCapacity`'s, per step)."""

    def __init__(self, topology: Topology, blocks: Sequence[np.ndarray]) -> None:
        n = self.num_ranks = topology.num_ranks
        rows = [b[:, 1:3] for b in blocks if len(b)]
        both = np.concatenate(rows) if rows else np.zeros((0, 2), dtype=np.int64)
        ok = (both >= 0).all(axis=1) & (both < n).all(axis=1) & (both[:, 0] != both[:, 1])
        self.codes = distinct(both[ok, 0] * n + both[ok, 1])
        src, dst = (self.codes // n).tolist(), (self.codes % n).tolist()
        logical = topology.logical()
        logical.route(zip(src, dst, strict=True))
        capacity = topology.chunk_capacity()
        self._resources = logical.resources
        index = {edge: i for i, edge in enumerate(logical.resources)}
        self.capacity = np.array([capacity.edge_capacity[e] for e in logical.resources], dtype=np.int64)
        linked, edges, counts = [], [], []
        for s, d in zip(src, dst, strict=True):
            link = logical.link(s, d)
            linked.append(link is not None)
            path = () if link is None else link.edges
            edges.extend(index[e] for e in path)
            counts.append(len(path))
        self.linked = np.array(linked, dtype=bool)
        self._edges = np.array(edges, dtype=np.int64)
        self._counts = np.array(counts, dtype=np.int64)

    def index(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Each pair's position in :attr:`codes` (the pairs must be among them)."""
        return np.searchsorted(self.codes, src * self.num_ranks + dst)

    def loads(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Chunks over each physical edge (resources' order) when each pair sends one."""
        per_pair = np.bincount(self.index(src, dst), minlength=len(self.codes))
        weights = np.repeat(per_pair, self._counts)
        return np.bincount(self._edges, weights=weights, minlength=len(self.capacity)).astype(np.int64)

    def rounds_needed(self, block: np.ndarray) -> int:
        """Fewest rounds in which the step's sends fit every edge: 0 for no send, and at least 1
        for a step of sends none of which has a link (so that its replay names the first such send,
        not its rounds)."""
        if not len(block):
            return 0
        load = self.loads(block[:, 1], block[:, 2])
        return max(1, int((-(-load // self.capacity)).max()))

    def overloaded(self, block: np.ndarray, rounds: int) -> Overload | None:
        """The first edge (resources' order) the step loads past ``rounds`` rounds, if any."""
        from topologies.logical import Overload

        if not len(block):
            return None
        load = self.loads(block[:, 1], block[:, 2])
        over = np.flatnonzero(load > self.capacity * rounds)
        if not len(over):
            return None
        e = int(over[0])
        edge = list(self._resources)[e]
        return Overload(self._resources[edge].name, int(self.capacity[e]), int(load[e]))


def _initial(collective: Collective) -> np.ndarray:
    """``holds[rank, chunk]`` before the first step: every chunk at its precondition's ranks."""
    holds = np.zeros((collective.num_ranks, len(collective.chunks)), dtype=bool)
    for ranks, chunks in _grouped(collective, "pre"):
        holds[np.ix_(ranks, chunks)] = True
    return holds


def _grouped(collective: Collective, side: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The chunks grouped by their (shared) rank set on ``side``: (ranks ascending, chunks)."""
    groups: dict[frozenset[int], list[int]] = {}
    for cid, chunk in enumerate(collective.chunks):
        groups.setdefault(getattr(chunk, side), []).append(cid)
    return [(np.array(sorted(r), dtype=np.int64), np.array(c, dtype=np.int64)) for r, c in groups.items()]


def _first_bad_send(
    block: np.ndarray,
    ops: np.ndarray | None,
    names: Sequence[str] | None,
    holds: np.ndarray,
    pairs: Pairs,
    words: tuple[str, str],
) -> tuple[int, str] | None:
    """The first send of the step that fails a per-send check, and what it fails, in the words of
    :mod:`synth.verify` (``words``: the collective's name and the topology's)."""
    n, addresses = holds.shape
    chunk, src, dst = block[:, 0], block[:, 1], block[:, 2]
    ranks_ok = (src >= 0) & (src < n) & (dst >= 0) & (dst < n) & (src != dst)
    chunk_ok = (chunk >= 0) & (chunk < addresses)
    op_ok = np.ones(len(block), dtype=bool) if ops is None else ops == 0
    linked = np.zeros(len(block), dtype=bool)
    linked[ranks_ok] = pairs.linked[pairs.index(src[ranks_ok], dst[ranks_ok])]
    held = np.zeros(len(block), dtype=bool)
    fine = ranks_ok & chunk_ok & op_ok & linked
    held[fine] = holds[src[fine], chunk[fine]]
    bad = np.flatnonzero(~held)
    if not len(bad):
        return None
    i = int(bad[0])
    c, s, d = (int(x) for x in block[i])
    if not ranks_ok[i]:
        return i, f"expected two different ranks in 0..{n - 1}"
    if not chunk_ok[i]:
        return i, f"expected a chunk in 0..{addresses - 1}"
    if ops is not None and ops[i] > 1:
        return i, f"unknown op {names[i] if names is not None else ops[i]!r}"
    if not op_ok[i]:
        return i, f"{words[0]} does not combine; op must be copy"
    if not linked[i]:
        return i, f"no link {s} -> {d} in {words[1]}"
    return i, f"rank {s} does not hold chunk {c} yet"


def replay_copies(
    name: str,
    collective: Collective,
    topology: Topology,
    blocks: Sequence[np.ndarray],
    rounds: Sequence[int],
    *,
    ops: Sequence[np.ndarray] | None = None,
    op_names: Sequence[Sequence[str]] | None = None,
    pairs: Pairs | None = None,
    topology_name: str | None = None,
) -> None:
    """Raise :class:`VerificationError` (named ``name``, as :mod:`synth.verify` names an algorithm)
    unless the steps ``blocks`` (rows ``(chunk, src, dst)``), each lasting ``rounds``, implement the
    copy-only ``collective`` on ``topology`` (:func:`copy_only`). ``ops``: per step, 0 for a copy,
    1 for a reduce, 2 for another op (``op_names`` spells those); ``None``: every send copies.
    ``pairs``: the routed pairs when the caller made them already; ``topology_name``: the name
    messages give the topology (an algorithm's own, default ``topology.name``)."""
    n = collective.num_ranks
    if topology.num_ranks != n:
        raise VerificationError(f"{name}: the topology has {topology.num_ranks} ranks, the collective {n}")
    pairs = pairs if pairs is not None else Pairs(topology, blocks)
    holds = _initial(collective)
    for index, (block, step_rounds) in enumerate(zip(blocks, rounds, strict=True)):
        where = f"{name}: step {index}"
        if step_rounds < 1:
            raise VerificationError(f"{where}: rounds must be >= 1, got {step_rounds}")
        step_ops = None if ops is None else ops[index]
        step_names = None if op_names is None else op_names[index]
        words = (collective.name, topology_name or topology.name)
        bad = _first_bad_send(block, step_ops, step_names, holds, pairs, words)
        if bad is not None:
            i, fault = bad
            chunk, src, dst = (int(x) for x in block[i])
            raise VerificationError(f"{where}: send of chunk {chunk} from rank {src} to rank {dst}: {fault}")
        over = pairs.overloaded(block, step_rounds)
        if over is not None:
            raise VerificationError(
                f"{where}: {over.used} chunks over {over.name} exceed its capacity "
                f"{over.capacity} x {step_rounds} round(s) = {over.capacity * step_rounds}"
            )
        _check_once(where, block, holds.shape[1])
        holds[block[:, 2], block[:, 0]] = True
    _check_posts(name, collective, holds)


def _check_once(where: str, block: np.ndarray, addresses: int) -> None:
    """Raise where a chunk reaches a rank from several sends of the step (the first such, by
    where its first send stands)."""
    keys = block[:, 2] * addresses + block[:, 0]
    _, first, count = np.unique(keys, return_index=True, return_counts=True)
    twice = first[count > 1]
    if len(twice):
        chunk, _, dst = (int(x) for x in block[int(twice.min())])
        raise VerificationError(f"{where}: chunk {chunk} reaches rank {dst} from several sends in one step")


def _check_posts(name: str, collective: Collective, holds: np.ndarray) -> None:
    """Raise naming the first chunk (then the first rank) a postcondition misses."""
    first: tuple[int, int] | None = None
    for ranks, chunks in _grouped(collective, "post"):
        missing = ~holds[np.ix_(ranks, chunks)]
        columns = np.flatnonzero(missing.any(axis=0))
        if len(columns):
            col = int(columns[0])
            found = (int(chunks[col]), int(ranks[int(np.argmax(missing[:, col]))]))
            first = found if first is None or found < first else first
    if first is not None:
        cid, rank = first
        raise VerificationError(f"{name}: postcondition: rank {rank} never gets chunk {cid}")
