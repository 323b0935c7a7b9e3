"""``xccl demo``: the main job, end to end on a shipped machine."""

from __future__ import annotations

import argparse

from synth.baselines import BASELINES, BaselineError, applies, make_baseline
from synth.bounds import lower_bound_us
from synth.collectives import make_collective
from synth.cost import simulate
from synth.units import format_size, parse_size
from topologies import load
from xccl.cli.output import print_table, progress

__all__ = ["register"]

SIZES = ("1KiB", "1MiB", "1GiB")


def cmd_demo(args: argparse.Namespace) -> int:
    topo = load(args.topology)
    sizes = [parse_size(s) for s in SIZES]
    progress(
        f"[demo] loaded {topo.name}: {topo.num_ranks} ranks, {len(topo.logical().links)} rank-to-rank links"
    )
    rows = []
    for kind in BASELINES:
        if not applies(kind, "allgather"):
            continue
        chunks = 2 if kind == "bidir-ring" else 1
        coll = make_collective("allgather", topo.num_ranks, chunks)
        try:
            algo = make_baseline(kind, topo, coll)
        except BaselineError as exc:
            progress(f"[demo] {kind}: not applicable: {exc}")
            continue
        progress(
            f"[demo] {kind}: built and verified ({algo.num_steps} steps, {algo.rounds} rounds, {algo.chunks} chunk(s))"
        )
        times = [simulate(algo, topo, s).time_us for s in sizes]
        rows.append(
            [kind, algo.num_steps, algo.rounds, algo.chunks, "verified", *(f"{t:.2f}" for t in times)]
        )
    coll = make_collective("allgather", topo.num_ranks)
    rows.append(["lower bound", "", "", "", "", *(f"{lower_bound_us(topo, coll, s):.2f}" for s in sizes)])
    print()
    print_table(
        ["allgather", "steps", "rounds", "chunks", "check", *(f"us @ {format_size(s)}" for s in sizes)],
        rows,
        title=f"allgather on {topo.name}: modeled time (event simulator) against the lower bound",
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the end-to-end demonstration on a shipped machine")
    p.add_argument("--topology", "-t", default="dgx1")
    p.set_defaults(func=cmd_demo)
