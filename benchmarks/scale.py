"""Scale: bounds, baselines and the XML tooling on 16 to 4096 GPUs of dgx-h100xK and dgx-a100xK.

Run: ``.venv/bin/python benchmarks/scale.py`` (``--help`` for the sizes, collectives and the
per-case time limit). Each case runs in a child process with a wall-clock limit (default 120 s)
and prints, per stage, its wall time and the child's peak memory: the lower bound (``xccl bound``:
steps, latency and bandwidth bounds, and how the bandwidth bound was found), synthesis (the ring
baseline for allgather, reducescatter and allreduce, the direct one for alltoall: what this
branch has at every size; MILP is not run here), the Algorithm's modeled time at 1 GiB as a
percentage of the lower bound, then compile, write XML, load it back, check it and simulate it.
A stage that runs past the limit ends its row (``>LIMIT`` and the stages after it blank).
Progress goes to stderr; Ctrl-C stops the running case and prints the rows that finished.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xccl.cli.output import format_table, progress

GPUS = (16, 64, 128, 512, 4096)
MACHINES = ("dgx-h100", "dgx-a100")
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
SIZE = 1 << 30
STAGES = ("topology", "bound", "synth", "model", "compile", "write", "load", "check", "simulate")
BASELINE = {"allgather": "ring", "reducescatter": "ring", "allreduce": "ring", "alltoall": "direct"}


def _report(stage: str, start: float, **extra) -> None:
    """One JSON line per finished stage: its seconds and the peak memory so far (MiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps({"stage": stage, "s": time.perf_counter() - start, "peak_MiB": peak, **extra}), flush=True
    )


def run_case(topology: str, collective: str) -> None:
    """The child: every stage of one case, reported as it finishes."""
    from codegen.check import find_problems
    from codegen.compiler import run_compiler
    from codegen.formats import read_ir, write_ir
    from codegen.lower import lower_algorithm
    from runtime.sim import simulate as simulate_ir
    from synth.baselines import make_baseline
    from synth.bounds import bandwidth_bound_method, lower_bound_us
    from synth.collectives import make_collective
    from synth.cost import simulate
    from topologies import load

    t = time.perf_counter()
    topo = load(topology)
    n = topo.num_ranks
    _report("topology", t)
    t = time.perf_counter()
    lazy = make_collective(collective, n, lazy=True)
    bound = lower_bound_us(topo, lazy, SIZE)
    _report("bound", t, bound_us=bound, how=bandwidth_bound_method(topo, lazy))
    t = time.perf_counter()
    kind = BASELINE[collective]
    algo = make_baseline(kind, topo, make_collective(collective, n, n if collective == "allreduce" else 1))
    _report("synth", t, method=f"baseline {kind}", sends=algo.num_sends)
    t = time.perf_counter()
    modeled = simulate(algo, topo, SIZE).time_us
    _report("model", t, modeled_us=modeled)
    t = time.perf_counter()
    ir = run_compiler(lower_algorithm(algo, topo), dialect="azure").result
    _report("compile", t)
    t = time.perf_counter()
    text = write_ir(ir, "azure")
    _report("write", t, xml_MB=len(text) / 1e6)
    t = time.perf_counter()
    ir = read_ir(text, "<scale>")
    _report("load", t)
    t = time.perf_counter()
    problems = find_problems(ir, "azure")
    _report("check", t, problems=len(problems))
    t = time.perf_counter()
    ir_us = simulate_ir(ir, topo, SIZE).time_us
    _report("simulate", t, ir_us=ir_us)


def _child(topology: str, collective: str, limit_s: float) -> tuple[dict, str | None]:
    """Run one case in a child; its stage reports, and the stage it was stopped in (or None)."""
    cmd = [sys.executable, __file__, "--case", topology, collective]
    done: dict = {}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        deadline = time.monotonic() + limit_s
        try:
            out, err = child.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        except KeyboardInterrupt:
            child.kill()
            raise
        for line in out.splitlines():
            report = json.loads(line)
            done[report.pop("stage")] = report
    stopped = next((s for s in STAGES if s not in done), None)
    if stopped is not None and time.monotonic() < deadline and child.returncode != 0:
        last = (err.strip().splitlines() or ["failed"])[-1]
        return done, f"{stopped}: {last[:60]}"
    return done, stopped and f"{stopped}: >{limit_s:g} s"


def _row(machine: str, gpus: int, collective: str, done: dict, stopped: str | None) -> list:
    def secs(stage: str) -> str:
        return f"{done[stage]['s']:.1f}" if stage in done else ""

    pct = ""
    if "model" in done and "bound" in done:
        pct = f"{100 * done['bound']['bound_us'] / done['model']['modeled_us']:.0f}%"
    peak = max((d["peak_MiB"] for d in done.values()), default=0)
    return [
        f"{machine}x{gpus // 8}",
        gpus,
        collective,
        secs("bound"),
        done.get("bound", {}).get("how", "")[:28],
        secs("synth"),
        done.get("synth", {}).get("sends", ""),
        pct,
        *(secs(s) for s in ("compile", "write", "load", "check", "simulate")),
        f"{peak:.0f}",
        stopped or "",
    ]


HEADERS = [
    "topology",
    "GPUs",
    "collective",
    "bound s",
    "bandwidth bound from",
    "synth s",
    "sends",
    "% of bound",
    "compile s",
    "write s",
    "load s",
    "check s",
    "sim s",
    "peak MiB",
    "stopped at",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=list(GPUS))
    parser.add_argument("--machines", nargs="+", default=list(MACHINES), choices=MACHINES)
    parser.add_argument("--collectives", nargs="+", default=list(COLLECTIVES), choices=COLLECTIVES)
    parser.add_argument(
        "--limit", type=float, default=120.0, help="wall-clock seconds per case (default 120)"
    )
    parser.add_argument("--case", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        run_case(*args.case)
        return
    rows = []
    cases = [(m, g, c) for g in args.gpus for m in args.machines for c in args.collectives]
    try:
        for i, (machine, gpus, coll) in enumerate(cases, 1):
            progress(f"[scale {i}/{len(cases)}] {coll} on {machine}x{gpus // 8} ({gpus} GPUs)")
            done, stopped = _child(f"{machine}x{gpus // 8}", coll, args.limit)
            rows.append(_row(machine, gpus, coll, done, stopped))
    except KeyboardInterrupt:
        progress(f"interrupted: {len(rows)} of {len(cases)} cases done")
    print(f"per-case limit {args.limit:g} s; 1 GiB; % of bound = lower bound / modeled time of the Algorithm")
    print(format_table(HEADERS, rows))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
