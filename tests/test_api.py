"""The public API: every example in its docstrings runs, and each call does what it says."""

from __future__ import annotations

import doctest
import inspect

import pytest

import xccl
import xccl.api
from common.errors import XcclError
from synth.collectives import CollectiveError
from synth.errors import InfeasibleError, SolverTimeout
from topologies import TopologyError


def test_docstring_examples_run():
    result = doctest.testmod(xccl.api, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 10


@pytest.mark.parametrize("name", [n for n in xccl.__all__ if callable(getattr(xccl, n))])
def test_every_public_call_shows_an_example(name):
    assert ">>>" in inspect.getdoc(getattr(xccl, name)), name


def test_smt_finds_the_fewest_steps_and_milp_follows_a_sketch():
    smt = xccl.synthesize("dgx1", "allgather")
    assert smt.num_steps == 2  # the hop diameter of the hybrid cube mesh
    smt.verify(xccl.topology("dgx1"))
    milp = xccl.synthesize("ndv2x2", "allgather", "milp", sketch="ndv2x2-relay", size="1MiB")
    assert milp.provenance.method.startswith("milp")
    ndv2x2 = xccl.topology("ndv2x2")
    milp.verify(ndv2x2)
    ring = xccl.synthesize(ndv2x2, "allgather", "ring")
    from synth.cost import simulate

    size = 1 << 30
    assert simulate(milp, ndv2x2, size).time_us < simulate(ring, ndv2x2, size).time_us
    assert xccl.lower_bound(ndv2x2, "allgather", size) <= simulate(milp, ndv2x2, size).time_us


def test_least_steps_cut_short_by_its_time_limit_is_a_timeout_not_infeasible():
    with pytest.raises(SolverTimeout, match="within the time limit"):
        xccl.synthesize("ring:4", "allgather", time_limit_s=1e-9)


def test_an_smt_instance_with_chunks_and_rounds():
    algo = xccl.synthesize("dgx1", "allgather", steps=3, rounds=7, chunks=6)
    assert (algo.num_steps, algo.rounds, algo.chunks) == (3, 7, 6)


def test_pareto_front_of_dgx1_allgather_is_sccls():
    front = xccl.pareto("dgx1", "allgather")
    assert {(a.num_steps, a.rounds, a.chunks) for a in front.algorithms} == {(2, 3, 2), (3, 7, 6)}


def test_compile_export_run_and_bench_a_synthesized_allreduce(tmp_path):
    algo = xccl.synthesize("ring:4", "allreduce", "ring")
    ir = xccl.compile(algo, inplace=True)
    path = xccl.export(ir, tmp_path / "ar.xml", "msccl")
    assert xccl.run(ir, "64KiB", backend="numpy", dtype="float64", op="max").checked
    report = xccl.bench(ir, "1KiB:4KiB", backend="sim", topology="ring:4")
    assert len(report.rows) == 3
    with pytest.raises(XcclError, match="exists"):
        xccl.export(ir, path, "msccl")
    assert xccl.export(ir, path, "msccl", force=True) == path


def test_errors_are_xccl_errors_with_one_line():
    cases = [
        lambda: xccl.topology("no-such-machine"),
        lambda: xccl.synthesize("ring:4", "allgather", "telepathy"),
        lambda: xccl.synthesize("ring:4", "allgather", "milp"),
        lambda: xccl.synthesize("ring:4", "gossip"),
        lambda: xccl.collective("allgather", 0),
        lambda: xccl.lower_bound("ring:4", "allgather", "-1KiB"),
    ]
    for case in cases:
        with pytest.raises(XcclError) as info:
            case()
        assert "\n" not in str(info.value)


def test_an_impossible_instance_and_a_time_limit_are_told_apart():
    with pytest.raises(InfeasibleError, match="unsat"):
        xccl.synthesize("dgx1", "allgather", steps=1)
    with pytest.raises(SolverTimeout, match="S=8 R=8 C=3 timed out"):  # sat, given 1-2 s
        xccl.synthesize("dgx1", "alltoall", steps=8, rounds=8, chunks=3, time_limit_s=0.01)


def test_run_and_bench_accept_an_exported_file(tmp_path):
    ir = xccl.compile(xccl.synthesize("ring:4", "allreduce", "ring"), inplace=True)
    path = xccl.export(ir, tmp_path / "ar.xml")
    assert xccl.run(path, "64KiB", backend="numpy").checked
    report = xccl.bench(str(path), "4KiB", backend="numpy", repeats=1)
    assert [row.check for row in report.rows] == ["ok"]


def test_a_dict_topology_is_validated_like_a_file():
    bad = {"name": "bad", "ranks": 2, "links": [{"src": 0, "dst": 2, "bandwidth_GBps": 25, "alpha_us": 0}]}
    with pytest.raises(TopologyError, match=r"<topology bad>: links\[0\]\.dst"):
        xccl.topology(bad)


def test_simulate_names_the_missing_topology_of_a_custom_machine():
    pair = {"name": "pair", "ranks": 2, "links": [{"src": 0, "dst": 1, "bandwidth_GBps": 25, "alpha_us": 1}]}
    topo = xccl.topology(pair)
    algo = xccl.synthesize(topo, "allgather", "ring")
    assert xccl.simulate(algo, topo, "25MB", model="ideal").time_us == pytest.approx(1 + 12.5e6 / 25e3)
    with pytest.raises(TopologyError, match="'pair' is not shipped; pass topology="):
        xccl.simulate(algo)


def test_milp_takes_chunkup_not_chunks():
    with pytest.raises(CollectiveError, match="pass chunkup="):
        xccl.synthesize("ndv2x2", "allgather", "milp", sketch="ndv2x2-relay", chunks=2)
    with pytest.raises(CollectiveError, match="chunkup: expected an integer >= 1"):
        xccl.synthesize("ndv2x2", "allgather", "milp", sketch="ndv2x2-relay", chunkup=0)
    algo = xccl.synthesize("ndv2x2", "allgather", "milp", sketch="ndv2x2-relay", size="1MiB", chunkup=2)
    assert algo.chunks == 2


def test_every_call_takes_a_topology_dict():
    pair = {"name": "pair", "ranks": 2, "links": [{"src": 0, "dst": 1, "bandwidth_GBps": 25, "alpha_us": 1}]}
    algo = xccl.synthesize(pair, "allgather")
    assert algo.num_steps == 1
    assert xccl.lower_bound(pair, "allgather", "25MB") <= xccl.simulate(algo, pair, "25MB").time_us


@pytest.mark.parametrize(
    ("source", "shown"),
    [(42, "int 42"), ("ring.json", "str 'ring.json'"), (None, "NoneType None"), ([1], "list [1]")],
)
def test_compile_refuses_what_it_cannot_compile(source, shown):
    with pytest.raises(XcclError) as info:
        xccl.compile(source)
    assert str(info.value) == f"compile: source: expected an Algorithm or a DSL Program, got {shown}"


def test_compile_refuses_a_wrong_inplace_and_dialect():
    ring = xccl.synthesize("ring:4", "allgather", "ring")
    with pytest.raises(XcclError, match=r"compile: inplace: expected True or False, got str 'yes'"):
        xccl.compile(ring, inplace="yes")
    with pytest.raises(XcclError, match=r"unknown dialect \['azure'\]: expected one of msccl, azure"):
        xccl.compile(ring, dialect=["azure"])
