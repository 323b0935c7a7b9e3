"""Ring allreduce, in place: each chunk travels the ring being reduced, then the result travels on.

Chunk ``c`` starts at rank ``c``; each next rank adds its own and passes it on, so rank ``c - 1``
ends with the full reduction; it is then copied around the ring. With one channel every rank
runs one threadblock: ``s``, ``n-2`` x ``rrs``, ``rrcs``, ``n-2`` x ``rcs``, ``r``.
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
        f"allreduce-ring-{n}",
        topology or f"ring:{n}",
        "allreduce",
        instances,
        protocol,
        inplace=True,
        chunks_per_rank=n,
    ) as prog:
        for c in range(n):
            for step in range(1, n):
                rank = (c + step) % n
                chunk(rank, "input", c).reduce(chunk((rank - 1) % n, "input", c))
        for c in range(n):
            for step in range(n - 1):
                rank = (c - 1 + step) % n
                chunk(rank, "input", c).copy((rank + 1) % n, "input", c)
    return prog
