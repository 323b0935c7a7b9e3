"""An IR as the runtime loads it: judged by the rules, with every threadblock's ops folded into
transmissions.

What a runtime refuses when it loads an IR is :mod:`codegen.rules`'s to say
(:func:`codegen.rules.load_problems`, with the buffers the collective really has); how its parser
reads a threadblock's steps too (:func:`codegen.rules.fold_steps`: the MSCCL parser, reference/
msccl-xml.md 3.7, does not execute ``nop`` steps but hands their dependencies to the next real step,
and chains consecutive ``re`` steps into one transmission). This module builds what the executors
(NumPy, the timing simulator) run from that, so both see exactly what the runtime would.

A transmission publishes the position of its last folded step (the XML ``s``) when it has
``has_dep``; a wait for ``(tb, op)`` in tile ``t`` is met once that threadblock has published
``(t, s)`` with ``s >= op`` or any later tile. This equals the runtime's step counter whenever every
``nop`` carries a dependency, which is the only form the MSCCL tools emit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from codegen.ir import IR, Buffer, Dep, OpType, Ref, Threadblock
from codegen.rules import (
    Dialect,
    Problem,
    chunk_factor,
    collective_problems,
    connections,
    fold_steps,
    get_dialect,
    load_problems,
)
from runtime.errors import ExecutionError, SizeNotSelected
from synth.collectives import Chunk, Collective, CollectiveError, make_collective

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Connection",
    "Program",
    "TbProgram",
    "Transmission",
    "buffer_layout",
    "build_program",
    "call_aliases",
    "chunk_elems",
    "collective_of",
    "judged",
    "transmissions",
]


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

    @classmethod
    def made(cls, type: OpType, ops: tuple[int, ...], deps: tuple[Dep, ...], src: Ref | None, dst: Ref | None,
             srcs: tuple[Ref, ...], count: int, has_dep: bool) -> Transmission:  # fmt: skip
        """The same as ``Transmission(...)``, without the frozen ``__init__``'s ``object.__setattr__``
        per field: a 512-rank program folds half a million of them (0.9 s -> 0.25 s)."""
        out = object.__new__(cls)
        out.__dict__.update(
            type=type, ops=ops, deps=deps, src=src, dst=dst, srcs=srcs, count=count, has_dep=has_dep
        )
        return out


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
    found = collective_problems(ir)
    if found:
        raise ExecutionError(f"{ir.name}: {found[0]}")
    try:
        return make_collective(ir.collective, ir.num_ranks, chunk_factor(ir), ir.root)
    except CollectiveError as exc:
        raise ExecutionError(f"{ir.name}: {exc}") from None


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


def transmissions(tb: Threadblock, d: Dialect) -> tuple[Transmission, ...]:
    """The threadblock's steps as the parser of ``d`` folds them (:func:`codegen.rules.fold_steps`):
    a chain of ``re`` steps keeps every source and moves the count of its last step, as the runtime
    does."""
    out = []
    steps, made = tb.ops, Transmission.made
    for folded in fold_steps(steps, d):
        if len(folded.ops) == 1:  # one op (all but ``re`` chains): no lists to build
            first = last = steps[folded.ops[0]]
            srcs = () if first.src is None else (first.src,)
        else:
            ops = [steps[i] for i in folded.ops]
            first, last = ops[0], ops[-1]
            srcs = tuple(op.src for op in ops if op.src is not None)
        out.append(
            made(first.type, folded.ops, folded.deps, first.src, first.dst, srcs, last.count, last.has_dep)
        )
    return tuple(out)


def _chunks(ir: IR, coll: Collective | None) -> tuple[dict[Buffer, int], ...]:
    """Per rank, the buffers the runtime really has: input and output from the collective (the
    IR's own for a ``custom`` one without a declared result), scratch from the IR."""
    out = []
    for gpu in ir.gpus:
        if coll is None:
            inp, outp = gpu.input_chunks, gpu.output_chunks
        else:
            inp, outp = coll.input_chunks, coll.output_chunks
        out.append({Buffer.INPUT: inp, Buffer.OUTPUT: outp, Buffer.SCRATCH: max(0, gpu.scratch_chunks)})
    return tuple(out)


def _refused(ir: IR, problem: Problem) -> ExecutionError:
    return ExecutionError(f"{ir.name}: {problem.located(('rank', 'tb', 'op'), ' ')}")


def judged(
    ir: IR, declared: Collective | None = None
) -> tuple[Collective | None, tuple[dict[Buffer, int], ...]]:
    """The collective ``ir`` implements and each rank's buffers (:func:`collective_of`,
    :func:`_chunks`), once nothing in ``ir`` is what a runtime loading it would refuse (else the
    :class:`ExecutionError` of the first such problem: :func:`build_program`)."""
    coll = collective_of(ir, declared)
    chunks = _chunks(ir, coll)
    found = load_problems(ir, chunks)
    if found:
        raise _refused(ir, found[0])
    return coll, chunks


def build_program(ir: IR, declared: Collective | None = None, dialect: str | Dialect = "msccl") -> Program:
    """Judge ``ir`` as a runtime loading it would, and fold it as its parser does (``declared``: the
    expected result of a ``custom`` IR, see :func:`collective_of`; ``dialect``: whose parser, both
    MSCCL runtimes fold alike).

    Raises :class:`ExecutionError` for anything the runtime would reject or corrupt
    (:func:`codegen.rules.load_problems`): a wrong number of gpus, an empty grid, bad peers, two
    threadblocks sharing a connection, send or receive steps without the peer, dependencies on
    missing ops, locations outside their buffer.
    """
    d = get_dialect(dialect)
    coll, chunks = judged(ir, declared)
    tbs = tuple(
        TbProgram(gpu.rank, tb.id, tb.send, tb.recv, tb.channel, transmissions(tb, d))
        for gpu in ir.gpus
        for tb in gpu.threadblocks
    )
    ends = sorted(connections(ir).items())
    links = {key: Connection(*key, sender=sender, receiver=receiver) for key, (sender, receiver) in ends}
    return Program(ir, coll, tbs, chunks, links)


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


def buffer_layout(
    chunks: dict[Buffer, int], alias: tuple[str, int] | None
) -> tuple[dict[Buffer, tuple[Buffer, int]], dict[Buffer, int]]:
    """Where one rank's buffers live for a call: each buffer's (base buffer, chunk offset in it), and
    the chunks of each base. Out of place every buffer is its own base; in place (``alias``, from
    :func:`call_aliases`) the smaller of input and output is a view into the larger."""
    where: dict[Buffer, tuple[Buffer, int]] = {b: (b, 0) for b in Buffer}
    if alias is not None:
        small = Buffer.INPUT if alias[0] == "input" else Buffer.OUTPUT
        large = Buffer.OUTPUT if small is Buffer.INPUT else Buffer.INPUT
        where[small] = (large, alias[1])
    base_chunks = {b: chunks[b] for b in Buffer if where[b][0] is b}
    for b in Buffer:
        base, offset = where[b]
        base_chunks[base] = max(base_chunks[base], offset + chunks[b])
    return where, base_chunks
