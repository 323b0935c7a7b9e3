"""MILP synthesis (TACCL style) on every shipped sketch: synthesis time and modeled algbw.

For each shipped sketch, collective and size: the synthesis time, the algorithm's algbw in our
event simulator (``synth.cost.simulate``, the default timing model, named in the title), the
textbook ring's (one channel), the gain over NCCL's layout timed in the same model
(``synth.nccl.compare``), and the lower bound's (the larger of the latency and bandwidth bounds, at
line rate), then the issue's quality and speed targets. ``--model`` (default calibrated) is the
model the MILP optimises under and every time is taken in; ``--model ideal`` is TACCL's.

    .venv/bin/python benchmarks/milp.py                    # everything, HiGHS (about 30 minutes)
    .venv/bin/python benchmarks/milp.py --sketches ndv2x2-relay --sizes 1GiB --solver cbc --model ideal

Progress goes to stderr; Ctrl-C prints the rows finished so far.
"""

from __future__ import annotations

import argparse
import sys
import time

from common.units import format_size, parse_size
from sketches import load_sketch, shipped_sketches
from synth.baselines import make_baseline
from synth.bounds import lower_bound_us
from synth.collectives import make_collective
from synth.cost import algbw_GBps, simulate
from synth.milp import Options, synthesize
from synth.nccl.compare import nccl_reference
from synth.timing import MODELS, Params, model_params
from topologies import load
from xccl.cli.output import print_table, progress

SIZES = ("1KiB", "64KiB", "1MiB", "1GiB")
COLLECTIVES = ("allgather", "alltoall", "allreduce")


def ring_time(topo, collective: str, size: int, params: Params) -> float:
    n = topo.num_ranks
    chunks = n if collective == "allreduce" else 1
    algo = make_baseline("ring", topo, make_collective(collective, n, chunks))
    return simulate(algo, topo, size, params).time_us


def measure(
    sketch_name: str, collective: str, size: int, solver: str | None, time_limit: float, params: Params
) -> dict:
    """One synthesis, optimised under ``params`` and timed in it (the bound stays at line rate)."""
    sketch = load_sketch(sketch_name)
    topo = load(sketch.topology)
    began = time.perf_counter()
    options = Options(solver=solver, stage_time_limit_s=time_limit, params=params)
    result = synthesize(topo, collective, sketch, size, options=options)
    seconds = time.perf_counter() - began
    algo = result.algorithm
    sim = simulate(algo, topo, size, params)
    bound = lower_bound_us(topo, algo.collective, size)
    ring = ring_time(topo, collective, size, params)
    vs_nccl = nccl_reference(topo, algo.collective, size, params).gains(sim.time_us)[0]
    return {
        "sketch": sketch_name,
        "topology": topo.name,
        "collective": collective,
        "size": size,
        "seconds": seconds,
        "chunkup": result.chunkup,
        "sends": algo.num_sends,
        "time_us": sim.time_us,
        "model_us": result.makespan_us,
        "algbw": sim.algbw_GBps,
        "ring_algbw": algbw_GBps(size, ring),
        "ring_us": ring,
        "bound_algbw": algbw_GBps(size, bound),
        "of_bound": bound / sim.time_us,
        "vs_nccl_layout": vs_nccl,
        "model": sim.model,
    }


def targets(rows: list[dict]) -> list[list]:
    """The issue's targets, from the rows measured."""

    def find(sketch: str, collective: str, size: int) -> dict | None:
        return next(
            (
                r
                for r in rows
                if r["sketch"] == sketch and r["collective"] == collective and r["size"] == size
            ),
            None,
        )

    out = []
    for sketch, collective, floor, limit in (
        ("ndv2x2-relay", "allgather", 0.95, 60),
        ("dgx2x2-relay", "allgather", 0.95, 60),
        ("ndv2x2-relay", "alltoall", 0.95, 60),
        ("dgx-a100x8-direct", "allgather", 0.90, 300),
    ):
        r = find(sketch, collective, 1 << 30)
        if r is None:
            continue
        ok = r["of_bound"] >= floor and r["seconds"] < limit
        out.append(
            [
                f"{collective} {r['topology']} 1GiB >= {floor:.0%} of bound, < {limit} s",
                f"{100 * r['of_bound']:.2f}%",
                f"{r['seconds']:.1f}",
                "yes" if ok else "NO",
            ]
        )
    small = [r for r in rows if r["size"] <= 1 << 16]
    if small:
        worst = max(small, key=lambda r: r["time_us"] / r["ring_us"])
        ok = all(r["time_us"] <= r["ring_us"] for r in small)
        out.append(
            [
                "1KiB-64KiB never slower than textbook ring (all sketches)",
                f"worst {worst['time_us'] / worst['ring_us']:.2f}x ring time "
                f"({worst['collective']} {worst['topology']} {format_size(worst['size'])})",
                f"{max(r['seconds'] for r in small):.1f}",
                "yes" if ok else "NO",
            ]
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sketches", default=",".join(shipped_sketches()))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--solver", default=None, help="highs (default) or cbc")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per stage solve")
    parser.add_argument(
        "--model", choices=MODELS, default="calibrated", help="timing model to optimise and time in"
    )
    args = parser.parse_args()
    params = model_params(args.model)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows: list[dict] = []
    try:
        for sketch in args.sketches.split(","):
            for collective in args.collectives.split(","):
                for size in sizes:
                    progress(f"{sketch} {collective} {format_size(size)} ...")
                    rows.append(measure(sketch, collective, size, args.solver, args.time_limit, params))
                    r = rows[-1]
                    progress(f"  {r['seconds']:.1f} s, {100 * r['of_bound']:.1f}% of bound, k={r['chunkup']}")
    except KeyboardInterrupt:
        progress("interrupted: printing the rows finished so far")
    print_table(
        [
            "sketch",
            "collective",
            "size",
            "synth s",
            "chunkup",
            "sends",
            "algbw GB/s",
            "textbook ring GB/s",
            "bound GB/s",
            "of bound",
            "vs textbook ring",
            "vs NCCL layout",
        ],
        [
            [
                r["sketch"],
                r["collective"],
                format_size(r["size"]),
                f"{r['seconds']:.2f}",
                r["chunkup"],
                r["sends"],
                f"{r['algbw']:.2f}",
                f"{r['ring_algbw']:.2f}",
                f"{r['bound_algbw']:.2f}",
                f"{100 * r['of_bound']:.1f}%",
                f"{r['ring_us'] / r['time_us']:.2f}x",
                "-" if r["vs_nccl_layout"] is None else f"{r['vs_nccl_layout']:.2f}x",
            ]
            for r in rows
        ],
        title=f"MILP synthesis, solver {args.solver or 'highs'} (algbw modeled in synth.cost.simulate, "
        f"{params.label}; vs = their time / ours; bound at line rate)",
    )
    checks = targets(rows) if params.model == "ideal" else []
    if rows and not checks:
        progress("targets: issue 4's are TACCL's, at line rate: run with --model ideal to check them")
    if checks:
        print()
        print_table(["target", "measured", "synth s", "met"], checks, title="Targets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
