"""The IR: what the MSCCL runtime executes, as frozen dataclasses.

It mirrors the runtime's model (reference/msccl-xml.md, sections 3 and 4): per rank (``Gpu``),
threadblocks, each with at most one send peer and one receive peer on one channel, holding an
ordered list of ops (the XML's ``<step>`` elements). Every op moves ``count`` consecutive chunks of
a buffer; the buffers are split into ``nchunksperloop`` chunks in total (see
:func:`codegen.rules.chunk_factor`). What an IR may contain, and what each runtime accepts of one,
is :mod:`codegen.rules`'s to say: this module only defines the types.

Op semantics (``src``/``dst`` are always LOCAL buffer locations of the op's own rank):

===== ====================================================================== ======== ========
type  effect                                                                   send?    receive?
===== ====================================================================== ======== ========
s     send ``src[count]`` to the threadblock's send peer                       yes
r     receive into ``dst[count]``                                                       yes
rcs   receive into ``dst``, and forward the same data to the send peer          yes      yes
rrs   receive, reduce with ``src``, send the result (no local write)           yes      yes
rrc   ``dst = received (op) src``                                                       yes
rrcs  ``dst = received (op) src``, and send the result                          yes      yes
cpy   ``dst = src``
re    ``dst = dst (op) src``
nop   nothing; only carries a dependency
===== ====================================================================== ======== ========

Dependencies name ``(threadblock id, op index)`` on the same rank; the op waits until that op has
completed. Ours allows several per op; the pass ``fold_deps_into_nops`` rewrites them into the
runtime's one-per-op form before the XML writer runs. ``has_dep`` marks ops some other op waits on
(the runtime publishes progress only after such ops).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

_T = TypeVar("_T")


def evolve(obj: _T, **changes: object) -> _T:
    """``dataclasses.replace`` for the IR's and the compiler's frozen dataclasses (no
    ``__post_init__``, no cached properties), several times faster: the passes copy every instruction and step
    of a schedule (half a million at 512 ranks), where ``replace``'s generic field walk dominated."""
    new = object.__new__(type(obj))
    try:
        fields = new.__dict__
    except AttributeError:  # a slotted one (codegen.instr_dag.Instr)
        return _slotted(new, {**{name: getattr(obj, name) for name in obj.__slots__}, **changes})
    fields.update(obj.__dict__)
    fields.update(changes)
    return new


def made(cls: type[_T], fields: dict[str, object]) -> _T:
    """An instance of ``cls`` (one of the frozen dataclasses :func:`evolve` copies) with ``fields``,
    every one of its fields, set at once: a frozen ``__init__`` sets each through
    ``object.__setattr__``, a tenth of a pass that makes half a million instructions."""
    new = object.__new__(cls)
    try:
        new.__dict__.update(fields)
    except AttributeError:  # a slotted one
        return _slotted(new, fields)
    return new


def _slotted(new: _T, fields: dict[str, object]) -> _T:
    """``new`` (of a slotted frozen dataclass) with ``fields`` set, each through its slot (no
    ``__setattr__``, which a frozen class refuses)."""
    cls = type(new)
    for name, value in fields.items():
        getattr(cls, name).__set__(new, value)
    return new


__all__ = ["IR", "Buffer", "Dep", "Gpu", "Op", "OpType", "Ref", "Threadblock", "evolve", "made"]


class Buffer(StrEnum):
    """A rank's buffers: the user's input and output, and the scratch the runtime allocates. What
    each may hold is :mod:`codegen.rules`'s to say."""

    INPUT = "i"
    OUTPUT = "o"
    SCRATCH = "s"

    @property
    def long_name(self) -> str:
        """``input``, ``output`` or ``scratch``: how messages and the DSL name it."""
        return self.name.lower()


class OpType(StrEnum):
    SEND = "s"
    RECV = "r"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_SEND = "rrs"
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_COPY_SEND = "rrcs"
    COPY = "cpy"
    REDUCE = "re"
    NOP = "nop"

    # what each type does, a plain attribute of each member (set below from the sets there): the
    # passes, the checks and the simulator ask these of every op, millions of times at 512 ranks,
    # where a property with its set lookup cost a call each
    sends: bool
    receives: bool
    reduces: bool
    reads_src: bool
    """Whether the op reads its local ``src`` operand."""
    writes_dst: bool
    """Whether the op writes its local ``dst`` operand."""


_SENDS = frozenset(
    {OpType.SEND, OpType.RECV_COPY_SEND, OpType.RECV_REDUCE_SEND, OpType.RECV_REDUCE_COPY_SEND}
)
_RECEIVES = frozenset(
    {
        OpType.RECV,
        OpType.RECV_COPY_SEND,
        OpType.RECV_REDUCE_SEND,
        OpType.RECV_REDUCE_COPY,
        OpType.RECV_REDUCE_COPY_SEND,
    }
)
_REDUCES = frozenset(
    {OpType.RECV_REDUCE_SEND, OpType.RECV_REDUCE_COPY, OpType.RECV_REDUCE_COPY_SEND, OpType.REDUCE}
)
_READS_SRC = frozenset(
    {
        OpType.SEND,
        OpType.RECV_REDUCE_SEND,
        OpType.RECV_REDUCE_COPY,
        OpType.RECV_REDUCE_COPY_SEND,
        OpType.COPY,
        OpType.REDUCE,
    }
)
_WRITES_DST = frozenset(
    {
        OpType.RECV,
        OpType.RECV_COPY_SEND,
        OpType.RECV_REDUCE_COPY,
        OpType.RECV_REDUCE_COPY_SEND,
        OpType.COPY,
        OpType.REDUCE,
    }
)

for _type in OpType:
    _type.sends, _type.receives, _type.reduces = _type in _SENDS, _type in _RECEIVES, _type in _REDUCES
    _type.reads_src, _type.writes_dst = _type in _READS_SRC, _type in _WRITES_DST


@dataclass(frozen=True, order=True)
class Ref:
    """A location: chunk ``index`` of a rank's ``buffer``."""

    buffer: Buffer
    index: int

    def __str__(self) -> str:
        return f"{self.buffer.value}[{self.index}]"


@dataclass(frozen=True, order=True)
class Dep:
    """Wait for op ``op`` of threadblock ``tb`` on the same rank."""

    tb: int
    op: int


@dataclass(frozen=True)
class Op:
    type: OpType
    src: Ref | None = None
    dst: Ref | None = None
    count: int = 1
    deps: tuple[Dep, ...] = ()
    has_dep: bool = False

    def __str__(self) -> str:
        parts = [self.type.value]
        if self.src is not None:
            parts.append(f"src={self.src}")
        if self.dst is not None:
            parts.append(f"dst={self.dst}")
        if self.type is not OpType.NOP:
            parts.append(f"cnt={self.count}")
        if self.deps:
            parts.append("deps=" + ",".join(f"{d.tb}.{d.op}" for d in self.deps))
        if self.has_dep:
            parts.append("hasdep")
        return " ".join(parts)


@dataclass(frozen=True)
class Threadblock:
    """One CUDA thread block: at most one send peer and one receive peer, on one channel."""

    id: int
    send: int | None
    recv: int | None
    channel: int
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Gpu:
    rank: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[Threadblock, ...]

    def threadblock(self, tb_id: int) -> Threadblock:
        for tb in self.threadblocks:
            if tb.id == tb_id:
                return tb
        raise KeyError(tb_id)


@dataclass(frozen=True)
class IR:
    """A whole program: one ``Gpu`` per rank.

    ``collective`` is one of synth's collective names (or ``custom``); ``nchunksperloop`` is the
    number of chunks the larger per-rank buffer is split into (allgather: the output).
    ``inplace`` / ``outofplace`` say which calls the schedule is correct for (the Azure executor
    reads both; the research runtime only ``inplace``). ``max_bytes`` 0 means no limit.
    """

    name: str
    collective: str
    num_ranks: int
    nchunksperloop: int
    gpus: tuple[Gpu, ...]
    protocol: str = "Simple"
    inplace: bool = False
    outofplace: bool = True
    root: int | None = None
    min_bytes: int = 0
    max_bytes: int = 0

    @property
    def nchannels(self) -> int:
        return 1 + max((tb.channel for g in self.gpus for tb in g.threadblocks), default=0)

    def gpu(self, rank: int) -> Gpu:
        return self.gpus[rank]

    def describe(self) -> str:
        """A readable listing: one line per threadblock header and per op."""
        lines = [
            f"{self.name}: {self.collective} on {self.num_ranks} ranks, {self.nchunksperloop} chunks per loop, "
            f"{self.nchannels} channel(s), protocol {self.protocol}"
        ]
        for g in self.gpus:
            lines.append(f"  rank {g.rank} (i={g.input_chunks} o={g.output_chunks} s={g.scratch_chunks}):")
            for tb in g.threadblocks:
                lines.append(f"    tb {tb.id} send={tb.send} recv={tb.recv} ch={tb.channel}")
                lines.extend(f"      {k}: {op}" for k, op in enumerate(tb.ops))
        return "\n".join(lines)
