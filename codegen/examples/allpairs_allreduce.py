"""All-pairs allreduce, in place: every rank owns one chunk, gathers everyone's copy of it into
scratch, reduces locally, then sends the result to every other rank.

Two communication steps whatever the rank count (every pair of ranks needs a link, e.g. an NVSwitch
machine); the local reductions into one slot chain in the runtime (consecutive ``re``).
"""

from __future__ import annotations

from codegen.dsl import ChunkProgram, chunk
from topologies import Topology

__all__ = ["program"]


def program(
    num_ranks: int = 8,
    instances: int = 1,
    protocol: str = "Simple",
    topology: Topology | str | None = None,
) -> ChunkProgram:
    n = num_ranks
    with ChunkProgram(
        f"allreduce-allpairs-{n}",
        topology or f"fully-connected:{n}",
        "allreduce",
        instances,
        protocol,
        inplace=True,
        chunks_per_rank=n,
    ) as prog:
        for owner in range(n):  # everyone's copy of chunk `owner` to its owner's scratch
            for peer in range(n):
                if peer != owner:
                    chunk(peer, "input", owner).copy(owner, "scratch", peer)
        for owner in range(n):
            for peer in range(n):
                if peer != owner:
                    chunk(owner, "input", owner).reduce(chunk(owner, "scratch", peer))
        for owner in range(n):  # the result to everyone
            for peer in range(n):
                if peer != owner:
                    chunk(owner, "input", owner).copy(peer, "input", owner)
    return prog
