"""Benchmark of the SMT synthesizer: front walks, least steps, single instances, and an ablation.

    .venv/bin/python benchmarks/smt.py              # everything (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/smt.py --quick      # the main cases only, no ablation
    .venv/bin/python benchmarks/smt.py --case dgx1-allgather-front --repeat 5

Each measurement runs in a fresh Python process (nothing cached between runs: automorphisms,
bounds, solvers) and times the library call only, not the imports; a case's time is the median of
``--repeat`` runs with z3 random seeds 0, 1, 2, ... (a run is deterministic for its seed, and SAT
search times are heavy-tailed across seeds, so one seed alone can flatter or slander an idea).
The ablation switches off one speed idea at a time (``SmtOptions.without``); its runs have a time
limit per instance, and a run that hits it counts as that limit ("timed out").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = {
    "dgx1-allgather-front": "Pareto front, DGX-1 allgather (SCCL: ~28 s on this machine)",
    "dgx1-reducescatter-front": "Pareto front, DGX-1 reducescatter (dual + inversion)",
    "dgx1-alltoall-front": "Pareto front, DGX-1 alltoall",
    "dgx1-allreduce-front": "Pareto front, DGX-1 allreduce (reducescatter + allgather fronts)",
    "dgx1-alltoall-least-steps": "least steps, DGX-1 alltoall, C=1, R=S",
    "dgx1-alltoall-8-8-3": "instance, DGX-1 alltoall S=8 R=8 C=3 (SCCL paper: 134 s)",
    "ring8-allgather-least-steps": "least steps, ring:8 allgather, C=1, R=S",
    "dgx1-allgather-3-7-6": "instance, DGX-1 allgather S=3 R=7 C=6 (bandwidth optimal)",
}
QUICK = ("dgx1-allgather-front", "dgx1-reducescatter-front", "dgx1-alltoall-least-steps",
         "dgx1-alltoall-8-8-3", "ring8-allgather-least-steps")  # fmt: skip
ABLATION = ("dgx1-allgather-front", "dgx1-allgather-3-7-6", "dgx1-alltoall-8-8-3")
IDEAS = ("prune", "cuts", "chunk_order", "symmetric", "restarts", "incremental")
"""A lone instance has no family to share (``solve_instance`` builds it to size), so its ablation
leaves out ``incremental``."""


def run_case(name: str, off: list[str], time_limit: float | None, seed: int) -> dict:
    """One measurement (in this process): the answer and the seconds of the library call."""
    from dataclasses import replace

    from synth.collectives import make_collective
    from synth.smt import SmtOptions, least_steps, pareto_front, solve_instance
    from topologies import load

    options = replace(SmtOptions().without(*off), seed=seed)
    start = time.perf_counter()
    if name.endswith("-front"):
        topo_name, coll = name.split("-")[:2]
        front = pareto_front(load(topo_name), coll, options=options, time_limit_s=time_limit)
        seconds = time.perf_counter() - start
        points = ", ".join(f"({a.num_steps},{a.rounds},{a.chunks})" for a in front.algorithms)
        answer = f"{{{points}}} {front.stop}, {len(front.outcomes)} instances"
        done = front.complete
    elif name.endswith("-least-steps"):
        topo_name, coll = name.split("-")[:2]
        topo = load(topo_name.replace("ring8", "ring:8"))
        result = least_steps(
            topo, make_collective(coll, topo.num_ranks, 1), options=options, time_limit_s=time_limit
        )
        seconds = time.perf_counter() - start
        answer = f"S={result.algorithm.num_steps}" if result.algorithm else result.message()
        done = result.algorithm is not None and result.proven
    else:
        topo_name, coll, s, r, c = name.split("-")
        topo = load(topo_name)
        out = solve_instance(
            topo, make_collective(coll, topo.num_ranks, int(c)), int(s), int(r), time_limit, options
        )
        seconds = time.perf_counter() - start
        answer = out.word
        done = out.status.answered
    return {"seconds": seconds, "answer": answer, "done": done}


def measure(name: str, off: list[str], repeat: int, time_limit: float | None) -> dict:
    runs, answers, timed_out = [], set(), False
    for seed in range(repeat):
        cmd = [sys.executable, __file__, "--worker", name, "--off", ",".join(off), "--seed", str(seed)]
        if time_limit:
            cmd += ["--time-limit", str(time_limit)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(result["seconds"])
        answers.add(result["answer"])
        if not result["done"]:
            timed_out = True
            break  # the median is at least the limit; do not spend it again
    return {
        "runs": runs,
        "median": statistics.median(runs),
        "answers": sorted(answers),
        "timed_out": timed_out,
    }


def table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=list(CASES), help="run only these cases")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="main cases, no ablation")
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument(
        "--ablation-limit", type=float, default=60.0, help="seconds per instance in the ablation"
    )
    parser.add_argument(
        "--ablation-repeat", type=int, default=5, help="seeds per ablation row (tails show here)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--off", default="", help=argparse.SUPPRESS)
    parser.add_argument("--time-limit", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        off = [x for x in args.off.split(",") if x]
        print(json.dumps(run_case(args.worker, off, args.time_limit, args.seed)))
        return 0

    names = args.case or (list(QUICK) if args.quick else list(CASES))
    rows = []
    for name in names:
        print(f"... {name}", file=sys.stderr, flush=True)
        m = measure(name, [], args.repeat, None)
        runs = " ".join(f"{x:.2f}" for x in m["runs"])
        rows.append([name, CASES[name], " / ".join(m["answers"]), f"{m['median']:.2f}", runs])
    print(
        f"SMT synthesis, median of {args.repeat} seeds, each in a fresh process (seconds of the library call)\n"
    )
    print(table(rows, ["case", "what", "answer", "median s", "runs s"]))

    if args.quick or args.no_ablation:
        return 0
    rows = []
    for name in [n for n in ABLATION if n in names]:
        base = None
        ideas = IDEAS if name.endswith("-front") else tuple(i for i in IDEAS if i != "incremental")
        for idea in ("", *ideas):
            print(f"... {name} without {idea or 'nothing'}", file=sys.stderr, flush=True)
            m = measure(name, [idea] if idea else [], args.ablation_repeat, args.ablation_limit)
            median = f">= {args.ablation_limit:.0f} (timed out)" if m["timed_out"] else f"{m['median']:.2f}"
            if not idea:
                base = m["median"]
            ratio = "" if not idea or m["timed_out"] else f"{m['median'] / base:.1f}x"
            worst = f"{max(m['runs']):.2f}"
            label = f"without {idea}" if idea else "all ideas"
            rows.append([name, label, median, ratio, worst, " / ".join(m["answers"])])
    print(
        f"\nAblation: one idea off at a time, median and worst of {args.ablation_repeat} seeds, "
        f"{args.ablation_limit:.0f} s limit per instance\n"
    )
    print(table(rows, ["case", "options", "median s", "vs all ideas", "worst s", "answer"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
