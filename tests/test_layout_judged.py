"""The compiler's driver judges a layout by its threadblocks once they are placed (issue 17 item 3).

Where the default layout passes the runtime's threadblocks (per rank, per channel, or ids of those
waited on: azure names 128), so does the other order and any wider width, so the driver goes on to
the compact layouts without building the layout's IR or asking whether its order deadlocks. At 512
ranks the `synth trees` allgather built the default layout whole (140 threadblocks, some waited on
past id 127) and checked it for deadlocks before judging it: a tail of the pipeline for nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import cache

import pytest

import codegen.compiler as compiler
import xccl
from codegen.check import check_ir
from codegen.compiler import compile_algorithm
from codegen.passes import PASSES
from codegen.rules import get_dialect, layout_problems
from runtime.numpy import run
from topologies import load


@pytest.fixture(scope="module")
def trees_allgather():
    """Two DGX H100: each rank sends to 15 peers and receives from 15, in one channel."""
    topo = load("dgx-h100x2")
    return _trees("dgx-h100x2", "allgather"), topo


@cache
def _trees(name: str, collective: str):
    return xccl.synthesize(name, collective, method="trees")


def _counted(monkeypatch) -> Counter:
    """Counts of whole IRs built (``insert_dependencies`` runs) and deadlock checks."""
    counts: Counter = Counter()
    build, check = PASSES["insert_dependencies"], compiler.find_deadlock

    def built(sched):
        counts["IRs"] += 1
        return build.run(sched)

    def checked(ir):
        counts["deadlock checks"] += 1
        return check(ir)

    monkeypatch.setitem(PASSES, "insert_dependencies", replace(build, run=built))
    monkeypatch.setattr(compiler, "find_deadlock", checked)
    return counts


@pytest.mark.parametrize(
    "limit",
    [{"max_threadblocks": 16}, {"max_dep_threadblock": 15}],
    ids=["threadblocks per rank", "ids waited on"],
)
def test_a_default_layout_over_the_runtimes_threadblocks_is_not_built(trees_allgather, monkeypatch, limit):
    algo, topo = trees_allgather
    tight = replace(get_dialect("azure"), **limit)
    assert layout_problems(compile_algorithm(algo, topo), tight, steps=False)  # 30 threadblocks per rank
    counts = _counted(monkeypatch)
    ir = compile_algorithm(algo, topo, dialect=tight)
    # before: 4 IRs (the default layout's, layout 2's at one channel, 89 steps, and at two, 23
    # threadblocks, layout 3's, kept) and 3 deadlock checks; now layout 2 at two channels and the
    # default layout are judged by their placed threadblocks
    assert counts == {"IRs": 2, "deadlock checks": 1}
    check_ir(ir, tight)
    assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked


@pytest.mark.parametrize("compact", [0, 1, 2, 3])
@pytest.mark.parametrize("where", ["dgx-h100x2 allgather", "dgx1 reducescatter"])
def test_the_threadblocks_waited_on_are_known_once_placed(where, compact):
    # the judge reads them off the plans; the IR's waits must name exactly those threadblocks
    from codegen.lower import lower_algorithm
    from codegen.passes import DEFAULT_PIPELINE
    from codegen.passes.insert_dependencies import awaited, insert_dependencies
    from codegen.pipeline import CompileOptions, run_pipeline

    name, collective = where.split()
    topo = load(name)
    prog = lower_algorithm(_trees(name, collective), topo)
    upto = DEFAULT_PIPELINE[: DEFAULT_PIPELINE.index("assign_threadblocks") + 1]
    sched = run_pipeline(prog.chunk_dag(), upto, CompileOptions(compact=compact)).result
    ir = insert_dependencies(sched)
    waited = [{dep.tb for tb in g.threadblocks for op in tb.ops for dep in op.deps} for g in ir.gpus]
    assert awaited(sched) == waited
    assert any(waited)
