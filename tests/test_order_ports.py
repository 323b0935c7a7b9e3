"""order_ports: a timed schedule's sends take each port in the schedule's order, only when asked,
and the compiled IR still passes the checker and computes its collective."""

from __future__ import annotations

import itertools

import pytest

from codegen.chunk_dag import DepKind
from codegen.compiler import compile_algorithm
from codegen.lower import lower_algorithm
from codegen.passes.expand_instructions import expand_instructions
from codegen.passes.order_by_critical_path import order_by_critical_path
from codegen.passes.order_ports import order_ports
from runtime.numpy import run
from sketches import Sketch
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.milp import synthesize
from topologies import load


@pytest.fixture(scope="module")
def timed():
    """A MILP allgather on ring:4 (every send timed), its topology."""
    ring4 = load("ring:4")
    return synthesize(ring4, "allgather", Sketch("ring"), size_bytes=1 << 20).algorithm, ring4


def _ordered_dag(algo, topo, port_order):
    dag = order_by_critical_path(expand_instructions(lower_algorithm(algo, topo).chunk_dag()))
    return dag, order_ports(dag, port_order=port_order)


def test_sends_through_one_port_are_chained_in_the_global_order(timed):
    algo, topo = timed
    dag, ordered = _ordered_dag(algo, topo, True)
    port = {(a, b): p for a, b, p, _ in dag.info.ports}
    chained = [e for e in ordered.edges if e.kind is DepKind.ORDER]
    sends = [i for i in dag.order if dag.instrs[i].send_to is not None]
    by_port: dict[tuple, list[int]] = {}
    for i in sends:
        by_port.setdefault(
            (dag.instrs[i].rank, port[(dag.instrs[i].rank, dag.instrs[i].send_to)]), []
        ).append(i)
    expected = {(a, b) for chain in by_port.values() for a, b in itertools.pairwise(chain)}
    assert expected and {(e.pred, e.succ) for e in chained} == expected
    assert ordered.order == dag.order  # the edges point forward: the order stays the witness


def test_nothing_changes_unless_asked_or_untimed(timed):
    algo, topo = timed
    dag, same = _ordered_dag(algo, topo, False)
    assert same is dag
    ring = make_baseline("ring", topo, make_collective("allgather", 4))
    dag, same = _ordered_dag(ring, topo, True)
    assert dag.times is None and same is dag


def test_the_port_ordered_ir_is_checked_and_correct(timed):
    algo, topo = timed
    ir = compile_algorithm(algo, topo, port_order=True)  # compile_algorithm checks it for azure
    assert run(ir, ir.nchunksperloop * 4 * 3, "int32").checked
