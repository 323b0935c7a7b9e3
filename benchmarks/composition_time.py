"""Time a composed allgather from its parts at scale: ``simulate_composition`` on dgx-h100xK.

The composition is built as the hierarchical trees synthesis builds it (the machine graph and one
machine packed by ``synth.trees``, then ``compose``), without the whole's verification; then
``simulate_composition`` times it at SIZE in a timing model, and (``--check``, small K only) the
engine's run of the whole Algorithm (``synth.cost.simulate``) times it too, to compare. Prints one
JSON document (wall seconds, peak RSS, which runs were made, the modeled time); progress to stderr.

    .venv/bin/python benchmarks/composition_time.py --machines 512 --size 1GiB --model ideal,calibrated
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from common.units import parse_size
from synth.collectives import make_collective
from synth.cost import simulate
from synth.reductions.base import Problem
from synth.reductions.hierarchy import HIERARCHY, compose, to_steps
from synth.reductions.hierarchy_time import simulate_composition
from synth.timing import model_params
from synth.trees.schedule import MAX_SENDS, chunk_choices
from synth.trees.synthesis import _allgather, _Run
from topologies.registry import load


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--machines", type=int, default=512)
    parser.add_argument("--family", default="dgx-h100")
    parser.add_argument("--size", default="1GiB")
    parser.add_argument("--model", default="ideal,calibrated", help="timing models, comma-separated")
    parser.add_argument("--check", action="store_true", help="also run the engine on the whole (small K)")
    args = parser.parse_args()
    size = float(parse_size(args.size))
    params = model_params(args.model.split(",")[0])  # the chunk counts are chosen in the first
    out: dict = {"topology": f"{args.family}x{args.machines}", "size_bytes": size}
    began = time.perf_counter()
    topo = load(out["topology"])
    n = topo.num_ranks
    reduced = HIERARCHY.apply(Problem(topo, make_collective("allgather", n, lazy=True)))
    machines = reduced.data
    between, within = reduced.subproblems
    run = _Run(time.perf_counter() + 600, _say, MAX_SENDS, True, "trees", params)
    first = _allgather(between, size / n, run, "between", list(chunk_choices(topo, run.most_sends))).algorithm
    held = machines.count * first.chunks
    choices = [c for c in range(1, held + 1) if held % c == 0]
    second = _allgather(within, size / n * machines.count, run, "within", choices).algorithm
    out["parts_s"] = round(time.perf_counter() - began, 1)
    _say("composing")
    mark = time.perf_counter()
    composition = compose(first, second, machines)
    out["compose_s"] = round(time.perf_counter() - mark, 1)
    out["sends"] = composition.num_sends
    for model in args.model.split(","):
        params = model_params(model)
        _say(f"timing {composition.num_sends:,} sends from the parts ({params.label})")
        mark = time.perf_counter()
        lines: list[str] = []
        result = simulate_composition(composition, topo, size, params, log=lines.append)
        out[model] = {
            "time_s": round(time.perf_counter() - mark, 1),
            "path": lines[0],
            "modeled_us": result.time_us,
        }
        out["peak_rss_MB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.check:
        from synth.algorithm import Algorithm

        _say("the engine on the whole")
        collective = make_collective("allgather", n, composition.chunks)
        algo = Algorithm(collective, topo.name, to_steps(composition, topo), None)
        for model in args.model.split(","):
            mark = time.perf_counter()
            whole = simulate(algo, topo, size, model_params(model)).time_us
            out[model] |= {"whole_us": whole, "whole_s": round(time.perf_counter() - mark, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
