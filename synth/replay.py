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

A combining collective is replayed on arrays first too (:func:`replayed_combining`: what each rank
holds of each address as a packed bitset of contributions), but only to pass it: where any check
fails there, :func:`synth.verify.final_state` replays it send by send to name the first fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from synth.errors import VerificationError
from topologies.numeric import distinct

if TYPE_CHECKING:
    from synth.algorithm import Algorithm, Send
    from synth.collectives import Collective
    from topologies.logical import Overload
    from topologies.model import Topology

__all__ = ["Pairs", "copy_only", "replay_copies", "replayed_combining", "step_columns"]


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
    ranks, chunks = _members(collective, "pre")
    holds[ranks, chunks] = True
    return holds


def _members(collective: Collective, side: str) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(rank, chunk)`` of the chunks' rank sets on ``side``, as two columns (read a field
    at a time in C: grouping the 262,144 chunks of a 512-rank alltoall by rank set, then indexing
    each group, was half a second of its verification)."""
    sets = list(map(attrgetter(side), collective.chunks))
    lengths = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    ranks = np.fromiter(chain.from_iterable(sets), dtype=np.int64, count=int(lengths.sum()))
    return ranks, np.repeat(np.arange(len(sets), dtype=np.int64), lengths)


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
    ranks, chunks = _members(collective, "post")
    missing = ~holds[ranks, chunks]
    if missing.any():
        chunks, ranks = chunks[missing], ranks[missing]
        cid = int(chunks.min())
        rank = int(ranks[chunks == cid].min())
        raise VerificationError(f"{name}: postcondition: rank {rank} never gets chunk {cid}")


def step_columns(sends: Sequence[Send]) -> tuple[np.ndarray, np.ndarray] | None:
    """A step's sends as rows ``(chunk, src, dst)`` and op codes (0 copy, 1 reduce, 2 another op),
    read a field at a time in C; None where a field is not a plain ``int`` (a Python caller's
    float, bool or huge int), which only the per-send checks may judge."""
    m = len(sends)
    block = np.empty((m, 3), dtype=np.int64)
    for k, name in enumerate(("chunk", "src", "dst")):
        column = list(map(attrgetter(name), sends))
        if m and set(map(type, column)) != {int}:
            return None
        try:
            block[:, k] = column
        except OverflowError:  # beyond int64: out of range, as the per-send checks will say
            return None
    names = list(map(attrgetter("op"), sends))
    kinds = set(map(type, names))
    if kinds - {str}:
        return None
    found = set(names)
    if found <= {"copy"}:
        ops = np.zeros(m, dtype=np.int64)
    elif found == {"reduce"}:
        ops = np.ones(m, dtype=np.int64)
    else:
        ops = np.array([_OP_CODES.get(op, 2) for op in names], dtype=np.int64)
    return block, ops


_OP_CODES = {"copy": 0, "reduce": 1}


def replayed_combining(algo: Algorithm, topology: Topology) -> bool:
    """Whether the combining ``algo`` replays on ``topology`` with no fault at all, every check of
    :func:`synth.verify.final_state` and the postconditions made on arrays: what each rank holds of
    each address is a packed bitset of contributions (``state[rank, address, word]``), each step
    one gather, one grouping by ``(dst, address)`` and one scatter. False: some check fails, or
    the schedule is not one this path reads (:func:`step_columns`) or the state would be large;
    then the per-send replay, which names the first fault, must judge it (a 512-rank allreduce's
    523,264 sends one by one took 2 s)."""
    coll = algo.collective
    n, addresses = coll.num_ranks, coll.num_addresses
    words = max(1, -(-max(map(len, coll.contributions), default=1) // 64))
    if topology.num_ranks != n or n * addresses * words > _MAX_WORDS or not coll.combining:
        return False
    columns = [step_columns(step.sends) for step in algo.steps]
    if any(c is None for c in columns) or any(step.rounds < 1 for step in algo.steps):
        return False
    blocks = [block for block, _ in columns]
    for block in blocks:
        chunk, src, dst = block[:, 0], block[:, 1], block[:, 2]
        ranks_ok = (src >= 0) & (src < n) & (dst >= 0) & (dst < n) & (src != dst)
        if not (ranks_ok.all() and ((chunk >= 0) & (chunk < addresses)).all()):
            return False
    pairs = Pairs(topology, blocks)
    state = _packed_initial(coll, words)
    for (block, ops), step in zip(columns, algo.steps, strict=True):
        if len(block) and not _packed_step(state, block, ops, step.rounds, pairs):
            return False
    needed, post_addr, post_rank = _packed_posts(coll, words)
    return bool((state[post_rank, post_addr] == needed[post_addr]).all())


_MAX_WORDS = 1 << 27
"""The most 64-bit words :func:`replayed_combining` holds its state in (1 GB)."""


def _packed_initial(coll: Collective, words: int) -> np.ndarray:
    """``state[rank, address, word]`` before the first step: each chunk's bit at its precondition's ranks."""
    state = np.zeros((coll.num_ranks, coll.num_addresses, words), dtype=np.uint64)
    chunks = coll.chunks
    pres = list(map(attrgetter("pre"), chunks))
    lengths = np.fromiter(map(len, pres), dtype=np.int64, count=len(chunks))
    ranks = np.fromiter(chain.from_iterable(pres), dtype=np.int64, count=int(lengths.sum()))
    addr = np.repeat(
        np.fromiter(map(attrgetter("address"), chunks), dtype=np.int64, count=len(chunks)), lengths
    )
    bits = np.repeat(np.array(coll.contribution_bits, dtype=np.int64), lengths)
    masks = np.left_shift(np.uint64(1), (bits & 63).astype(np.uint64))
    np.bitwise_or.at(state, (ranks, addr, bits >> 6), masks)
    return state


def _packed_step(state: np.ndarray, block: np.ndarray, ops: np.ndarray, rounds: int, pairs: Pairs) -> bool:
    """Apply one step to ``state`` where none of its sends fails a check: a link, the chunk held
    at the source, the capacity, one copy alone (keeping what it replaces) or reductions of
    disjoint contributions per ``(dst, address)``."""
    chunk, src, dst = block[:, 0], block[:, 1], block[:, 2]
    if (ops > 1).any() or not pairs.linked[pairs.index(src, dst)].all():
        return False
    held = state[src, chunk]
    if not held.any(axis=1).all() or pairs.overloaded(block, rounds) is not None:
        return False
    key = dst * state.shape[1] + chunk
    order = np.argsort(key, kind="stable")
    key, held, copies = key[order], held[order], ops[order] == 0
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.r_[starts, len(key)])
    copied = np.logical_or.reduceat(copies, starts)
    if (copied & (counts > 1)).any():
        return False
    at = (dst[order][starts], chunk[order][starts])
    before = state[at]
    union = np.bitwise_or.reduceat(held, starts, axis=0)
    lost = (before & ~union).any(axis=1) & copied
    ones = np.add.reduceat(np.bitwise_count(held).sum(axis=1, dtype=np.int64), starts)
    ones += np.bitwise_count(before).sum(axis=1, dtype=np.int64)
    twice = ~copied & (ones != np.bitwise_count(before | union).sum(axis=1, dtype=np.int64))
    if (lost | twice).any():
        return False
    state[at] = np.where(copied[:, None], union, before | union)
    return True


def _packed_posts(coll: Collective, words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What each address must end with (every contribution's bit) and the ``(address, rank)`` pairs
    that must hold it, as columns."""
    needed = np.zeros((coll.num_addresses, words), dtype=np.uint64)
    for addr, members in enumerate(coll.contributions):
        full, k = divmod(len(members), 64)
        needed[addr, :full] = np.uint64(2**64 - 1)
        if k:
            needed[addr, full] = np.uint64((1 << k) - 1)
    posts = coll.address_posts
    lengths = np.fromiter(map(len, posts), dtype=np.int64, count=len(posts))
    ranks = np.fromiter(chain.from_iterable(posts), dtype=np.int64, count=int(lengths.sum()))
    return needed, np.repeat(np.arange(len(posts), dtype=np.int64), lengths), ranks
