"""Binomial-tree broadcast from rank 0: in step ``k`` every rank that holds the data (ranks below
``k``) sends it to rank ``+ k``: ``log2(n)`` steps, rounded up.

Out of place: the root copies its input to its output and sends from the input; the others
forward from their output.
"""

from __future__ import annotations

from codegen.dsl import ChunkProgram, chunk
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
    with ChunkProgram(
        f"broadcast-binomial-tree-{n}",
        topology or f"fully-connected:{n}",
        "broadcast",
        instances,
        protocol,
        chunks_per_rank=chunks,
        root=0,
    ) as prog:
        data = chunk(0, "input", 0, size=chunks)
        data.copy(0, "output", 0)
        k = 1
        while k < n:
            for r in range(min(k, n - k)):
                src = data if r == 0 else chunk(r, "output", 0, size=chunks)
                src.copy(r + k, "output", 0)
            k <<= 1
    return prog
