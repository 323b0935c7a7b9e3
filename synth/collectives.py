"""Collectives as pre/postconditions over chunks, with the buffer slot of every chunk.

Each rank's buffer is split into ``chunks_per_rank`` (C) chunks. A *chunk* is one piece of data
with the ranks that hold it before (``pre``) and must hold it after (``post``). Its ``address`` is
the slot it is reduced into: non-combining collectives give every chunk its own address (equal to
its id), while in combining collectives (allreduce, reducescatter, reduce) every rank contributes
one chunk to each address and the postcondition asks for the reduction of all of them.

Buffers: ``inputs[rank][slot]`` is the chunk id a rank's input slot holds (``None`` where the slot is
unused, e.g. a non-root's input in broadcast) and ``outputs[rank][slot]`` the address its output
slot must receive. Ids follow MSCCL's layouts (allgather output ``r*C+i`` is rank r's i-th chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from common.errors import XcclError
from common.limits import Limit
from synth.errors import InfeasibleError

__all__ = [
    "COLLECTIVES",
    "COMBINING",
    "DUALS",
    "ROOTED",
    "Chunk",
    "Collective",
    "CollectiveError",
    "make_collective",
]


CHUNKS = Limit("chunks", 1 << 20, "XCCL_MAX_CHUNKS")
"""Most chunks a collective may have (ranks x chunks per rank; x ranks again for alltoall and
reducescatter). A 512-rank alltoall has 262,144; a million chunks take about 2 GB to describe."""
SLOTS = Limit("buffer chunks over all ranks", 1 << 24, "XCCL_MAX_SLOTS")
"""Most buffer slots over all ranks (ranks x the larger buffer, in chunks): what a collective
describes and what the symbolic execution of an IR tracks. A 512-rank allgather with 64 chunks per
rank has 16.8 million, which take about 1.5 GB."""
_WIDTH = {  # (chunks, the larger buffer in chunks) of n ranks with c chunks per rank
    "allgather": lambda n, c: (n * c, n * c),
    "allreduce": lambda n, c: (n * c, c),
    "reducescatter": lambda n, c: (n * n * c, n * c),
    "alltoall": lambda n, c: (n * n * c, n * c),
    "broadcast": lambda n, c: (c, c),
    "reduce": lambda n, c: (n * c, c),
    "gather": lambda n, c: (n * c, n * c),
    "scatter": lambda n, c: (n * c, n * c),
}


class CollectiveError(XcclError):
    """An unknown collective or impossible parameters."""


@dataclass(frozen=True)
class Chunk:
    pre: frozenset[int]
    post: frozenset[int]
    address: int


@dataclass(frozen=True, eq=False)
class Collective:
    """A collective over ``num_ranks`` ranks with ``chunks_per_rank`` chunks (see module docstring).

    A named collective made with ``make_collective(..., lazy=True)`` describes its chunks and
    buffers (``n`` x ``n`` of them for an allgather) only when they are first read, so what needs
    only its name and size (the bounds) works on 100,000 ranks; the limits are checked then."""

    name: str
    num_ranks: int
    chunks_per_rank: int
    root: int | None
    given_chunks: tuple[Chunk, ...] | None = field(default=None, repr=False)
    given_inputs: tuple[tuple[int | None, ...], ...] | None = field(default=None, repr=False)
    given_outputs: tuple[tuple[int | None, ...], ...] | None = field(default=None, repr=False)

    @cached_property
    def _described(self) -> tuple:
        if self.given_chunks is not None:
            return self.given_chunks, self.given_inputs, self.given_outputs
        _check_limits(self.name, self.num_ranks, self.chunks_per_rank)
        return _BUILDERS[self.name](self.num_ranks, self.chunks_per_rank, self.root)

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        return self._described[0]

    @property
    def inputs(self) -> tuple[tuple[int | None, ...], ...]:
        return self._described[1]

    @property
    def outputs(self) -> tuple[tuple[int | None, ...], ...]:
        return self._described[2]

    # -- identity --------------------------------------------------------------------------
    def spec(self) -> dict:
        """The four numbers that determine the collective (its JSON form)."""
        return {
            "name": self.name,
            "ranks": self.num_ranks,
            "chunks_per_rank": self.chunks_per_rank,
            "root": self.root,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Collective) and self.spec() == other.spec()

    def __hash__(self) -> int:
        return hash(tuple(self.spec().values()))

    def __repr__(self) -> str:
        root = f", root={self.root}" if self.root is not None else ""
        return f"{self.name}(n={self.num_ranks}, chunks={self.chunks_per_rank}{root})"

    # -- properties ------------------------------------------------------------------------
    @property
    def combining(self) -> bool:
        return self.name in COMBINING

    @cached_property
    def num_addresses(self) -> int:
        return max(c.address for c in self.chunks) + 1

    @cached_property
    def contributions(self) -> tuple[frozenset[int], ...]:
        """``contributions[address]``: ids of the chunks reduced into that address."""
        out: list[set[int]] = [set() for _ in range(self.num_addresses)]
        for cid, chunk in enumerate(self.chunks):
            out[chunk.address].add(cid)
        return tuple(frozenset(s) for s in out)

    @cached_property
    def contribution_bits(self) -> tuple[int, ...]:
        """``contribution_bits[chunk]``: the chunk's place among the contributions to its address,
        by id. A set of contributions is then an int with those bits set: n bits per rank and
        address where a set of ids took n objects (n^3 of them in a replay of an n-rank allreduce)."""
        bits = [0] * len(self.chunks)
        for members in self.contributions:
            for bit, cid in enumerate(sorted(members)):
                bits[cid] = bit
        return tuple(bits)

    @cached_property
    def address_posts(self) -> tuple[frozenset[int], ...]:
        """``address_posts[address]``: the ranks that must end with it (every contribution reduced
        in, for combining collectives): the union of its chunks' postconditions, each distinct set
        once (the builders share them, so an allreduce's n x C take n x C steps, not n^2 x C)."""
        posts: list[dict[int, frozenset[int]]] = [{} for _ in range(self.num_addresses)]
        for chunk in self.chunks:
            posts[chunk.address][id(chunk.post)] = chunk.post
        return tuple(frozenset().union(*p.values()) for p in posts)

    @property
    def input_chunks(self) -> int:
        return len(self.inputs[0])

    @property
    def output_chunks(self) -> int:
        return len(self.outputs[0])

    @property
    def size_chunks(self) -> int:
        """Chunks in the buffer whose size nccl-tests reports (the larger of input and output)."""
        if self.given_chunks is None:  # a named collective: known without describing it
            return _WIDTH[self.name](self.num_ranks, self.chunks_per_rank)[1]
        return max(self.input_chunks, self.output_chunks)

    @property
    def busbw_factor(self) -> float:
        """nccl-tests' bus bandwidth factor for this collective."""
        n = self.num_ranks
        if self.name == "allreduce":
            return 2 * (n - 1) / n
        if self.name in ("broadcast", "reduce"):
            return 1.0
        return (n - 1) / n

    def inplace_alias(self, rank: int) -> tuple[str, int] | None:
        """For in-place calls: (the smaller buffer, its first slot inside the larger one), or None."""
        c = self.chunks_per_rank
        if self.name in ("allgather", "gather"):
            return ("input", rank * c)
        if self.name in ("reducescatter", "scatter"):
            return ("output", rank * c)
        if self.name in ("allreduce", "broadcast", "reduce"):
            return ("input", 0)
        return None

    # -- duals -----------------------------------------------------------------------------
    def dual(self) -> Collective:
        """The collective whose schedule, run backwards on the reversed topology, implements this
        one (:class:`synth.reductions.Dual`): reducescatter <- allgather, reduce <- broadcast (the
        non-combining duals), gather <- scatter. Dual chunk ``a`` is this collective's address ``a``."""
        if not self.has_dual:
            raise InfeasibleError(f"{self.name} has no dual (only {', '.join(DUALS)} do)")
        # lazy: it is as big as this one, whose limits were checked when it was described
        return make_collective(DUALS[self.name], self.num_ranks, self.chunks_per_rank, self.root, lazy=True)

    @property
    def has_dual(self) -> bool:
        return self.name in DUALS


def _all(n: int) -> frozenset[int]:
    return frozenset(range(n))


def _each(n: int) -> tuple[frozenset[int], ...]:
    """``{r}`` for every rank r. The builders share these sets (and one ``_all``) among their
    chunks: an allreduce of n ranks has n x C chunks, each of which held its own n-rank
    postcondition (n^2 C set entries: 4 GB at 128 ranks) before they were shared."""
    return tuple(frozenset({r}) for r in range(n))


def _allgather(n: int, c: int, root: int | None) -> tuple:
    each, everyone = _each(n), _all(n)
    chunks = tuple(Chunk(each[cid // c], everyone, cid) for cid in range(n * c))
    inputs = tuple(tuple(r * c + i for i in range(c)) for r in range(n))
    outputs = tuple(tuple(range(n * c)) for _ in range(n))
    return chunks, inputs, outputs


def _alltoall(n: int, c: int, root: int | None) -> tuple:
    each = _each(n)
    chunks = []
    for cid in range(n * n * c):
        src, rest = divmod(cid, n * c)
        chunks.append(Chunk(each[src], each[rest // c], cid))
    inputs = tuple(tuple(s * n * c + k for k in range(n * c)) for s in range(n))
    outputs = tuple(tuple((k // c) * n * c + d * c + k % c for k in range(n * c)) for d in range(n))
    return tuple(chunks), inputs, outputs


def _broadcast(n: int, c: int, root: int) -> tuple:
    source, everyone = frozenset({root}), _all(n)
    chunks = tuple(Chunk(source, everyone, i) for i in range(c))
    inputs = tuple(tuple(range(c)) if r == root else (None,) * c for r in range(n))
    outputs = tuple(tuple(range(c)) for _ in range(n))
    return chunks, inputs, outputs


def _scatter(n: int, c: int, root: int) -> tuple:
    each = _each(n)
    chunks = tuple(Chunk(each[root], each[cid // c], cid) for cid in range(n * c))
    inputs = tuple(tuple(range(n * c)) if r == root else (None,) * (n * c) for r in range(n))
    outputs = tuple(tuple(r * c + i for i in range(c)) for r in range(n))
    return chunks, inputs, outputs


def _gather(n: int, c: int, root: int) -> tuple:
    each = _each(n)
    chunks = tuple(Chunk(each[cid // c], each[root], cid) for cid in range(n * c))
    inputs = tuple(tuple(r * c + i for i in range(c)) for r in range(n))
    outputs = tuple(tuple(range(n * c)) if r == root else (None,) * (n * c) for r in range(n))
    return chunks, inputs, outputs


def _allreduce(n: int, c: int, root: int | None) -> tuple:
    each, everyone = _each(n), _all(n)
    chunks = tuple(Chunk(each[cid // c], everyone, cid % c) for cid in range(n * c))
    inputs = tuple(tuple(r * c + a for a in range(c)) for r in range(n))
    outputs = tuple(tuple(range(c)) for _ in range(n))
    return chunks, inputs, outputs


def _reducescatter(n: int, c: int, root: int | None) -> tuple:
    width, each = n * c, _each(n)
    chunks = tuple(
        Chunk(each[cid // width], each[(cid % width) // c], cid % width) for cid in range(n * width)
    )
    inputs = tuple(tuple(r * width + a for a in range(width)) for r in range(n))
    outputs = tuple(tuple(d * c + i for i in range(c)) for d in range(n))
    return chunks, inputs, outputs


def _reduce(n: int, c: int, root: int) -> tuple:
    each = _each(n)
    chunks = tuple(Chunk(each[cid // c], each[root], cid % c) for cid in range(n * c))
    inputs = tuple(tuple(r * c + a for a in range(c)) for r in range(n))
    outputs = tuple(tuple(range(c)) if r == root else (None,) * c for r in range(n))
    return chunks, inputs, outputs


_BUILDERS: dict[str, Callable[[int, int, int | None], tuple]] = {
    "allgather": _allgather,
    "allreduce": _allreduce,
    "reducescatter": _reducescatter,
    "alltoall": _alltoall,
    "broadcast": _broadcast,
    "reduce": _reduce,
    "gather": _gather,
    "scatter": _scatter,
}

COLLECTIVES: tuple[str, ...] = tuple(_BUILDERS)
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
COMBINING = frozenset({"allreduce", "reducescatter", "reduce"})
DUALS = {"reducescatter": "allgather", "reduce": "broadcast", "gather": "scatter"}
"""Collective -> its dual (:meth:`Collective.dual`)."""
_ALIASES = {
    "reduce_scatter": "reducescatter",
    "all_gather": "allgather",
    "all_reduce": "allreduce",
    "all_to_all": "alltoall",
}


def _check_limits(key: str, num_ranks: int, chunks_per_rank: int) -> None:
    chunks, width = _WIDTH[key](num_ranks, chunks_per_rank)
    where = f"{key} on {num_ranks} ranks with {chunks_per_rank} chunks per rank"
    CHUNKS.check(chunks, where)
    SLOTS.check(num_ranks * width, where)


def make_collective(
    name: str, num_ranks: int, chunks_per_rank: int = 1, root: int | None = None, lazy: bool = False
) -> Collective:
    """Build a named collective; rooted ones default to ``root=0``. ``lazy`` describes its chunks
    when they are first read (and checks the limits then) instead of now."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _BUILDERS:
        raise CollectiveError(f"unknown collective {name!r}: expected one of {', '.join(COLLECTIVES)}")
    if num_ranks < 1:
        raise CollectiveError(f"{key}: expected at least 1 rank, got {num_ranks}")
    if chunks_per_rank < 1:
        raise CollectiveError(f"{key}: chunks per rank: expected at least 1, got {chunks_per_rank}")
    if key in ROOTED:
        root = 0 if root is None else root
        if not 0 <= root < num_ranks:
            raise CollectiveError(f"{key}: root: expected a rank in 0..{num_ranks - 1}, got {root}")
    else:
        root = None
    if lazy:
        return Collective(key, num_ranks, chunks_per_rank, root)
    _check_limits(key, num_ranks, chunks_per_rank)  # those in force now (XCCL_MAX_CHUNKS), every time
    return _described(key, num_ranks, chunks_per_rank, root)


@lru_cache(maxsize=2)
def _described(key: str, num_ranks: int, chunks_per_rank: int, root: int | None) -> Collective:
    """The named collective, described: one object for the same four numbers while it is among the
    last two made, immutable as it is (``xccl compile`` of a 512-rank allreduce described it twice,
    for the Algorithm and for the IR it compiles to: 262,144 chunks each, 0.3 s)."""
    coll = Collective(key, num_ranks, chunks_per_rank, root)
    coll.chunks  # noqa: B018 - described now
    return coll
