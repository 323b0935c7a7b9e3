"""Two-step alltoall across machines (as MSCCL's ``alltoall_a100_two_step``).

Chunks between GPUs of one machine go directly. A chunk from GPU ``(m1, l1)`` to GPU ``(m2, l2)``
on another machine is first gathered on ``(m1, l2)``, the GPU of the source's machine with the
destination's local index, into a scratch slice for machine ``m2``; then that GPU sends the whole
slice, ``g`` chunks in one transfer, to ``(m2, l2)``, where they land contiguously in the output.
Each network transfer thus carries ``g`` chunks instead of one.
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
) -> ChunkProgram:
    topo = load(topology)
    machines = topo.num_machines
    if machines < 2:
        raise DslError(f"two-step alltoall: {topo.name} has one machine")
    g = topo.num_ranks // machines
    n = topo.num_ranks
    with ChunkProgram(f"alltoall-two-step-{machines}x{g}", topo, "alltoall", instances, protocol) as prog:
        for src in range(n):
            m1, l1 = divmod(src, g)
            for dst in range(n):
                m2, l2 = divmod(dst, g)
                if m1 == m2:  # same machine: straight to the output
                    chunk(src, "input", dst).copy(dst, "output", src)
                else:  # step 1: to the relay with the destination's local index
                    chunk(src, "input", dst).copy(m1 * g + l2, f"to-machine-{m2}", l1)
        for m1 in range(machines):  # step 2: one transfer of g chunks per relay and machine
            for l2 in range(g):
                for m2 in range(machines):
                    if m2 != m1:
                        block = chunk(m1 * g + l2, f"to-machine-{m2}", 0, size=g)
                        block.copy(m2 * g + l2, "output", m1 * g)
    return prog
