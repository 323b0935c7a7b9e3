"""Pack an IR into the flat integer tables the GPU kernel interprets (no GPU needed).

Tables (layouts mirror the structs in ``xccl_kernel.cu``):

- ``blocks[b]``: rank, tb id, send connection, receive connection, first step, step count (+ padding);
  blocks are ordered by rank, then threadblock id, so one device's ranks form one contiguous range.
- ``steps[k]``: op code, src buffer, src offset, dst buffer, dst offset, count, first dependency,
  dependency count, has_dep (+ padding).
- ``deps[d]``: (global block index, step index) on the same rank.
- ``connections``: one per (sender, receiver, channel); the sender's and the receiver's threadblocks
  name the same index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codegen.ir import IR, Buffer, Op, OpType
from codegen.rules.structure import connections
from common.errors import XcclError

__all__ = [
    "BUF_CODES",
    "OP_CODES",
    "STEP_STRIDE",
    "Connection",
    "PackError",
    "Packed",
    "pack",
    "plan_buffers",
]

OP_CODES: dict[OpType, int] = {
    OpType.SEND: 0,
    OpType.RECV: 1,
    OpType.RECV_COPY_SEND: 2,
    OpType.RECV_REDUCE_SEND: 3,
    OpType.RECV_REDUCE_COPY: 4,
    OpType.RECV_REDUCE_COPY_SEND: 5,
    OpType.COPY: 6,
    OpType.REDUCE: 7,
    OpType.NOP: 8,
}
BUF_CODES: dict[Buffer, int] = {Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}
STEP_STRIDE = 4096
"""``XCCL_STEP_STRIDE`` in the kernel: a threadblock may hold fewer steps than this."""
BLOCK_FIELDS = 12
STEP_FIELDS = 10


class PackError(XcclError):
    """An IR the kernel cannot run (unmatched connection, too many steps)."""


@dataclass(frozen=True)
class Connection:
    sender: int
    receiver: int
    channel: int


@dataclass(frozen=True, eq=False)
class Packed:
    blocks: np.ndarray
    steps: np.ndarray
    deps: np.ndarray
    connections: tuple[Connection, ...]
    rank_blocks: tuple[tuple[int, int], ...]
    """``rank_blocks[r]``: the half-open range of global block indices of rank ``r``."""

    @property
    def num_blocks(self) -> int:
        return int(self.blocks.shape[0])

    def block_range(self, ranks: range) -> tuple[int, int]:
        """Global blocks of a contiguous range of ranks (one device's launch)."""
        return self.rank_blocks[ranks.start][0], self.rank_blocks[ranks.stop - 1][1]


def pack(ir: IR) -> Packed:
    """Flatten ``ir``; raise :class:`PackError` where the runtime could not execute it."""
    index, rank_blocks = _block_index(ir)
    conn_index = _connections(ir)
    blocks = np.zeros((len(index), BLOCK_FIELDS), dtype=np.int32)
    step_rows: list[list[int]] = []
    dep_rows: list[tuple[int, int]] = []
    for gpu in ir.gpus:
        for tb in sorted(gpu.threadblocks, key=lambda t: t.id):
            if len(tb.ops) >= STEP_STRIDE:
                raise PackError(
                    f"{ir.name}: rank {gpu.rank} threadblock {tb.id}: {len(tb.ops)} steps, at most {STEP_STRIDE - 1}"
                )
            send_conn = conn_index[(gpu.rank, tb.send, tb.channel)] if tb.send is not None else -1
            recv_conn = conn_index[(tb.recv, gpu.rank, tb.channel)] if tb.recv is not None else -1
            b = index[(gpu.rank, tb.id)]
            blocks[b, :6] = (gpu.rank, tb.id, send_conn, recv_conn, len(step_rows), len(tb.ops))
            for k, op in enumerate(tb.ops):
                first_dep = len(dep_rows)
                dep_rows += _deps(ir, index, gpu.rank, tb.id, k, op)
                step_rows.append(_step_row(op, first_dep))
    steps = np.array(step_rows, dtype=np.int32).reshape(-1, STEP_FIELDS)
    deps = np.array(dep_rows, dtype=np.int32).reshape(-1, 2)
    connections = tuple(Connection(*key) for key in conn_index)
    return Packed(blocks, steps, deps, connections, tuple(rank_blocks))


def _block_index(ir: IR) -> tuple[dict[tuple[int, int], int], list[tuple[int, int]]]:
    """The global block of each (rank, threadblock id), ordered by rank then id, and each rank's
    half-open range of blocks."""
    index: dict[tuple[int, int], int] = {}
    rank_blocks = []
    for gpu in ir.gpus:
        begin = len(index)
        for tb in sorted(gpu.threadblocks, key=lambda t: t.id):
            index[(gpu.rank, tb.id)] = len(index)
        rank_blocks.append((begin, len(index)))
    return index, rank_blocks


def _connections(ir: IR) -> dict[tuple[int, int, int], int]:
    """The index of each connection (sender, receiver, channel), in order. The loader
    (``runtime.program``, on :mod:`codegen.rules`) has refused an IR whose threadblocks share a
    connection; one with a threadblock at one end only is refused here, before the kernel would
    wait on it forever."""
    index = {}
    for key, (sender, receiver) in sorted(connections(ir).items()):
        if sender is None or receiver is None:
            side = f"rank {key[0]} sends" if sender is None else f"rank {key[1]} receives"
            raise PackError(f"{ir.name}: connection {key[0]} -> {key[1]} channel {key[2]}: no threadblock of {side}")
        index[key] = len(index)
    return index


def _deps(
    ir: IR, index: dict[tuple[int, int], int], rank: int, tb: int, step: int, op: Op
) -> list[tuple[int, int]]:
    """The (global block, step) rows of ``op``'s dependencies, all on its own rank."""
    rows = []
    for dep in op.deps:
        target = index.get((rank, dep.tb))
        if target is None:
            raise PackError(
                f"{ir.name}: rank {rank} threadblock {tb} step {step}: depends on missing threadblock {dep.tb}"
            )
        rows.append((target, dep.op))
    return rows


def _step_row(op: Op, first_dep: int) -> list[int]:
    """One row of the step table (see the module docstring)."""
    src, dst = op.src, op.dst
    return [
        OP_CODES[op.type],
        BUF_CODES[src.buffer] if src is not None else -1,
        src.index if src is not None else 0,
        BUF_CODES[dst.buffer] if dst is not None else -1,
        dst.index if dst is not None else 0,
        op.count if op.type is not OpType.NOP else 0,
        first_dep,
        len(op.deps),
        int(op.has_dep),
        0,
    ]


def plan_buffers(program, chunk_elems: int, aliases, zeros) -> tuple[list, list, list]:
    """Every rank's input, output and scratch arrays, made with ``zeros(rank, elements)``; for an
    in-place call (``aliases[rank]`` = (smaller buffer, first chunk)) the smaller buffer is a slice
    of the larger one. Shared by the GPU executor (CuPy arrays) and the CPU emulation (NumPy)."""
    inputs, outputs, scratch = [], [], []
    ce = chunk_elems
    for rank, sizes in enumerate(program.chunks):
        n_in, n_out = sizes[Buffer.INPUT] * ce, sizes[Buffer.OUTPUT] * ce
        alias = aliases[rank]
        if alias is None:
            inp, out = zeros(rank, max(1, n_in)), zeros(rank, max(1, n_out))
        elif alias[0] == "input":  # the input is a slice of the output
            out = zeros(rank, max(1, n_out))
            inp = out[alias[1] * ce : alias[1] * ce + n_in]
        else:  # the output is a slice of the input
            inp = zeros(rank, max(1, n_in))
            out = inp[alias[1] * ce : alias[1] * ce + n_out]
        inputs.append(inp)
        outputs.append(out)
        scratch.append(zeros(rank, max(1, sizes[Buffer.SCRATCH] * ce)))
    return inputs, outputs, scratch
