"""What the NCCL protocols fix for a schedule: their names, and how many primitive calls one
connection holds before its sender must wait.

A connection's FIFO has ``NCCL_STEPS`` (8) protocol steps. An MSCCL primitive call on the Simple
protocol always takes 4 of them (2 slices of 2 steps, even when it carries less data), on LL and
LL128 one, so a sender can be 2 (Simple) or 8 (LL, LL128) calls ahead of its receiver. A step with
``cnt`` chunks runs as one call per chunk at large sizes (a chunk fills a whole tile), so a schedule
must leave room for that many. The compiler orders its schedules within this bound, the static
checker proves it, and the runtime's executors model the same FIFOs (``runtime.protocol``).
"""

from __future__ import annotations

from codegen.errors import CodegenError

__all__ = ["NCCL_STEPS", "PROTOCOLS", "STEPS_PER_CALL", "fifo_calls"]

PROTOCOLS = ("Simple", "LL", "LL128")

NCCL_STEPS = 8
"""Protocol steps in one connection's FIFO."""

STEPS_PER_CALL = {"Simple": 4, "LL": 1, "LL128": 1}
"""FIFO steps one MSCCL primitive call occupies (Simple: ``MSCCL_CHUNKSTEPS`` = NCCL_STEPS / 2)."""


def fifo_calls(protocol: str) -> int:
    """Primitive calls a connection holds before its sender waits: Simple 2, LL and LL128 8."""
    if protocol not in STEPS_PER_CALL:
        raise CodegenError(f"protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    return NCCL_STEPS // STEPS_PER_CALL[protocol]
