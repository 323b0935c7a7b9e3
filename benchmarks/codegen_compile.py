"""Compile time of the codegen pipeline on baselines and examples of growing size.

Run: ``.venv/bin/python benchmarks/codegen_compile.py``. Prints, per case, the ranks, the
instructions and threadblocks produced, and the milliseconds spent lowering, compiling in all
(``run_compiler``: the pipeline, once more with the bounded-FIFO order when the plain one would
deadlock, or with more channels for the step limit, and the static checks), in the passes of the
last pipeline run, in the static checker and writing XML (median of 3 runs).
"""

from __future__ import annotations

import statistics
import time

from codegen.check import find_problems
from codegen.compiler import run_compiler
from codegen.formats import write_ir
from codegen.loader import load_program
from codegen.lower import lower_algorithm
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load
from xccl.cli.output import format_table, progress

CASES = [
    ("baseline", "ring", "allgather", "dgx1"),
    ("baseline", "ring", "allreduce", "dgx2"),
    ("baseline", "ring", "alltoall", "dgx2"),
    ("baseline", "direct", "alltoall", "dgx2"),
    ("baseline", "hierarchical", "allreduce", "ndv2x2"),
    ("baseline", "ring", "allgather", "dgx-a100x8"),
    ("baseline", "direct", "alltoall", "dgx-a100x8"),
    ("example", "hierarchical_allreduce", {"topology": "dgx-a100x8"}, ""),
    ("example", "two_step_alltoall", {"topology": "dgx-a100x8"}, ""),
]


def _program(case):
    kind, name, what, topo_name = case
    if kind == "example":
        return f"{name} {what['topology']}", lambda: load_program(f"example:{name}", what)
    topo = load(topo_name)
    n = topo.num_ranks
    algo = make_baseline(name, topo, make_collective(what, n, n if what == "allreduce" else 1))
    return f"{name} {what} {topo_name}", lambda: lower_algorithm(algo, topo)


def main() -> None:
    rows = []
    for case in CASES:
        label, build = _program(case)
        progress(f"[codegen] {label}")
        times: dict[str, list[float]] = {"lower": [], "compile": [], "passes": [], "check": [], "xml": []}
        for _ in range(3):
            t0 = time.perf_counter()
            prog = build()
            t1 = time.perf_counter()
            result = run_compiler(prog, dialect="azure")  # spreads channels to the step limit
            passes = sum(r.seconds for r in result.records)
            ir = result.result
            t2 = time.perf_counter()
            problems = find_problems(ir, "azure")
            t3 = time.perf_counter()
            write_ir(ir, "azure")
            t4 = time.perf_counter()
            for key, value in zip(times, (t1 - t0, t2 - t1, passes, t3 - t2, t4 - t3), strict=True):
                times[key].append(1000 * value)
        steps = sum(len(tb.ops) for g in ir.gpus for tb in g.threadblocks)
        rows.append(
            [
                label,
                ir.num_ranks,
                steps,
                max(len(g.threadblocks) for g in ir.gpus),
                ir.nchannels,
                "ok" if not problems else f"{len(problems)} problems",
                *(f"{statistics.median(v):.0f}" for v in times.values()),
            ]
        )
    print(
        format_table(
            [
                "case",
                "ranks",
                "steps",
                "max tbs",
                "channels",
                "azure check",
                "lower ms",
                "compile ms",
                "passes ms",
                "check ms",
                "xml ms",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
