"""The IRs the GPU executor must run with 8 ranks: every codegen example, every baseline kind on
the collectives it applies to, and SMT-synthesized DGX-1 algorithms (compiled on the timed path:
several channels, unfused sends and receives), shared by the GPU tests and the CPU emulation tests."""

from __future__ import annotations

from functools import cache

from codegen import compile_algorithm, compile_program, example_names, load_program
from codegen.ir import IR
from synth.baselines import BASELINES, applies, default_chunks, make_baseline
from synth.collectives import COLLECTIVES, ROOTED, make_collective
from synth.smt import solve_instance
from synth.trees.synthesis import synthesize as pack_trees
from topologies import Link, Nic, Topology, load, multi_node

__all__ = ["SYNTHESIZED", "TREES", "eight_rank_irs", "two_by_four"]

SYNTHESIZED = (("allgather", 2, 3, 2), ("allgather", 3, 7, 6), ("alltoall", 3, 3, 1), ("allreduce", 4, 6, 16))
"""DGX-1 instances (collective, S, R, C), all satisfiable: SCCL's allgather front, the fewest-steps
alltoall, the fastest allreduce of its front (C counts chunks per rank of the allreduce)."""


TREES = (
    ("quadx2", "allgather", False),
    ("quadx2", "allgather", True),
    ("quadx2", "reducescatter", False),
    ("quadx2", "reducescatter", True),
    ("quadx2", "allreduce", False),
    ("quadx2", "allreduce", True),
    ("dgx1", "allgather", False),
    ("dgx1", "reducescatter", False),
)
"""Tree-packing schedules (topology, collective, hierarchical), compiled: every one whose threadblocks
fit an H100 at once (the DGX-1 allreduce needs 390, over its 264)."""


def two_by_four() -> Topology:
    """Two machines of four GPUs on an NVSwitch, one NIC per GPU (8 ranks, for the multi-machine cases)."""
    links = {}
    for r in range(4):
        links[(r, "nvswitch")] = links[("nvswitch", r)] = Link(300.0, 0.35)
    machine = Topology.build(
        "quad",
        4,
        links,
        {"nvswitch": "nvswitch"},
        nics=tuple(Nic(f"nic{r}", (r,), 25.0, 1.7) for r in range(4)),
    )
    return multi_node(machine, 2, name="quadx2")


@cache
def eight_rank_irs() -> tuple[tuple[str, IR], ...]:
    cases: list[tuple[str, IR]] = []
    quad = two_by_four()
    for name in example_names():
        params = (
            {"topology": quad}
            if name in ("hierarchical_allreduce", "two_step_alltoall")
            else {"num_ranks": 8}
        )
        cases.append((f"example:{name}", compile_program(load_program(f"example:{name}", params))))
    where = {"direct": load("switch:8"), "hierarchical": quad}
    for kind in BASELINES:
        topo = where.get(kind, load("dgx1"))
        for coll in COLLECTIVES:
            if not applies(kind, coll):
                continue
            chunks = default_chunks(kind, coll, 8, topo)
            algo = make_baseline(kind, topo, make_collective(coll, 8, chunks, 1 if coll in ROOTED else None))
            cases.append((f"{kind}:{coll}", compile_algorithm(algo, topo)))
    dgx1 = load("dgx1")
    for coll, steps, rounds, chunks in SYNTHESIZED:
        outcome = solve_instance(dgx1, make_collective(coll, 8, chunks), steps, rounds)
        cases.append((f"smt:{coll}-s{steps}-r{rounds}-c{chunks}", compile_algorithm(outcome.algorithm, dgx1)))
    for where, coll, hierarchical in TREES:
        topo = quad if where == "quadx2" else dgx1
        algo = pack_trees(topo, coll, hierarchical=hierarchical).algorithm
        kind = "trees-hierarchical" if hierarchical else "trees"
        cases.append((f"{kind}:{where}-{coll}", compile_algorithm(algo, topo)))
    return tuple(cases)
