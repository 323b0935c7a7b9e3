"""Whether a layout's IR deadlocks is known from its placed threadblocks (issue 17, wave 16).

At 512 ranks the hierarchical alltoall's default layout stops widening at 65 steps per threadblock,
past azure's; its IR was built (3-4 s) only to ask ``find_deadlock`` whether its order is kept or
the order within the FIFO bound tried instead. ``placed_deadlock_free`` answers from the placement,
so such a layout is never built.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import cache

import pytest
from codegen_helpers import counted_builds

import codegen.compiler as compiler
import xccl
from codegen.check import check_ir, find_deadlock
from codegen.compiler import compile_algorithm
from codegen.dsl import ChunkProgram, chunk
from codegen.examples import hierarchical_allreduce, ring_allreduce, two_step_alltoall
from codegen.lower import lower_algorithm
from codegen.passes import DEFAULT_PIPELINE
from codegen.pipeline import CompileOptions, run_pipeline
from codegen.placed_ir import placed_deadlock_free
from codegen.rules import get_dialect
from runtime.numpy import run
from topologies import load

_PLACED = DEFAULT_PIPELINE.index("assign_threadblocks") + 1


@cache
def _hierarchical_alltoall():
    return xccl.synthesize("dgx-h100x2", "alltoall", method="hierarchical")


def _exchange(chunks: int) -> ChunkProgram:
    """Two ranks swap ``chunks`` chunks each, all ready at once."""
    with ChunkProgram("exchange", "line:2", "alltoall", chunks_per_rank=chunks) as prog:
        for src, dst in ((0, 0), (1, 1), (0, 1), (1, 0)):
            for i in range(chunks):
                chunk(src, "input", dst * chunks + i).copy(dst, "output", src * chunks + i)
    return prog


def _programs():
    yield "ring", ring_allreduce.program(6).chunk_dag(), {}
    yield "hierarchical", hierarchical_allreduce.program("dgx-a100x2").chunk_dag(), {}
    yield "two-step", two_step_alltoall.program("dgx-a100x2").chunk_dag(), {}
    yield "exchange", _exchange(4).chunk_dag(), {"max_count": 1}
    yield "timed alltoall", lower_algorithm(_hierarchical_alltoall(), load("dgx-h100x2")).chunk_dag(), {}


@pytest.mark.parametrize("name, dag, fixed", list(_programs()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_placement_tells_whether_its_ir_deadlocks(name, dag, fixed):
    found = Counter()
    for bounded in (False, True):
        for compact in range(4):
            for channels in (1, 2):
                options = CompileOptions(bounded_fifos=bounded, compact=compact, channels=channels, **fixed)
                sched = run_pipeline(dag, DEFAULT_PIPELINE[:_PLACED], options).result
                ir = run_pipeline(sched, DEFAULT_PIPELINE[_PLACED:], options).result
                free = find_deadlock(ir) is None
                assert placed_deadlock_free(sched) == free, (bounded, compact, channels)
                found[free] += 1
    if name != "ring":  # the plain order of the others deadlocks with Simple's FIFOs somewhere
        assert found[False] > 0
    assert found[True] > 0


def test_a_layout_past_the_runtimes_steps_is_not_built_to_ask_whether_it_deadlocks(monkeypatch):
    # azure with 4 steps per threadblock: the default layout stops widening past them; its IR was
    # built only for find_deadlock (2 IRs, 2 checks), now judged by its placement
    algo, topo = _hierarchical_alltoall(), load("dgx-h100x2")
    tight = replace(get_dialect("azure"), max_steps=4)
    counts = counted_builds(monkeypatch)
    judge = placed_deadlock_free

    def placed(sched):
        counts["placements judged"] += 1
        return judge(sched)

    monkeypatch.setattr(compiler, "placed_deadlock_free", placed, raising=False)
    ir = compile_algorithm(algo, topo, dialect=tight)
    assert counts == {"IRs": 1, "deadlock checks": 1, "placements judged": 1}
    check_ir(ir, tight)
    assert max(len(tb.ops) for g in ir.gpus for tb in g.threadblocks) <= 4
    assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked


@pytest.mark.parametrize("program", [hierarchical_allreduce.program, two_step_alltoall.program])
def test_a_compile_checked_beside_asks_the_placement_and_keeps_the_same_ir(program, monkeypatch):
    # xccl compile checks the IR it keeps in a child (check_beside): whether that IR deadlocks is
    # then asked of its placement, in the parent; the order, the layout and the IR stay the same
    from codegen.check import settle
    from codegen.compiler import run_compiler

    prog = program("dgx-a100x2")
    plain = run_compiler(prog).result
    judged = []
    monkeypatch.setattr(compiler, "placed_deadlock_free", lambda s: judged.append(s) or placed_deadlock_free(s))
    beside = run_compiler(prog, check_beside=True).result
    settle(beside)
    assert beside == plain and judged
