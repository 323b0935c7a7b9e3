"""An IR as the runtime loads it: validated, with every threadblock's ops folded into transmissions.

The MSCCL parser (reference/msccl-xml.md, 3.7) does not execute ``nop`` steps: their dependencies
are handed to the next real step. It also chains consecutive ``re`` steps into one transmission
(same destination, same source buffer, the later without a dependency of its own, at most 16,
ended by a step with ``hasdep``). Both executors (NumPy and the timing simulator) run these
transmissions, so both see exactly what the runtime would.

A transmission publishes the position of its last folded step (the XML ``s``) when it has
``has_dep``; a wait for ``(tb, op)`` in tile ``t`` is met once that threadblock has published
``(t, s)`` with ``s >= op`` or any later tile. This equals the runtime's step counter whenever every
``nop`` carries a dependency, which is the only form the MSCCL tools emit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from codegen.ir import IR, Buffer, Dep, OpType, Ref
from runtime.errors import ExecutionError, SizeNotSelected
from synth.collectives import Chunk, Collective, CollectiveError, make_collective

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "MAX_REDUCE_FUSION",
    "Connection",
    "Program",
    "TbProgram",
    "Transmission",
    "build_program",
    "call_aliases",
    "chunk_elems",
    "collective_of",
]

MAX_REDUCE_FUSION = 16
"""``MSCCL_MAX_REDUCE_FUSION``: sources of one chained ``re`` transmission."""


@dataclass(frozen=True)
class Transmission:
    """One executed step: a real op with the dependencies of the ``nop``s before it, or a chain of
    ``re`` ops (``srcs`` lists every source; ``count`` is the last op's, as the runtime keeps it)."""

    type: OpType
    ops: tuple[int, ...]
    deps: tuple[Dep, ...]
    src: Ref | None
    dst: Ref | None
    srcs: tuple[Ref, ...]
    count: int
    has_dep: bool

    @property
    def op(self) -> int:
        """The IR index of its first real op (what reports name)."""
        return self.ops[0]

    @property
    def step(self) -> int:
        """The step it publishes (the IR index of its last folded op)."""
        return self.ops[-1]

    def label(self) -> str:
        return self.type.value if len(self.ops) == 1 else f"re chain of {len(self.ops)}"


@dataclass(frozen=True)
class TbProgram:
    rank: int
    id: int
    send: int | None
    recv: int | None
    channel: int
    transmissions: tuple[Transmission, ...]

    def publishes_from(self, op: int) -> bool:
        """Whether any transmission at or after IR op ``op`` publishes progress (so a wait for
        ``(self.id, op)`` can be met within a tile)."""
        return any(tx.has_dep and tx.step >= op for tx in self.transmissions)


@dataclass(frozen=True)
class Connection:
    """The FIFO from ``src`` to ``dst`` on ``channel``, with the threadblocks at its two ends."""

    src: int
    dst: int
    channel: int
    sender: int | None = None
    receiver: int | None = None

    def __str__(self) -> str:
        return f"rank {self.src} -> rank {self.dst} channel {self.channel}"


@dataclass(frozen=True, eq=False)
class Program:
    ir: IR
    collective: Collective | None
    tbs: tuple[TbProgram, ...]
    chunks: tuple[dict[Buffer, int], ...]
    """``chunks[rank][buffer]``: chunks in that rank's buffer (input/output from the collective,
    scratch from the IR)."""
    connections: dict[tuple[int, int, int], Connection] = field(default_factory=dict)

    @cached_property
    def _index(self) -> dict[tuple[int, int], TbProgram]:
        return {(tb.rank, tb.id): tb for tb in self.tbs}

    def tb(self, rank: int, tb_id: int) -> TbProgram:
        return self._index[(rank, tb_id)]


def collective_of(ir: IR, declared: Collective | None = None) -> Collective | None:
    """The collective the IR implements, checked against its chunking: the one it names, or for a
    ``custom`` IR the one ``declared`` for it (a DSL program's custom collective, whose
    postcondition is its expected result; None when nothing was declared)."""
    if ir.collective == "custom":
        return None if declared is None else _declared(ir, declared)
    n, ncpl = ir.num_ranks, ir.nchunksperloop
    if ncpl < 1:
        raise ExecutionError(f"{ir.name}: nchunksperloop: expected at least 1, got {ncpl}")
    try:
        coll = make_collective(ir.collective, n, max(1, ir.chunk_factor), ir.root)
    except CollectiveError as exc:
        raise ExecutionError(f"{ir.name}: {exc}") from None
    if coll.size_chunks != ncpl:
        raise ExecutionError(
            f"{ir.name}: nchunksperloop: {coll.name} on {n} ranks needs a multiple of {n}, got {ncpl}"
        )
    return coll


def _declared(ir: IR, coll: Collective) -> Collective:
    """``coll`` for the custom IR, refined to the IR's chunks when it was compiled with several
    instances (chunk ``x`` became chunks ``x * k + i``, as ``replicate_instances`` does)."""
    ncpl, size = ir.nchunksperloop, coll.size_chunks
    if coll.num_ranks != ir.num_ranks or ncpl < size or ncpl % size:
        raise ExecutionError(
            f"{ir.name}: the declared collective ({coll.num_ranks} ranks, {size} chunks per buffer) does "
            f"not fit the IR ({ir.num_ranks} ranks, nchunksperloop {ncpl})"
        )
    k = ncpl // size
    if k == 1:
        return coll

    def fine(slots: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return tuple(None if x is None else x * k + i for x in slots for i in range(k))

    chunks = tuple(Chunk(c.pre, c.post, c.address * k + i) for c in coll.chunks for i in range(k))
    inputs = tuple(fine(row) for row in coll.inputs)
    outputs = tuple(fine(row) for row in coll.outputs)
    return Collective(coll.name, coll.num_ranks, coll.chunks_per_rank * k, coll.root, chunks, inputs, outputs)


def _where(ir: IR, rank: int, tb: int, op: int | None = None, kind: OpType | None = None) -> str:
    at = f"{ir.name}: rank {rank} tb {tb}"
    return at if op is None else f"{at} op {op} ({kind.value if kind else '?'})"


def _check_ref(ir: IR, where: str, what: str, ref: Ref | None, count: int, chunks: dict) -> None:
    if ref is None:
        raise ExecutionError(f"{where}: {what}: expected a buffer location, got none")
    size = chunks[ref.buffer]
    if ref.index < 0 or ref.index + count > size:
        name = {Buffer.INPUT: "input", Buffer.OUTPUT: "output", Buffer.SCRATCH: "scratch"}[ref.buffer]
        raise ExecutionError(
            f"{where}: {what} {ref} with count {count} is outside the {name} buffer ({size} chunks)"
        )


def _fold(ir: IR, rank: int, tb) -> tuple[Transmission, ...]:
    """The parser's folding of nops and re chains (see module docstring)."""
    out: list[Transmission] = []
    pending: list[Dep] = []
    chain: tuple[Ref | None, Buffer] | None = None
    for i, op in enumerate(tb.ops):
        if op.type is OpType.NOP:
            pending.extend(op.deps)
            continue
        key = (op.dst, op.src.buffer) if op.type is OpType.REDUCE and op.src is not None else None
        if key is not None and key == chain and not op.deps:
            last = out[-1]
            out[-1] = Transmission(
                last.type,
                (*last.ops, i),
                last.deps,
                last.src,
                last.dst,
                (*last.srcs, op.src),
                op.count,
                op.has_dep,
            )
        else:
            srcs = (op.src,) if op.src is not None else ()
            out.append(
                Transmission(op.type, (i,), (*pending, *op.deps), op.src, op.dst, srcs, op.count, op.has_dep)
            )
            pending = []
        fused = len(out[-1].ops)
        chain = key if key is not None and not op.has_dep and fused < MAX_REDUCE_FUSION else None
    return tuple(out)


def _validate_tb(ir: IR, rank: int, tb, chunks: dict, tb_ops: dict[int, int]) -> None:
    n = ir.num_ranks
    for peer, role in ((tb.send, "send"), (tb.recv, "recv")):
        if peer is not None and (peer == rank or not 0 <= peer < n):
            raise ExecutionError(
                f"{_where(ir, rank, tb.id)}: {role} peer {peer}: expected another rank in 0..{n - 1}"
            )
    if tb.channel < 0:
        raise ExecutionError(f"{_where(ir, rank, tb.id)}: channel {tb.channel}: expected >= 0")
    for i, op in enumerate(tb.ops):
        where = _where(ir, rank, tb.id, i, op.type)
        for dep in op.deps:
            if dep.tb not in tb_ops or not 0 <= dep.op < tb_ops[dep.tb]:
                raise ExecutionError(f"{where}: dependency {dep.tb}.{dep.op}: no such op on rank {rank}")
        if op.type is OpType.NOP:
            continue
        if op.count < 1:
            raise ExecutionError(f"{where}: count {op.count}: expected at least 1")
        if op.type.sends and tb.send is None:
            raise ExecutionError(f"{where}: sends, but the threadblock has no send peer")
        if op.type.receives and tb.recv is None:
            raise ExecutionError(f"{where}: receives, but the threadblock has no recv peer")
        if op.type.reads_src:
            _check_ref(ir, where, "src", op.src, op.count, chunks)
        if op.type.writes_dst:
            _check_ref(ir, where, "dst", op.dst, op.count, chunks)


def _chunks(ir: IR, coll: Collective | None) -> tuple[dict[Buffer, int], ...]:
    out = []
    for gpu in ir.gpus:
        if coll is None:
            inp, outp = gpu.input_chunks, gpu.output_chunks
        else:
            inp, outp = coll.input_chunks, coll.output_chunks
        out.append({Buffer.INPUT: inp, Buffer.OUTPUT: outp, Buffer.SCRATCH: max(0, gpu.scratch_chunks)})
    return tuple(out)


def build_program(ir: IR, declared: Collective | None = None) -> Program:
    """Validate ``ir`` for execution and fold it as the runtime's parser does (``declared``: the
    expected result of a ``custom`` IR, see :func:`collective_of`).

    Raises :class:`ExecutionError` for anything the runtime would reject or corrupt: a wrong
    number of gpus, bad peers, two threadblocks sharing a connection, send or receive steps without
    the peer, dependencies on missing ops, locations outside their buffer.
    """
    coll = collective_of(ir, declared)
    if len(ir.gpus) != ir.num_ranks or any(g.rank != r for r, g in enumerate(ir.gpus)):
        raise ExecutionError(f"{ir.name}: gpus: expected ranks 0..{ir.num_ranks - 1} in order")
    chunks = _chunks(ir, coll)
    tbs: list[TbProgram] = []
    senders: dict[tuple[int, int, int], int] = {}
    receivers: dict[tuple[int, int, int], int] = {}
    for rank, gpu in enumerate(ir.gpus):
        if not gpu.threadblocks:
            raise ExecutionError(f"{ir.name}: rank {rank}: expected at least one threadblock, got none")
        tb_ops = {tb.id: len(tb.ops) for tb in gpu.threadblocks}
        if len(tb_ops) != len(gpu.threadblocks):
            raise ExecutionError(f"{ir.name}: rank {rank}: threadblock ids must be unique")
        for tb in gpu.threadblocks:
            _validate_tb(ir, rank, tb, chunks[rank], tb_ops)
            for peer, table, key in (
                (tb.send, senders, (rank, tb.send, tb.channel)),
                (tb.recv, receivers, (tb.recv, rank, tb.channel)),
            ):
                if peer is None:
                    continue
                if key in table:
                    raise ExecutionError(
                        f"{_where(ir, rank, tb.id)}: shares its connection with rank {peer} on channel "
                        f"{tb.channel} with tb {table[key]} (one threadblock per connection and direction)"
                    )
                table[key] = tb.id
            tbs.append(TbProgram(rank, tb.id, tb.send, tb.recv, tb.channel, _fold(ir, rank, tb)))
    connections = {
        key: Connection(*key, sender=senders.get(key), receiver=receivers.get(key))
        for key in sorted(set(senders) | set(receivers))
    }
    return Program(ir, coll, tuple(tbs), chunks, connections)


def chunk_elems(ir: IR, size_bytes: int, dtype: np.dtype) -> int:
    """Elements per MSCCL chunk; sizes the runtime would not select this algorithm for are errors."""
    item = dtype.itemsize
    ncpl = ir.nchunksperloop
    if size_bytes < 1 or size_bytes % item:
        raise SizeNotSelected(f"{ir.name}: size {size_bytes} B: expected a positive multiple of {item} B")
    elems = size_bytes // item
    if elems % ncpl:
        raise SizeNotSelected(
            f"{ir.name}: size {size_bytes} B: {elems} {dtype.name} elements are not divisible by "
            f"nchunksperloop {ncpl}, so the runtime would not select this algorithm "
            f"(use a multiple of {ncpl * item} B)"
        )
    return elems // ncpl


def call_aliases(program: Program, inplace: bool) -> list[tuple[str, int] | None]:
    """Where each rank's smaller buffer sits inside its larger one for an in-place call (None for
    out-of-place calls); errors where the IR is not marked for this kind of call."""
    ir, coll = program.ir, program.collective
    if not inplace:
        if not ir.outofplace:
            raise ExecutionError(f"{ir.name}: the IR is not marked for out-of-place calls (outofplace=0)")
        return [None] * ir.num_ranks
    if not ir.inplace:
        raise ExecutionError(
            f"{ir.name}: the IR is not marked for in-place calls (inplace=0), so the runtime "
            "would not select it for one"
        )
    if coll is None or coll.inplace_alias(0) is None:
        raise ExecutionError(f"{ir.name}: {ir.collective} has no in-place form")
    return [coll.inplace_alias(r) for r in range(ir.num_ranks)]
