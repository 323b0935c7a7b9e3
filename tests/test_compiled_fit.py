"""Compiled schedules fit the runtime's threadblock limits where a layout exists (issue 17).

The default layout spreads every connection over every channel and, in a timed program, gives
sends and receives threadblocks of their own; where that exceeds the runtime (threadblocks per
rank, ids of those waited on, steps per threadblock) the compiler falls back on compact layouts
(``codegen.compiler.run_compiler``): each connection on its share of the channels, then each
send peer paired with a receive peer in one threadblock. Where none fits, one error names the
limit and what the last layout tried needs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import xccl
from codegen.check import check_ir
from codegen.compiler import compile_algorithm
from codegen.errors import CodegenError
from codegen.lower import lower_algorithm
from codegen.passes import DEFAULT_PIPELINE
from codegen.pipeline import CompileOptions, run_pipeline
from codegen.rules import get_dialect, layout_problems
from runtime.numpy import run
from synth.milp import Options, synthesize
from synth.timing import IDEAL
from topologies import load


@pytest.fixture(scope="module")
def trees_allgather():
    """Two DGX H100: each rank sends to 15 peers and receives from 15, in one channel."""
    topo = load("dgx-h100x2")
    return xccl.synthesize("dgx-h100x2", "allgather", method="trees"), topo


def test_sends_and_receives_share_threadblocks_where_the_runtime_allows_fewer(trees_allgather):
    algo, topo = trees_allgather
    tight = replace(get_dialect("azure"), max_threadblocks=16)
    default = compile_algorithm(algo, topo)  # a threadblock per peer and direction: 30 per rank
    assert layout_problems(default, tight)
    ir = compile_algorithm(algo, topo, dialect=tight)
    assert max(len(g.threadblocks) for g in ir.gpus) <= 16
    check_ir(ir, tight)
    assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked


def test_paired_layout_keeps_one_threadblock_per_connection_where_a_rank_has_more_peers_one_way():
    topo = load("dgx1")  # the trees reducescatter: on channel 1 rank 0 sends to 3 peers, receives from 4
    prog = lower_algorithm(xccl.synthesize("dgx1", "reducescatter", method="trees"), topo)
    ir = run_pipeline(prog.chunk_dag(), DEFAULT_PIPELINE, CompileOptions(compact=2)).result
    check_ir(ir)  # among the rules: one threadblock per (channel, peer) and direction
    for g in ir.gpus:
        for ch in {tb.channel for tb in g.threadblocks}:
            tbs = [tb for tb in g.threadblocks if tb.channel == ch]
            sends, recvs = ({getattr(tb, side) for tb in tbs} - {None} for side in ("send", "recv"))
            assert len(tbs) == max(len(sends), len(recvs)), (g.rank, ch)
    assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked


def test_where_no_layout_fits_the_error_names_the_limit_and_the_need(trees_allgather):
    algo, topo = trees_allgather
    tiny = replace(get_dialect("azure"), max_threadblocks=4)
    with pytest.raises(CodegenError, match=r"no threadblock layout fits .* allows 4 threadblocks") as err:
        compile_algorithm(algo, topo, dialect=tiny)
    assert "the last layout tried (sends and receives paired) takes up to 15 threadblocks per rank" in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sketch",
    [
        "ndv2x2-relay",  # was: "no channel below 32 can carry the flow of instruction ... in order"
        "ndv2x4-relay",  # was: "threadblock 129: other threadblocks wait for it, but its id exceeds 127"
    ],
)
def test_milp_reducescatter_compiles_for_azure(sketch):
    topo = load(sketch.removesuffix("-relay"))
    algo = synthesize(topo, "reducescatter", sketch, 1 << 30, options=Options(params=IDEAL)).algorithm
    ir = compile_algorithm(algo, topo)
    check_ir(ir, "azure")
    assert run(ir, ir.nchunksperloop * 4, "int32").checked
