"""Tree-packing synthesis at scale: dgx-h100xK (8K GPUs), allgather / reducescatter / allreduce.

Run: ``.venv/bin/python benchmarks/trees.py [--machines 2,8,16,64] [--family dgx-h100]
[--collectives allgather,reducescatter,allreduce] [--hierarchical] [--bound flow|packing]``.

Each case runs in a fresh process (so its peak memory is its own) and prints one row: the time
to load the topology (its all-pairs logical view included), the synthesis (symmetry, packing,
schedule, verification), the timing engine's run at the size, the peak resident memory, the
modeled time and its ratio to the lower bound. ``--bound flow`` is the min-cut flow LP of
``synth.bounds`` (time in its own column); ``--bound packing`` the packings' proven dual bound (the
best rate any packing over the topology's routes reaches; equal to the flow bound on every
instance the tests compare, cheaper at scale; not defined for ``--hierarchical``). Every algorithm
is verified before it is timed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from xccl.cli.output import print_table, progress

SIZE = float(1 << 30)


def one(topology: str, collective: str, hierarchical: bool, bound: str) -> dict:
    """Synthesize, verify and time one case in this process; the row's numbers."""
    from common.units import BYTES_PER_US_PER_GBPS
    from synth.bounds import lower_bound_us
    from synth.collectives import make_collective
    from synth.cost import simulate
    from synth.timing import model_params
    from synth.trees import synthesize
    from topologies import load

    began = time.perf_counter()
    topo = load(topology)
    topo.logical()
    loaded = time.perf_counter()
    result = synthesize(topo, collective, size_bytes=SIZE, hierarchical=hierarchical, log=progress)
    synthesized = time.perf_counter()
    modeled = simulate(result.algorithm, topo, SIZE, model_params("ideal")).time_us  # as the bound: line rate
    simulated = time.perf_counter()
    n = topo.num_ranks
    if bound == "flow":
        coll = make_collective(collective, n, n if collective == "allreduce" else 1)
        lower = lower_bound_us(topo, coll, SIZE)
    else:
        lower = sum(SIZE / n / (p.upper_GBps * BYTES_PER_US_PER_GBPS) for p in result.packings)
    bounded = time.perf_counter()
    return {
        "gpus": n,
        "collective": collective,
        "load_s": loaded - began,
        "synth_s": synthesized - loaded,
        "sim_s": simulated - synthesized,
        "bound_s": bounded - simulated,
        "peak_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "sends": result.algorithm.num_sends,
        "modeled_us": modeled,
        "bound_us": lower,
        "optimal": result.optimal,
    }


def _case(args: argparse.Namespace, topology: str, collective: str) -> list:
    command = [sys.executable, __file__, "--one", topology, collective, "--bound", args.bound]
    if args.hierarchical:
        command.append("--hierarchical")
    progress(f"[trees] {topology} {collective}")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.case_timeout)
    except subprocess.TimeoutExpired:
        return [topology, collective, f"over {args.case_timeout:g} s", *[""] * 7]
    if proc.returncode != 0:
        progress(proc.stderr[-2000:])
        return [topology, collective, f"failed ({proc.returncode})", *[""] * 7]
    r = json.loads(proc.stdout)
    return [
        r["gpus"], collective, f"{r['load_s']:.1f}", f"{r['synth_s']:.1f}", f"{r['sim_s']:.1f}",
        f"{r['bound_s']:.1f}", f"{r['peak_MB']:.0f}", r["sends"], f"{r['modeled_us']:.1f}",
        f"{100 * r['bound_us'] / r['modeled_us']:.1f}",
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default="2,8,16,64", help="K of FAMILYxK, comma-separated")
    parser.add_argument("--family", default="dgx-h100", help="machine family (dgx-h100, dgx-a100)")
    parser.add_argument("--collectives", default="allgather,reducescatter,allreduce")
    parser.add_argument("--hierarchical", action="store_true", help="compose inside / between machines")
    parser.add_argument("--bound", choices=("flow", "packing"), default="flow")
    parser.add_argument("--case-timeout", type=float, default=900.0, help="seconds per case (default 900)")
    parser.add_argument("--one", nargs=2, metavar=("TOPOLOGY", "COLLECTIVE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hierarchical and args.bound == "packing":
        parser.error(
            "--bound packing is not a lower bound for --hierarchical (the parts' bounds add up to "
            "more than the whole's): use --bound flow"
        )
    if args.one:
        print(json.dumps(one(*args.one, args.hierarchical, args.bound)))
        return
    rows = [
        _case(args, f"{args.family}x{k}", coll)
        for k in (int(x) for x in args.machines.split(","))
        for coll in args.collectives.split(",")
    ]
    headers = ["GPUs", "collective", "load s", "synth s", "sim s", "bound s", "peak MB", "sends"]
    headers += ["modeled us @1GiB (ideal, as the bound)", "% of bound"]
    how = "hierarchical" if args.hierarchical else "flat"
    print_table(headers, rows, title=f"synth trees ({how}), {args.family}xK, bound: {args.bound}")


if __name__ == "__main__":
    main()
