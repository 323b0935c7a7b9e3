"""Recursive-doubling allgather, in place, on a power-of-two rank count.

In step ``k`` (1, 2, 4, ...) rank ``r`` sends the ``k`` blocks it holds, its aligned group
``r & ~(k-1) ..``, to rank ``r xor k`` in one aggregated transfer: ``log2(n)`` steps.
"""

from __future__ import annotations

from codegen.dsl import ChunkProgram, chunk
from codegen.errors import DslError
from topologies import Topology

__all__ = ["program"]


def program(
    num_ranks: int = 8,
    chunks: int = 1,
    instances: int = 1,
    protocol: str = "Simple",
    topology: Topology | str | None = None,
) -> ChunkProgram:
    n = num_ranks
    if n < 2 or n & (n - 1):
        raise DslError(f"recursive doubling needs a power-of-two rank count, got {n}")
    with ChunkProgram(
        f"allgather-recursive-doubling-{n}",
        topology or f"hypercube:{n.bit_length() - 1}",
        "allgather",
        instances,
        protocol,
        inplace=True,
        chunks_per_rank=chunks,
    ) as prog:
        k = 1
        while k < n:
            for r in range(n):
                group = r & ~(k - 1)
                chunk(r, "output", group * chunks, size=k * chunks).copy(r ^ k, "output", group * chunks)
            k <<= 1
    return prog
