"""NCCL as the peer: per machine, allgather against the textbook ring and NCCL (issue 15).

For each machine and size: the textbook ring (one channel), NCCL's layout (its channels as an
Algorithm, ``xccl baseline nccl``) timed in the project's engine, NCCL's own model, the best
synthesized algorithm (the SMT front on dgx1, the MILP from the shipped sketch elsewhere, made at
that size under the row's model), and the gain over NCCL (NCCL's time / the best synthesized) for
each estimate. The engine's times are given under both timing models (ideal: SCCL's and TACCL's;
calibrated: docs/nccl.md). Every time is modeled; none is measured.

    .venv/bin/python benchmarks/nccl_peer.py                         # dgx1, ndv2x2, dgx2x2 (about 2 min)
    .venv/bin/python benchmarks/nccl_peer.py --machines dgx-a100x8   # the 64-rank one (a few minutes)
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from common.units import format_size, parse_size
from synth.algorithm import Algorithm
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.cost import simulate
from synth.nccl import nccl_time
from synth.nccl.compare import nccl_layout
from synth.timing import IDEAL, Params, model_params
from topologies import load
from topologies.model import Topology
from xccl.cli.output import print_table, progress

SKETCHES = {"ndv2x2": "ndv2x2-relay", "dgx2x2": "dgx2x2-relay", "dgx-a100x8": "dgx-a100x8-direct"}
"""The shipped sketch each multi-machine topology's MILP is made from."""
MODELS = {"ideal": IDEAL, "calibrated": model_params("calibrated")}


def synthesized(topo: Topology, size: int, params: Params) -> list[tuple[str, Algorithm]]:
    """The synthesized candidates at ``size``: the SMT front on one machine, the MILP across
    machines (optimised under ``params``; SMT has no timing model)."""
    if topo.name in SKETCHES:
        from synth.milp import Options, synthesize

        result = synthesize(topo, "allgather", SKETCHES[topo.name], size, options=Options(params=params))
        return [(f"MILP {SKETCHES[topo.name]}", result.algorithm)]
    from synth.smt import pareto_front

    front = pareto_front(topo, "allgather")
    return [(f"SMT S={a.num_steps} C={a.chunks}", a) for a in front.algorithms]


def rows(machine: str, sizes: Iterable[int]) -> list[list[str]]:
    topo = load(machine)
    coll = make_collective("allgather", topo.num_ranks)
    ring = make_baseline("ring", topo, coll)
    nccl = nccl_layout(topo, coll)
    out = []
    for size in sizes:
        progress(f"{machine} {format_size(size)}: synthesizing")
        model = nccl_time(topo, "allgather", size)
        for name, params in MODELS.items():
            candidates = synthesized(topo, size, params)
            best_name, best = min(
                ((label, simulate(a, topo, size, params).time_us) for label, a in candidates), key=lambda x: x[1]
            )
            layout = simulate(nccl, topo, size, params).time_us
            out.append(
                [
                    machine,
                    format_size(size),
                    name,
                    f"{simulate(ring, topo, size, params).time_us:.2f}",
                    f"{layout:.2f} ({nccl.chunks} ch)",
                    f"{model.time_us:.2f} {model.algorithm}/{model.protocol}",
                    f"{best:.2f} {best_name}",
                    f"{layout / best:.2f}x",
                    f"{model.time_us / best:.2f}x",
                ]
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default="dgx1,ndv2x2,dgx2x2")
    parser.add_argument("--sizes", default="1KiB,1MiB,1GiB")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    table = [row for m in args.machines.split(",") for row in rows(m, sizes)]
    print_table(
        [
            "machine",
            "size",
            "engine model",
            "textbook ring us",
            "NCCL layout us",
            "NCCL model us",
            "best synthesized us",
            "gain vs NCCL layout",
            "gain vs NCCL model",
        ],
        table,
        title="allgather, every time modeled: the engine's (ideal or calibrated) for the ring, NCCL's layout "
        "and the synthesized; NCCL's own model (v2.30.7) for its column; gain = NCCL / best synthesized",
    )


if __name__ == "__main__":
    main()
