"""The public API (``xccl.api``): its docstring examples, and the inputs a notebook user gives it."""

from __future__ import annotations

import doctest

import pytest

import xccl
import xccl.api
from synth.collectives import CollectiveError
from topologies import TopologyError


def test_docstring_examples_pass():
    result = doctest.testmod(xccl.api)
    assert result.attempted > 0 and result.failed == 0


def test_every_public_function_has_an_example():
    for name in xccl.api.__all__:
        obj = getattr(xccl.api, name)
        if callable(obj):
            assert ">>>" in (obj.__doc__ or ""), f"xccl.{name} has no example"


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
    assert xccl.simulate(algo, topo, "25MB").time_us == pytest.approx(1 + 12.5e6 / 25e3)
    with pytest.raises(TopologyError, match="'pair' is not shipped; pass topology="):
        xccl.simulate(algo)


def test_milp_takes_chunkup_not_chunks():
    with pytest.raises(CollectiveError, match="pass chunkup="):
        xccl.synthesize("ndv2x2", "allgather", "milp", sketch="ndv2x2-relay", chunks=2)
    with pytest.raises(CollectiveError, match="chunkup: expected an integer >= 1"):
        xccl.synthesize("ndv2x2", "allgather", "milp", sketch="ndv2x2-relay", chunkup=0)
    algo = xccl.synthesize("ndv2x2", "allgather", "milp", sketch="ndv2x2-relay", size="1MiB", chunkup=2)
    assert algo.chunks == 2
