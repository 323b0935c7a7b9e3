"""Test support: the GPU kernel's protocol, emulated on the CPU block by block (no GPU needed).

Each kernel block becomes a Python generator that follows ``xccl_kernel.cu`` line for line at the
level of pieces: it walks tiles and steps, waits on dependency flags and on the connection
counters (yielding while it waits), moves one FIFO slot at a time and raises the same counters.
A round-robin scheduler runs the blocks; if none can move, the launch would time out on the GPU,
and the emulator reports the same error code. ``tests/test_cupy_kernel.py`` uses it to check the
packing and the protocol without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np

from codegen.ir import OpType
from runtime.cupy.pack import OP_CODES, STEP_STRIDE, Packed

__all__ = ["EmulationError", "emulate"]

_OP = {code: op for op, code in OP_CODES.items()}
_RECV = {
    OpType.RECV,
    OpType.RECV_COPY_SEND,
    OpType.RECV_REDUCE_SEND,
    OpType.RECV_REDUCE_COPY,
    OpType.RECV_REDUCE_COPY_SEND,
}
_SEND = {OpType.SEND, OpType.RECV_COPY_SEND, OpType.RECV_REDUCE_SEND, OpType.RECV_REDUCE_COPY_SEND}
_REDUCE = {OpType.RECV_REDUCE_SEND, OpType.RECV_REDUCE_COPY, OpType.RECV_REDUCE_COPY_SEND, OpType.REDUCE}


class EmulationError(Exception):
    """Every block waits on a counter nobody can raise: what the GPU reports as a time-out."""

    def __init__(self, code: int, block: int, step: int, tile: int) -> None:
        super().__init__(f"error code {code} at block {block} step {step} tile {tile}")
        self.code, self.block, self.step, self.tile = code, block, step, tile


def emulate(
    packed: Packed,
    buffers: list[list[np.ndarray]],
    chunk_elems: int,
    tile_elems: int,
    slot_elems: int,
    nslots: int,
    reduce: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> None:
    """Run every block; ``buffers[rank]`` = [input, output, scratch] flat arrays, updated in place."""
    dtype = buffers[0][1].dtype
    fifo = [np.zeros(nslots * slot_elems, dtype=dtype) for _ in packed.connections]
    head = [0] * len(packed.connections)
    tail = [0] * len(packed.connections)
    flags = [0] * packed.num_blocks

    def view(rank: int, buf: int, off: int, at: int, n: int) -> np.ndarray | None:
        if buf < 0:
            return None
        start = off * chunk_elems + at
        return buffers[rank][buf][start : start + n]

    def block(b: int) -> Generator[tuple[int, int, int], None, None]:
        rank, _, send_conn, recv_conn, first, count = (int(x) for x in packed.blocks[b, :6])
        nsent = nrecv = 0
        for tile, g in enumerate(range(0, chunk_elems, tile_elems)):
            length = min(tile_elems, chunk_elems - g)
            for s in range(count):
                row = [int(x) for x in packed.steps[first + s]]
                op = _OP[row[0]]
                for d in range(row[7]):
                    target, step = (int(x) for x in packed.deps[row[6] + d])
                    while flags[target] < tile * STEP_STRIDE + step + 1:
                        yield (1, s, tile)
                if op is not OpType.NOP:
                    recv, send = op in _RECV, op in _SEND
                    whole = length == chunk_elems
                    nseg = 1 if whole else row[5]
                    seg_len = row[5] * length if whole else length
                    for j in range(nseg):
                        for q in range(0, seg_len, slot_elems):
                            n = min(slot_elems, seg_len - q)
                            while recv and head[recv_conn] < nrecv + 1:
                                yield (2, s, tile)
                            while send and nsent >= nslots and tail[send_conn] < nsent - nslots + 1:
                                yield (3, s, tile)
                            src = view(rank, row[1], row[2] + j, g + q, n)
                            dst = view(rank, row[3], row[4] + j, g + q, n)
                            if recv:
                                slot = (nrecv % nslots) * slot_elems
                                data = fifo[recv_conn][slot : slot + n].copy()
                            else:
                                data = (dst if op is OpType.REDUCE else src).copy()
                            if op in _REDUCE:
                                data = reduce(data, src)
                            if op not in (OpType.SEND, OpType.RECV_REDUCE_SEND):
                                dst[:] = data
                            if send:
                                slot = (nsent % nslots) * slot_elems
                                fifo[send_conn][slot : slot + n] = data
                            if recv:
                                tail[recv_conn] = nrecv + 1
                                nrecv += 1
                            if send:
                                head[send_conn] = nsent + 1
                                nsent += 1
                if row[8]:
                    flags[b] = tile * STEP_STRIDE + s + 1

    live = {b: block(b) for b in range(packed.num_blocks)}
    while live:
        progressed = False
        waits: dict[int, tuple[int, int, int]] = {}
        for b in list(live):
            before = (tuple(head), tuple(tail), tuple(flags))
            try:
                waits[b] = next(live[b])
            except StopIteration:
                del live[b]
                progressed = True
                continue
            if (tuple(head), tuple(tail), tuple(flags)) != before:
                progressed = True
        if live and not progressed:  # every block waits on a counter nobody can raise: a GPU time-out
            b = min(live)
            code, step, tile = waits[b]
            raise EmulationError(code, b, step, tile)
