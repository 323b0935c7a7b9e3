"""The chunk DAG: the first stage of the compiler, what tracing a DSL program produces.

Nodes are the program's chunk operations (``copy`` and ``reduce``) in program order. Each op has two
*sides*: the source side (its rank reads ``src``) and the destination side (its rank writes ``dst``,
and for a reduce also reads the local ``operand``). Edges join sides and record why: read after
write, write after read, write after write on some buffer slot. In-place programs alias the smaller
buffer into the larger one, so slots are compared after aliasing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter

from codegen.errors import CodegenError
from codegen.ir import Buffer, Ref
from codegen.slotted import made_all
from synth.collectives import Collective

__all__ = [
    "Alias",
    "ChunkDAG",
    "ChunkDep",
    "ChunkOp",
    "DepKind",
    "Loc",
    "ProgramInfo",
    "Side",
    "aliases_of",
    "build_chunk_dag",
]


class DepKind(StrEnum):
    RAW = "raw"
    WAR = "war"
    WAW = "waw"
    MATCH = "match"
    """A send and the receive that takes its data (instruction level only)."""
    ORDER = "order"
    """A send after the one before it through the same port, in a timed schedule (``order_ports``)."""


class Side(StrEnum):
    SRC = "src"
    DST = "dst"


@dataclass(frozen=True, order=True, slots=True)
class Loc:
    """Chunks ``index .. index + count - 1`` are addressed from ``index`` of a rank's buffer."""

    rank: int
    buffer: Buffer
    index: int

    @property
    def ref(self) -> Ref:
        return Ref(self.buffer, self.index)

    def __str__(self) -> str:
        return f"rank {self.rank} {self.buffer.value}[{self.index}]"


@dataclass(frozen=True)
class Alias:
    """In-place calls: ``small[i]`` is ``large[offset + i]`` (e.g. allgather input in the output)."""

    small: Buffer
    large: Buffer
    offset: int


def aliases_of(collective: Collective) -> tuple[Alias | None, ...]:
    """Per rank, where in-place calls put the smaller buffer (``Collective.inplace_alias``)."""
    out = []
    for rank in range(collective.num_ranks):
        alias = collective.inplace_alias(rank)
        if alias is None:
            out.append(None)
        else:
            small = Buffer.INPUT if alias[0] == "input" else Buffer.OUTPUT
            large = Buffer.OUTPUT if small is Buffer.INPUT else Buffer.INPUT
            out.append(Alias(small, large, alias[1]))
    return tuple(out)


@dataclass(frozen=True)
class ProgramInfo:
    """What every stage carries along: the collective, buffer sizes (chunks per rank), options."""

    name: str
    collective: str
    num_ranks: int
    root: int | None
    input_chunks: int
    output_chunks: int
    scratch_chunks: tuple[int, ...]
    nchunksperloop: int
    protocol: str = "Simple"
    inplace: bool = False
    aliases: tuple[Alias | None, ...] = ()
    instances: int = 1
    model_timed: bool = False
    """The ops' times are the Algorithm model's list schedule (``codegen.lower``): transfers that
    overlap in time between two ranks ran side by side over the connection's links."""
    ports: tuple[tuple[int, int, int, float, int], ...] = ()
    """``(src, dst, port, alpha_us, lanes)`` per connection of a timed program on a known topology
    (``codegen.lower``): sends from ``src`` with the same ``port`` leave through one physical edge
    of ``lanes`` parallel links; a send's data arrives ``alpha_us`` after its call ends
    (``order_ports``)."""
    merge_window: float | None = None
    """Where ``fit_xml_reader`` widened a timed program's aggregation window for the XML reader, the
    window it kept (a fraction of the span); None: the compile's own (``CompileOptions.window``)."""

    def canonical(self, rank: int, buffer: Buffer, index: int) -> tuple[int, Buffer, int]:
        """The physical slot: in-place programs see the smaller buffer inside the larger one."""
        if self.inplace and self.aliases:
            alias = self.aliases[rank]
            if alias is not None and buffer is alias.small:
                return rank, alias.large, alias.offset + index
        return rank, buffer, index


@dataclass(frozen=True, slots=True)
class ChunkOp:
    """``dst[count] := src[count]`` (copy) or ``dst := operand (op) src`` (reduce).

    ``src`` may be on another rank; ``dst`` and ``operand`` are on the same rank. The hints are the
    user's threadblock (``sendtb`` on the source rank, ``recvtb`` on the destination rank) and
    channel; ``instance`` says which replica of the program the op belongs to. ``time`` is the
    (start, arrival) of the op in a timed schedule it was lowered from, or None.
    """

    kind: str
    src: Loc
    dst: Loc
    count: int = 1
    operand: Loc | None = None
    sendtb: int | None = None
    recvtb: int | None = None
    channel: int | None = None
    instance: int = 0
    time: tuple[float, float] | None = None

    @property
    def remote(self) -> bool:
        return self.src.rank != self.dst.rank

    @property
    def local_operand(self) -> Loc:
        """The reduce's local input (``dst`` unless given)."""
        return self.operand if self.operand is not None else self.dst

    def __str__(self) -> str:
        what = f"{self.kind} {self.src} -> {self.dst}"
        if self.kind == "reduce" and self.operand is not None:
            what += f" (operand {self.operand.ref})"
        return what + (f" x{self.count}" if self.count != 1 else "")


@dataclass(frozen=True, order=True, slots=True)
class ChunkDep:
    """Side ``pred_side`` of op ``pred`` must happen before side ``succ_side`` of op ``succ``."""

    pred: int
    succ: int
    pred_side: Side
    succ_side: Side
    kind: DepKind = field(compare=False)


@dataclass(frozen=True)
class ChunkDAG:
    info: ProgramInfo
    ops: tuple[ChunkOp, ...]
    deps: tuple[ChunkDep, ...]

    def verify(self) -> None:
        """Raise :class:`CodegenError` unless every edge goes forward in program order."""
        for d in self.deps:
            if not 0 <= d.pred < d.succ < len(self.ops):
                raise CodegenError(f"chunk DAG: dependency {d} does not go forward in program order")
        for i, op in enumerate(self.ops):
            if op.count < 1:
                raise CodegenError(f"chunk DAG: op {i} ({op}) has count {op.count}")

    def describe(self) -> str:
        lines = [f"chunk DAG of {self.info.name}: {len(self.ops)} ops, {len(self.deps)} dependencies"]
        preds: dict[int, list[str]] = {}
        for d in self.deps:
            preds.setdefault(d.succ, []).append(f"{d.pred}.{d.pred_side}->{d.succ_side}({d.kind})")
        for i, op in enumerate(self.ops):
            tail = f"  after {' '.join(preds[i])}" if i in preds else ""
            lines.append(f"  {i}: {op}{tail}")
        return "\n".join(lines)


_DEP_ENDS = ("pred", "succ", "pred_side", "succ_side")  # a dependency's key in build_chunk_dag


def _slots(info: ProgramInfo, loc: Loc, count: int) -> list[tuple[int, Buffer, int]]:
    return [info.canonical(loc.rank, loc.buffer, loc.index + k) for k in range(count)]


def build_chunk_dag(info: ProgramInfo, ops: tuple[ChunkOp, ...]) -> ChunkDAG:
    """Dependencies of ``ops`` in program order: per physical slot, the last writer and the readers
    since; a read waits for the last write, a write for the reads since and the last write."""
    last_writer: dict[tuple, tuple[int, Side]] = {}
    readers: dict[tuple, list[tuple[int, Side]]] = {}
    deps: dict[tuple[int, int, Side, Side], DepKind] = {}
    add = deps.setdefault  # the first reason found for an edge is kept
    aliased = info.inplace and any(info.aliases)
    raw, war, waw, dst = DepKind.RAW, DepKind.WAR, DepKind.WAW, Side.DST

    def slots(loc: Loc, count: int) -> list[tuple[int, Buffer, int]]:
        if count == 1 and not aliased:  # most ops, the physical slot as named (262,144 at 512 ranks)
            return [(loc.rank, loc.buffer, loc.index)]
        return _slots(info, loc, count)

    for i, op in enumerate(ops):
        if op.count == 1 and not aliased and op.kind == "copy":  # most ops (every lowered send)
            _one_copy(i, op, last_writer, readers, add)
            continue
        reads = [(slot, Side.SRC) for slot in slots(op.src, op.count)]
        if op.kind == "reduce":
            reads += [(slot, dst) for slot in slots(op.local_operand, op.count)]
        for slot, side in reads:
            writer = last_writer.get(slot)
            if writer is not None and writer[0] != i:
                add((writer[0], i, writer[1], side), raw)
            readers.setdefault(slot, []).append((i, side))
        for slot in slots(op.dst, op.count):
            for p, side in readers.get(slot, ()):
                if p != i:
                    add((p, i, side, dst), war)
            writer = last_writer.get(slot)
            if writer is not None and writer[0] != i:
                add((writer[0], i, writer[1], dst), waw)
            last_writer[slot] = (i, dst)
            readers[slot] = []
    # sorted as ChunkDep orders (its fields but the kind; the keys are distinct): the keys' tuples
    # compare without a dataclass comparison each (a second at 128 ranks' 134,400 edges)
    keys = sorted(deps)
    columns = {name: list(map(itemgetter(k), keys)) for k, name in enumerate(_DEP_ENDS)}
    edges = made_all(ChunkDep, len(keys), columns | {"kind": map(deps.__getitem__, keys)})
    return ChunkDAG(info, tuple(ops), tuple(edges))


def _one_copy(i: int, op: ChunkOp, last_writer: dict, readers: dict, add) -> None:
    """:func:`build_chunk_dag`'s step for a copy of one chunk between slots as named (no alias):
    the same edges in the same order, without a list of slots per side."""
    src, dst = op.src, op.dst
    read, slot = (src.rank, src.buffer, src.index), (dst.rank, dst.buffer, dst.index)
    writer = last_writer.get(read)
    if writer is not None and writer[0] != i:
        add((writer[0], i, writer[1], Side.SRC), DepKind.RAW)
    held = readers.get(read)
    if held is None:
        readers[read] = [(i, Side.SRC)]
    else:
        held.append((i, Side.SRC))
    for p, side in readers.get(slot, ()):
        if p != i:
            add((p, i, side, Side.DST), DepKind.WAR)
    writer = last_writer.get(slot)
    if writer is not None and writer[0] != i:
        add((writer[0], i, writer[1], Side.DST), DepKind.WAW)
    last_writer[slot] = (i, Side.DST)
    readers[slot] = []
