"""What can go wrong when an IR runs: it cannot run as asked (or not at this size, or not within the
memory limit), it deadlocks, it reads memory nothing wrote, or it computes the wrong result. All are
:class:`XcclError`, so the CLI prints one line. Each pickles (``__reduce__``), so an error raised in
a rank's own process (the torch backend) reaches the caller as it was raised."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import XcclError

__all__ = [
    "BlockedStep",
    "DeadlockError",
    "ExecutionError",
    "ExecutionMismatch",
    "MemoryLimitError",
    "SizeNotSelected",
    "UninitializedRead",
]

_SHOWN = 8
"""Blocked steps named in a deadlock message (all of them stay in ``DeadlockError.blocked``)."""


class ExecutionError(XcclError):
    """The IR cannot run as asked: malformed for the runtime, a size it would not select, a misused
    connection. The message names the IR, the rank, threadblock and op, and what was expected."""


class SizeNotSelected(ExecutionError):
    """The runtime would not select the IR at this size: outside its ``minBytes``/``maxBytes``
    window, or not a whole number of its chunks. The benchmark skips such a size; ``run`` refuses it."""


class MemoryLimitError(ExecutionError):
    """Executing at this size would need more host memory than the limit allows (checked before
    anything is allocated); the message names the limit and how to raise it."""


@dataclass(frozen=True)
class BlockedStep:
    """A threadblock that cannot move: where it stands and what it waits for."""

    rank: int
    tb: int
    op: int
    tile: int
    reason: str

    def __str__(self) -> str:
        return f"rank {self.rank} tb {self.tb} op {self.op} (tile {self.tile}) {self.reason}"


class DeadlockError(ExecutionError):
    """Every live threadblock is blocked; ``blocked`` lists each one and what it waits for."""

    def __init__(self, ir_name: str, blocked: tuple[BlockedStep, ...]) -> None:
        self.ir_name = ir_name
        self.blocked = blocked
        shown = "; ".join(str(b) for b in blocked[:_SHOWN])
        more = f"; and {len(blocked) - _SHOWN} more" if len(blocked) > _SHOWN else ""
        super().__init__(f"{ir_name}: deadlock, every live threadblock is blocked: {shown}{more}")

    def __reduce__(self):
        return (DeadlockError, (self.ir_name, self.blocked))


class UninitializedRead(ExecutionError):
    """An op read a chunk slot (of one tile) that nothing had written."""

    def __init__(
        self, ir_name: str, rank: int, tb: int, op: int, tile: int, buffer: str, chunk: int, what: str
    ) -> None:
        self.ir_name, self.rank, self.tb, self.op = ir_name, rank, tb, op
        self.tile, self.buffer, self.chunk = tile, buffer, chunk
        super().__init__(
            f"{ir_name}: rank {rank} tb {tb} op {op} ({what}) reads {buffer}[{chunk}] in tile {tile}, "
            "which nothing wrote before"
        )
        self.what = what

    def __reduce__(self):
        return (
            UninitializedRead,
            (self.ir_name, self.rank, self.tb, self.op, self.tile, self.buffer, self.chunk, self.what),
        )


class ExecutionMismatch(ExecutionError):
    """An output differs from the NumPy reference of the collective; names the first difference."""

    def __init__(
        self,
        ir_name: str,
        rank: int,
        buffer: str,
        chunk: int,
        index: int,
        expected: object,
        actual: object,
        detail: str = "",
    ) -> None:
        self.ir_name, self.rank, self.buffer, self.chunk = ir_name, rank, buffer, chunk
        self.index, self.expected, self.actual = index, expected, actual
        self.detail = detail
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{ir_name}: wrong result on rank {rank}: {buffer}[{chunk}] element {index}: "
            f"expected {expected}, got {actual}{extra}"
        )

    def __reduce__(self):
        fields = (self.ir_name, self.rank, self.buffer, self.chunk, self.index, self.expected, self.actual)
        return (ExecutionMismatch, (*fields, self.detail))
