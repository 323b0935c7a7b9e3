"""What the NCCL protocol fixes for an MSCCL run: the tile, the FIFO depth, the chunk split.

The runtime splits the (multiplied) buffer into ``nchunksperloop`` chunks and processes every chunk
tile by tile: each threadblock replays all its steps once per tile (reference/msccl-xml.md,
section 4). A tile is the bytes one primitive call may move (``chunkEffectiveSize``); a step with
``cnt`` > 1 runs as calls of at most ``maxAllowedCount`` whole chunks, which is > 1 only when a
chunk fits a tile at least twice (so those chunks are processed in a single tile).
A connection's FIFO holds ``NCCL_STEPS`` (8) protocol steps; a Simple call always uses 4 of them
(2 slices of 2 steps, even when it carries less data), an LL or LL128 call one.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.protocols import NCCL_STEPS, STEPS_PER_CALL
from codegen.rules import MAX_COUNT
from runtime.errors import ExecutionError

__all__ = [
    "NCCL_STEPS",
    "PROTOCOLS",
    "Layout",
    "Protocol",
    "fifo_depth",
    "layout",
    "max_allowed_count",
    "protocol",
    "tile_bytes",
]

@dataclass(frozen=True)
class Protocol:
    """``tile_bytes``: data per primitive call with NCCL's default buffers; ``steps_per_call``:
    FIFO steps one call occupies."""

    name: str
    tile_bytes: int
    steps_per_call: int


PROTOCOLS: dict[str, Protocol] = {
    # 4 MiB buffer / 8 steps = 512 KiB per step, 4 steps (chunkSteps) per call
    "Simple": Protocol("Simple", 4 * 512 * 1024, STEPS_PER_CALL["Simple"]),
    # 512 KiB buffer / 8 steps = 64 KiB per step, half of each 16-byte line is flags
    "LL": Protocol("LL", 32 * 1024, STEPS_PER_CALL["LL"]),
    # 4,915,200-byte buffer / 8 steps = 614,400 bytes per step, 120 of every 128 bytes are data
    "LL128": Protocol("LL128", 614400 * 120 // 128, STEPS_PER_CALL["LL128"]),
}


def protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise ExecutionError(f"protocol {name!r}: expected one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def tile_bytes(protocol_name: str) -> int:
    """Bytes per tile (``chunkEffectiveSize``) of the protocol with NCCL's default buffer sizes."""
    return protocol(protocol_name).tile_bytes


def fifo_depth(protocol_name: str) -> int:
    """Primitive calls a connection holds before the sender must wait: Simple 2, LL and LL128 8."""
    return NCCL_STEPS // protocol(protocol_name).steps_per_call


def max_allowed_count(tile: int, chunk: int) -> int:
    """``maxAllowedCount``: whole chunks one call may carry (``tile`` and ``chunk`` in bytes), at
    most the runtimes' largest count (:data:`codegen.rules.MAX_COUNT`)."""
    if chunk <= 0:
        return MAX_COUNT
    return min(max(1, tile // chunk), MAX_COUNT)


@dataclass(frozen=True)
class Layout:
    """The chunk and tile split of one call, in elements.

    Tile ``t`` covers elements ``[t * tile_elems, t * tile_elems + tile_len(t))`` of every chunk;
    the last tile is shorter when the chunk is not a multiple of the tile.
    """

    chunk_elems: int
    tile_elems: int
    ntiles: int
    max_count: int

    def tile_len(self, t: int) -> int:
        return min(self.tile_elems, self.chunk_elems - t * self.tile_elems)


def layout(chunk_elems: int, itemsize: int, tile: int) -> Layout:
    """Split chunks of ``chunk_elems`` elements into tiles of ``tile`` bytes, as the kernel does."""
    tile_elems = tile // itemsize
    if tile_elems < 1:
        raise ExecutionError(f"tile of {tile} bytes: expected at least one {itemsize}-byte element")
    ntiles = max(1, -(-chunk_elems // tile_elems))
    return Layout(chunk_elems, tile_elems, ntiles, max_allowed_count(tile, chunk_elems * itemsize))
