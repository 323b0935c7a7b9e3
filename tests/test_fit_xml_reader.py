"""fit_xml_reader: a timed program whose busiest rank has more steps than the runtimes' XML reader
holds (fewer than 4,096 elements per load) is merged over wider windows until it fits; programs
that fit, untimed ones and compiles for no XML runtime are left as they are.

The 64-rank case that needs it (the ``synth trees`` allreduce on 8 DGX A100: 4,430 elements on
rank 0) takes minutes to compile, so these tests lower the reader's limit on a small schedule
instead: the same rule, read by the compiler and the checker alike.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from codegen_helpers import stage_after

import codegen.compiler
import codegen.rules.xml_file
import xccl
from codegen.check import check_ir
from codegen.compiler import compile_algorithm, run_compiler
from codegen.errors import IRCheckError
from codegen.lower import lower_algorithm
from codegen.passes.aggregate_chunks import WINDOW, aggregate_chunks
from codegen.passes.fit_xml_reader import (
    GROWTH,
    ROOM,
    busiest_rank,
    fit_xml_reader,
    least_elements,
    renumber_scratch,
    step_budget,
)
from codegen.rules import MAX_NODES, xml_problems
from runtime.choice import compile_fastest, synthesized_size
from runtime.numpy import run
from runtime.sim import simulate as simulate_ir
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.cost import simulate
from synth.timing import DEFAULT, IDEAL
from topologies import load

TOPOLOGY = "dgx-a100x2"


@pytest.fixture(scope="module")
def allgather():
    """The trees allgather of two DGX A100 (16 ranks), as ``xccl synth trees`` makes it."""
    return xccl.synthesize(TOPOLOGY, "allgather", method="trees"), load(TOPOLOGY)


def _elements(ir) -> int:
    """The most XML elements one rank's load holds."""
    return max(1 + ir.num_ranks + len(g.threadblocks) + sum(len(tb.ops) for tb in g.threadblocks) for g in ir.gpus)


@pytest.fixture(scope="module")
def least(allgather) -> int:
    """What the allgather needs at least at the default window (its steps and a threadblock per
    peer), by fit_xml_reader's count."""
    algo, topo = allgather
    return least_elements(stage_after(lower_algorithm(algo, topo), "aggregate_chunks"))


@pytest.fixture
def small_reader(monkeypatch, least):
    """The reader's limit lowered to what the allgather needs at least at the default window: the
    compile is certain to break it."""
    limit = least
    for module in (codegen.rules.xml_file, codegen.compiler):
        monkeypatch.setattr(module, "MAX_NODES", limit, raising=False)
    return limit


@pytest.fixture
def nops_over_reader(monkeypatch, least):
    """The reader's limit one over what the allgather needs at least at the default window: its
    count says it may fit, but the compile's threadblocks and ``nop`` steps take rank 0 over (970
    elements where the count is 955): the 16-rank stand-in for the 128-rank DGX A100
    reducescatter (4,317 elements where the count was under 4,096)."""
    limit = least + 1
    for module in (codegen.rules.xml_file, codegen.compiler):
        monkeypatch.setattr(module, "MAX_NODES", limit, raising=False)
    return limit


def _moved(dag) -> dict:
    """Chunks moved per (sender, receiver)."""
    out: dict = {}
    for ins in dag.instrs:
        if ins.type.sends:
            out[(ins.rank, ins.send_to)] = out.get((ins.rank, ins.send_to), 0) + ins.count
    return out


def test_a_rank_over_the_reader_is_merged_until_it_fits(allgather):
    algo, topo = allgather
    dag = stage_after(lower_algorithm(algo, topo), "aggregate_chunks")
    steps = busiest_rank(dag)[1]
    limit = 1 + 16 + steps // 2
    fitted = fit_xml_reader(dag, max_nodes=limit)
    fitted.verify()
    assert busiest_rank(fitted)[1] <= step_budget(16, limit) < steps
    assert _moved(fitted) == _moved(dag)  # the same chunks between the same ranks, in fewer ops
    assert len(fitted.instrs) < len(dag.instrs)


def test_programs_that_fit_untimed_ones_and_no_reader_are_left_alone(allgather):
    algo, topo = allgather
    dag = stage_after(lower_algorithm(algo, topo), "aggregate_chunks")
    assert fit_xml_reader(dag, max_nodes=MAX_NODES) is dag
    assert fit_xml_reader(dag, max_nodes=least_elements(dag) + 1) is dag  # may fit: compiled as before
    assert fit_xml_reader(dag, max_nodes=None) is dag
    ring = make_baseline("ring", topo, make_collective("allgather", 16))
    untimed = stage_after(lower_algorithm(ring, topo), "aggregate_chunks")
    assert untimed.times is None and fit_xml_reader(untimed, max_nodes=20) is untimed


def test_a_compile_over_the_reader_fits_checks_computes_and_keeps_its_speed(allgather, small_reader):
    algo, topo = allgather
    _fits_checks_computes_and_keeps_its_speed(compile_algorithm(algo, topo), algo, topo, small_reader)


def test_where_no_window_fits_the_refusal_says_how_many_steps_would(allgather, monkeypatch):
    algo, topo = allgather
    for module in (codegen.rules.xml_file, codegen.compiler):
        monkeypatch.setattr(module, "MAX_NODES", 40, raising=False)
    with pytest.raises(IRCheckError, match=r"fewer than 40, so at most \d+ steps fit with these threadblocks"):
        compile_algorithm(algo, topo)


def _fits_checks_computes_and_keeps_its_speed(ir, algo, topo, limit) -> None:
    assert _elements(ir) < limit and not xml_problems(ir)
    check_ir(ir, "azure")
    assert run(ir, ir.nchunksperloop * 4 * 3, "float32").checked
    size = synthesized_size(algo)
    for params in (DEFAULT, IDEAL):
        ratio = simulate_ir(ir, topo, size, params=params).time_us / simulate(algo, topo, size, params).time_us
        assert ratio <= 1.10, (params.label, ratio)


def test_a_compile_its_nops_take_over_the_reader_is_made_again_wider(allgather, nops_over_reader):
    algo, topo = allgather
    result = run_compiler(lower_algorithm(algo, topo))
    assert result.window is not None and result.window > WINDOW  # the window fit_xml_reader kept
    assert [r.name for r in result.records].count("fit_xml_reader") == 2  # refused once, then fitted
    _fits_checks_computes_and_keeps_its_speed(result.result, algo, topo, nops_over_reader)


def test_a_compile_that_fits_is_made_once_at_its_own_window(allgather):
    algo, topo = allgather
    result = run_compiler(lower_algorithm(algo, topo))
    assert result.window is None
    assert [r.name for r in result.records].count("fit_xml_reader") == 1


@pytest.mark.parametrize("reader", ["small_reader", "nops_over_reader"])
def test_xccl_compile_says_the_window_the_xml_was_merged_over(request, reader, allgather, tmp_path, xccl):
    request.getfixturevalue(reader)  # widened by the count, or in the compile made again
    algo, _ = allgather
    algo.save(tmp_path / "ag.json")
    proc = xccl("compile", str(tmp_path / "ag.json"), "-o", str(tmp_path / "ag.xml"))
    assert proc.returncode == 0, proc.stderr
    # the variant kept starts at the default window (which the line leaves unsaid); the XML's is wider
    said = re.search(r"compiled without port order, pieces starting within ([0-9.]+)% of the span merged:", proc.stderr)
    assert said and float(said[1]) > 100 * WINDOW, proc.stderr


@pytest.mark.parametrize("reader", ["small_reader", "nops_over_reader"])
def test_compile_fastest_says_the_window_the_ir_was_merged_over(request, reader, allgather):
    limit = request.getfixturevalue(reader)
    algo, topo = allgather
    ir, choice = compile_fastest(algo, topo)
    assert choice is not None and choice.variant.window > WINDOW  # as xccl compile says it
    assert f"pieces starting within {100 * choice.variant.window:.3g}% of the span merged" in choice.describe()
    assert _elements(ir) < limit


@pytest.fixture(scope="module")
def reducescatter():
    """The trees reducescatter of two DGX A100 (16 ranks): each rank's scratch slots numbered in
    order of arrival, so no window merges consecutive chunks into a rank's slots."""
    return xccl.synthesize(TOPOLOGY, "reducescatter", method="trees"), load(TOPOLOGY)


def test_renumbered_scratch_moves_the_same_chunks_in_mergeable_slots(reducescatter):
    algo, topo = reducescatter
    dag = stage_after(lower_algorithm(algo, topo), "aggregate_chunks")
    renumbered = renumber_scratch(dag)
    renumbered.verify()
    assert _moved(renumbered) == _moved(dag)
    assert least_elements(aggregate_chunks(renumbered, window=1.0)) < least_elements(aggregate_chunks(dag, window=1.0)) // 2


@pytest.mark.slow  # about 20 s idle: two ladders of windows, a compile, NumPy and four simulations
def test_where_no_window_fits_the_slots_renumbered_fit_and_keep_the_speed(reducescatter, monkeypatch):
    algo, topo = reducescatter
    dag = stage_after(lower_algorithm(algo, topo), "aggregate_chunks")
    limit = least_elements(aggregate_chunks(dag, window=1.0))  # the whole span, as numbered: refused
    for module in (codegen.rules.xml_file, codegen.compiler):
        monkeypatch.setattr(module, "MAX_NODES", limit, raising=False)
    _fits_checks_computes_and_keeps_its_speed(compile_algorithm(algo, topo), algo, topo, limit)


def _fitted_as_before(dag, max_nodes: int):
    """``fit_xml_reader`` with the DAG built at every window of its ladders (before each
    window's counts were read off its merges)."""

    def widened(dag, enough):
        widest, width = dag, WINDOW
        while width < 1.0:
            width = min(1.0, width * GROWTH)
            widest = aggregate_chunks(dag, window=width)
            if enough(widest):
                break
        return widest, width

    budget = step_budget(dag.info.num_ranks, max_nodes)
    widest, width = widened(dag, lambda d: busiest_rank(d)[1] <= budget)
    if least_elements(widest) >= max_nodes and renumber_scratch(dag) is not dag:
        widest, width = widened(renumber_scratch(dag), lambda d: least_elements(d) < max_nodes * (1 - ROOM))
    return replace(widest, info=replace(widest.info, merge_window=width))


@pytest.mark.parametrize("case", ["fits", "no window fits", "renumbered fits"])
def test_the_window_kept_is_the_one_a_dag_built_at_each_window_keeps(case, allgather, reducescatter):
    algo, topo = reducescatter if case == "renumbered fits" else allgather
    dag = stage_after(lower_algorithm(algo, topo), "aggregate_chunks")
    limits = {
        "fits": 1 + 16 + busiest_rank(dag)[1] // 2,
        "no window fits": 40,
        "renumbered fits": least_elements(aggregate_chunks(dag, window=1.0)),
    }
    fitted, before = fit_xml_reader(dag, max_nodes=limits[case]), _fitted_as_before(dag, limits[case])
    assert fitted.info.merge_window == before.info.merge_window < 1.0 or case == "no window fits"
    assert (fitted.info, fitted.instrs, fitted.edges, fitted.order) == (
        before.info,
        before.instrs,
        before.edges,
        before.order,
    )


def _counted(dag) -> tuple[int, tuple[int, int]]:
    """``least_elements`` and ``busiest_rank`` counted one instruction at a time."""
    steps: dict[int, int] = {}
    sends: dict[int, set] = {}
    recvs: dict[int, set] = {}
    for ins in dag.instrs:
        steps[ins.rank] = steps.get(ins.rank, 0) + 1
        if ins.send_to is not None:
            sends.setdefault(ins.rank, set()).add(ins.send_to)
        if ins.recv_from is not None:
            recvs.setdefault(ins.rank, set()).add(ins.recv_from)
    most = max((n + max(len(sends.get(r, ())), len(recvs.get(r, ()))) for r, n in steps.items()), default=0)
    busiest = max(steps.items(), key=lambda kv: (kv[1], -kv[0]), default=(0, 0))
    return 1 + dag.info.num_ranks + most, busiest


@pytest.mark.parametrize("collective", ["allgather", "alltoall", "reducescatter"])
def test_the_counts_on_arrays_are_the_counts_one_instruction_at_a_time(collective):
    topo = load("switch:8")
    kind = "direct" if collective == "alltoall" else "ring"
    algo = make_baseline(kind, topo, make_collective(collective, 8))
    dag = stage_after(lower_algorithm(algo, topo), "aggregate_chunks")
    assert (least_elements(dag), busiest_rank(dag)) == _counted(dag)
    lone = dag.instrs[:1] + tuple(i for i in dag.instrs if i.rank == 5)  # ranks without instructions
    sparse = type(dag)(dag.info, lone, (), tuple(range(len(lone))))
    assert (least_elements(sparse), busiest_rank(sparse)) == _counted(sparse)
