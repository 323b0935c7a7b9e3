"""One rank's memory: its buffers (aliased for in-place calls), which chunk slots hold data, and the
sent data still waiting in a FIFO.

For an in-place call the smaller buffer is a view into the larger one
(``Collective.inplace_alias``, MSCCL's conventions), so each logical buffer maps to a *base* array
and a chunk offset in it; reads, writes and initialisation are tracked on the bases.

Sending does not copy: the message holds a view of the sender's memory. Before any write to that
memory the views it would change are copied out (:meth:`RankMemory.before_write`), so a message
always carries the data as it was when sent, as NCCL's copy into the receiver's FIFO does, at the
cost of one copy per transfer instead of two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codegen.ir import Buffer
from runtime.program import buffer_layout

__all__ = ["Message", "RankMemory", "garbage"]



def garbage(dtype: np.dtype) -> object:
    """What memory nothing wrote holds: NaN for floats, the most negative value for integers."""
    if dtype.kind == "f":
        return np.nan
    return np.iinfo(dtype).min


@dataclass(eq=False)
class Message:
    """One primitive call's data in a FIFO, with who sent it (for reports). ``base``/``lo``/``hi``
    name the sender's memory the data still views (``base`` None once it owns its data)."""

    data: np.ndarray
    sender: tuple[int, int, int]
    base: Buffer | None = None
    lo: int = 0
    hi: int = 0

    def detach(self) -> None:
        if self.base is not None:
            self.data = self.data.copy()
            self.base = None


class RankMemory:
    """Buffers of one rank for chunks of ``chunk_elems`` elements in ``ntiles`` tiles."""

    def __init__(
        self,
        chunks: dict[Buffer, int],
        chunk_elems: int,
        ntiles: int,
        dtype: np.dtype,
        alias: tuple[str, int] | None,
    ) -> None:
        self.chunk_elems = chunk_elems
        self.dtype = dtype
        # logical buffer -> (base buffer, chunk offset in the base)
        self.where, base_chunks = buffer_layout(chunks, alias)
        self.bases = {b: np.empty(c * chunk_elems, dtype) for b, c in base_chunks.items()}
        self.written = {b: np.zeros((c, ntiles), bool) for b, c in base_chunks.items()}
        self.chunks = chunks
        self.pending: list[Message] = []

    def view(self, buffer: Buffer) -> np.ndarray:
        """The whole logical buffer."""
        base, offset = self.where[buffer]
        lo = offset * self.chunk_elems
        return self.bases[base][lo : lo + self.chunks[buffer] * self.chunk_elems]

    def load(self, data: np.ndarray) -> None:
        """Start of a call: the input holds ``data``, everything else holds garbage."""
        for base, array in self.bases.items():
            array.fill(garbage(self.dtype))
            self.written[base].fill(False)
        np.copyto(self.view(Buffer.INPUT), data)
        base, offset = self.where[Buffer.INPUT]
        self.written[base][offset : offset + self.chunks[Buffer.INPUT]] = True
        self.pending.clear()

    def locate(self, buffer: Buffer, chunk: int) -> tuple[Buffer, int]:
        """(base buffer, base chunk) of a logical chunk."""
        base, offset = self.where[buffer]
        return base, offset + chunk

    def first_unwritten(self, base: Buffer, chunk: int, count: int, tile: int) -> int | None:
        """Base chunk in ``[chunk, chunk + count)`` whose ``tile`` nothing wrote, if any."""
        column = self.written[base][chunk : chunk + count, tile]
        if column.all():
            return None
        return chunk + int(np.argmin(column))

    def before_write(self, base: Buffer, lo: int, hi: int) -> None:
        """Copy out every in-flight message that views ``[lo, hi)`` of ``base``."""
        keep = []
        for msg in self.pending:
            if msg.base is None:
                continue
            if msg.base is base and msg.lo < hi and lo < msg.hi:
                msg.detach()
            else:
                keep.append(msg)
        self.pending = keep

    def add_pending(self, msg: Message) -> None:
        """Track a message that views this memory; consumed ones (``base`` None) are dropped."""
        if len(self.pending) >= 64:
            self.pending = [m for m in self.pending if m.base is not None]
        self.pending.append(msg)

    def mark_written(self, base: Buffer, chunk: int, count: int, tile: int) -> None:
        self.written[base][chunk : chunk + count, tile] = True
