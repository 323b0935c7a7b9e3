"""Compiled SMT schedules and baselines: the IR simulator against the Algorithm model.

Run: ``.venv/bin/python benchmarks/compiled_smt.py``. For each algorithm (the DGX-1 allgather and
allreduce Pareto fronts, the least-steps DGX-1 alltoall and ring:8 allgather, a few baselines) it
compiles (``compile_algorithm``, azure dialect, automatic channels) and prints, at 1 MiB and 1 GiB,
the Algorithm model's time (``synth.cost.simulate``), the compiled IR's (``runtime.sim``, one call
per step, FIFO depth 2) and their ratio, with the IR's channels, threadblocks per rank and steps per
threadblock. Ctrl-C prints the rows finished so far.
"""

from __future__ import annotations

from codegen.compiler import compile_algorithm
from runtime.sim import simulate as simulate_ir
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.cost import simulate
from synth.smt import least_steps, pareto_front
from topologies import load
from xccl.cli.output import format_table, progress

SIZES = (1 << 20, 1 << 30)
BASELINES = [
    ("ring", "allgather", "dgx1", 1),
    ("ring", "allreduce", "dgx1", 8),
    ("bidir-ring", "allgather", "dgx1", 2),
    ("recursive-doubling", "allgather", "dgx1", 1),
    ("binomial-tree", "broadcast", "dgx1", 1),
    ("hierarchical", "allgather", "ndv2x2", 1),
    ("ring", "alltoall", "ring:8", 1),
]


def _cases():
    dgx1, ring8 = load("dgx1"), load("ring:8")
    for algo in pareto_front(dgx1, "allgather").algorithms:
        yield "smt front", algo, dgx1
    yield "smt least steps", least_steps(dgx1, make_collective("alltoall", 8, 1)).algorithm, dgx1
    for algo in pareto_front(dgx1, "allreduce").algorithms:
        yield "smt front", algo, dgx1
    yield "smt least steps", least_steps(ring8, make_collective("allgather", 8, 1)).algorithm, ring8
    for kind, coll, name, chunks in BASELINES:
        topo = load(name)
        root = 0 if coll == "broadcast" else None
        yield kind, make_baseline(kind, topo, make_collective(coll, topo.num_ranks, chunks, root)), topo


def main() -> None:
    rows = []
    try:
        for how, algo, topo in _cases():
            progress(f"[compiled] {algo.name}")
            ir = compile_algorithm(algo, topo)
            shape = (
                ir.nchannels,
                max(len(g.threadblocks) for g in ir.gpus),
                max(len(tb.ops) for g in ir.gpus for tb in g.threadblocks),
            )
            cells = []
            for size in SIZES:
                model = simulate(algo, topo, size).time_us
                compiled = simulate_ir(ir, topo, size).time_us
                cells += [f"{model:.1f}", f"{compiled:.1f}", f"{compiled / model:.2f}x"]
            rows.append([algo.name, how, *cells, *shape])
    except KeyboardInterrupt:
        progress("interrupted: the rows finished so far")
    headers = ["algorithm", "from", "model 1MiB us", "IR 1MiB us", "ratio", "model 1GiB us", "IR 1GiB us"]
    print(format_table([*headers, "ratio", "channels", "tbs/rank", "steps/tb"], rows))


if __name__ == "__main__":
    main()
