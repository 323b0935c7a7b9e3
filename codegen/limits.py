"""xccl's limits on the IRs it reads and checks, in one place.

A file's counts decide how much the reader, the static checker and the symbolic execution
allocate; a malformed or hostile file (``ngpus="1000000000"``) must be refused at once, with a
message that names the limit and how to raise it, not after memory runs out. The defaults admit
real schedules with room to spare (a 512-rank alltoall, a ring allreduce on 1024 ranks, buffers of
32768 chunks: the runtimes store chunk offsets in 16 bits, so no runtime addresses more); each is
raised by its environment variable.
"""

from __future__ import annotations

from codegen.rules import MAX_BUFFER_CHUNKS
from common.limits import Limit
from synth.collectives import SLOTS
from topologies.limits import RANKS

__all__ = ["CHUNKS", "RANKS", "SLOTS", "TRANSFERS"]

# RANKS (``ngpus`` / ``num_ranks`` a reader accepts) is the topologies' limit, and SLOTS (ranks
# times ``nchunksperloop``, the chunk slots the symbolic execution tracks) the collectives': one
# number each, wherever it is checked.
CHUNKS = Limit("chunks", MAX_BUFFER_CHUNKS, "XCCL_MAX_BUFFER_CHUNKS")
"""``nchunksperloop`` and each buffer's chunks (``i_chunks``, ``o_chunks``, ``s_chunks``); by
default what the runtimes can address."""
TRANSFERS = Limit("chunk transfers", 1 << 23, "XCCL_MAX_TRANSFERS")
"""Chunks moved by send and receive steps, summed: the calls the deadlock check orders."""
