"""Hierarchical allreduce over several machines, in place.

With ``M`` machines of ``g`` GPUs and ``g * M`` chunks (block ``b`` = chunks ``b*M .. b*M+M-1``):
1. inside each machine, a ring reduce-scatter of blocks: local rank ``l`` ends with block ``l``
   reduced over its machine (transfers of ``M`` chunks at once);
2. across machines, among the GPUs of local rank ``l``, a ring reduce-scatter of block ``l``'s
   chunks: machine ``m`` ends with chunk ``l*M + m`` reduced over everyone;
3. across machines, a ring allgather of those chunks;
4. inside each machine, a ring allgather of blocks.
Only phases 2 and 3 cross the network, each moving ``1/g`` of the data per GPU.
"""

from __future__ import annotations

from codegen.dsl import ChunkProgram, chunk
from codegen.errors import DslError
from topologies import Topology, load

__all__ = ["program"]


def program(
    topology: Topology | str = "dgx-a100x2",
    instances: int = 1,
    protocol: str = "Simple",
    local_ring: list[int] | None = None,
) -> ChunkProgram:
    topo = load(topology)
    machines = topo.num_machines
    if machines < 2:
        raise DslError(f"hierarchical allreduce: {topo.name} has one machine")
    g = topo.num_ranks // machines
    ring = local_ring or list(range(g))

    def rank(m: int, pos: int) -> int:
        """The GPU at position ``pos`` of machine ``m``'s ring."""
        return m * g + ring[pos % g]

    with ChunkProgram(
        f"allreduce-hierarchical-{machines}x{g}",
        topo,
        "allreduce",
        instances,
        protocol,
        inplace=True,
        chunks_per_rank=g * machines,
    ) as prog:
        for m in range(machines):  # 1. ring reduce-scatter of blocks inside each machine
            for b in range(g):
                for step in range(1, g):
                    src, dst = rank(m, b + step), rank(m, b + step + 1)
                    chunk(dst, "input", b * machines, size=machines).reduce(
                        chunk(src, "input", b * machines, size=machines)
                    )
        for pos in range(g):  # 2. and 3. across machines, among GPUs at the same ring position
            b = pos  # phase 1 ends block b at ring position b
            for k in range(machines):
                c = b * machines + k
                for step in range(1, machines):
                    src, dst = (k + step) % machines, (k + step + 1) % machines
                    chunk(rank(dst, pos), "input", c).reduce(chunk(rank(src, pos), "input", c))
                for step in range(machines - 1):
                    src, dst = (k + step) % machines, (k + step + 1) % machines
                    chunk(rank(src, pos), "input", c).copy(rank(dst, pos), "input", c)
        for m in range(machines):  # 4. ring allgather of blocks inside each machine
            for b in range(g):
                for step in range(g - 1):
                    src, dst = rank(m, b + step), rank(m, b + step + 1)
                    chunk(src, "input", b * machines, size=machines).copy(dst, "input", b * machines)
    return prog
