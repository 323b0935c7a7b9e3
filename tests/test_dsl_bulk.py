"""The DSL's bulk path (a lowered step's operations recorded in one call) records what the
per-call path records, refuses what it refuses with its message, and compiles to the same IR."""

from __future__ import annotations

import math
import random
import re

import pytest

from codegen.chunk_dag import DepKind, build_chunk_dag
from codegen.chunk_deps import plain_deps
from codegen.dsl import ChunkProgram
from codegen.errors import DslError
from codegen.lower import lower_algorithm
from synth.algorithm import Algorithm, Send, Step
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load

# (kind, src, a, b, time): a copy of src to a, or a reduce a := a (op) src, into b where given
_ALLREDUCE_OPS = [
    ("reduce", (1, "input", 0), (0, "input", 0), (0, "output", 0), (0.0, 1.0)),  # into the output
    ("reduce", (3, "input", 0), (0, "output", 0), None, (1.0, 2.0)),  # in place
    ("copy", (2, "input", 0), (1, "scratch", 0), None, (0.0, 1.0)),
    ("reduce", (1, "scratch", 0), (1, "input", 0), (1, "scratch", 1), (1.0, 1.0)),  # local, into scratch
    ("copy", (1, "scratch", 1), (0, "scratch", 3), None, (2, 3)),  # int times: the per-call path's
    ("reduce", (0, "scratch", 3), (0, "output", 0), None, None),
    ("copy", (0, "output", 0), (0, "output", 0), None, None),  # onto itself: nothing recorded
    ("copy", (0, "output", 0), (1, "output", 0), None, (3.0, 4.0)),
]


def _one_by_one(prog: ChunkProgram, ops: list) -> None:
    for kind, src, a, b, time in ops:
        if kind == "copy":
            prog.copy_slot(src, *a, time)
        else:
            prog.reduce_slot(src, a, b, time)


def _same(one: ChunkProgram, bulk: ChunkProgram) -> None:
    assert bulk.num_ops == one.num_ops
    assert bulk.chunk_dag() == one.chunk_dag()
    assert bulk._values == one._values and bulk.check() == one.check()


@pytest.mark.parametrize("inplace", [False, True])
def test_record_slots_records_what_copy_slot_and_reduce_slot_record(inplace):
    one, bulk = (ChunkProgram("ar", "ring:4", "allreduce", inplace=inplace) for _ in range(2))
    _one_by_one(one, _ALLREDUCE_OPS)
    bulk.record_slots(_ALLREDUCE_OPS)
    _same(one, bulk)
    assert one.num_ops == 7  # all but the copy onto itself


_WRONG = [
    (("copy", (0, "input", 0), (2, "scratch", 0), None, None), "has no link 0 -> 2"),
    (("reduce", (0, "input", 0), (2, "output", 0), None, None), "has no link 0 -> 2"),
    (("reduce", (1, "scratch", 5), (0, "output", 0), None, None), re.escape("reduce source rank 1 scratch[5]")),
    (("reduce", (1, "input", 0), (0, "scratch", 4), None, None), re.escape("destination rank 0 scratch[4]")),
    (("copy", (1, "scratch", 5), (0, "output", 0), None, None), re.escape("copy source rank 1 scratch[5]")),
    (("copy", (1, "input", 0), (0, "input", 0), None, None), "the input of an out-of-place call is read-only"),
    (("reduce", (1, "input", 0), (0, "input", 0), None, None), "the input of an out-of-place call is read-only"),
    (("reduce", (1, "input", 0), (0, "input", 0), (0, "output", 0), (2.0, 1.0)), re.escape("got (2.0, 1.0)")),
    (("copy", (1, "input", 0), (0, "output", 0), None, (0.0,)), re.escape("got (0.0,)")),
]


@pytest.mark.parametrize(("op", "message"), _WRONG)
def test_record_slots_refuses_what_the_per_call_path_refuses(op, message):
    one, bulk = (ChunkProgram("ar", "ring:4", "allreduce") for _ in range(2))
    first = ("copy", (1, "input", 0), (0, "scratch", 0), None, (0.0, 1.0))
    with pytest.raises(DslError, match=message):
        _one_by_one(one, [first, op])
    with pytest.raises(DslError, match=message):
        bulk.record_slots([first, op, first])
    _same(one, bulk)  # what came before the refused op is recorded, nothing after it


_COPIES = [  # ring:4 allgather: rank r's input holds chunk r; links to r +- 1
    ("copy", (0, "input", 0), (1, "scratch", 0), None, (0.0, 1.0)),
    ("copy", (1, "input", 0), (1, "output", 1), None, (0.0, 0.0)),  # a rank's own: no link needed
    ("copy", (2, "input", 0), (3, "relay", 2), None, None),  # a named slice, past its end
    ("copy", (3, "input", 0), (0, "output", 3), None, (0.5, 2.0)),
]
_LATER = [
    ("copy", (1, "scratch", 0), (2, "output", 0), None, (1.0, 2.0)),
    ("copy", (3, "relay", 2), (3, "output", 2), None, (2.0, 2.0)),
    ("copy", (0, "output", 3), (1, "scratch", 0), None, (2.0, 3.0)),  # overwrites what another reads
]


@pytest.mark.parametrize(
    "batches",
    [
        [_COPIES, _LATER],  # each batch reads only what the batches before wrote: recorded in bulk
        [_COPIES + _LATER],  # reads of what the batch writes: one by one
        [[*_COPIES, ("copy", (1, "output", 1), (1, "output", 1), None, None)]],  # onto itself: dropped
        [[*_COPIES[:1], ("copy", (0, "input", 0), (1, "scratch", 1), None, (2, 3))]],  # int times
        [[], _COPIES, [_COPIES[0], _COPIES[0]]],  # the same slot written twice
    ],
)
def test_batches_of_copies_record_what_copy_slot_records(batches):
    one, bulk = (ChunkProgram("ag", "ring:4", "allgather") for _ in range(2))
    for ops in batches:
        _one_by_one(one, ops)
        bulk.record_slots(ops)
    _same(one, bulk)
    assert bulk._ops == one._ops and bulk._slices == one._slices


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (("copy", (0, "input", 0), (2, "scratch", 0), None, None), "has no link 0 -> 2"),
        (("copy", (1, "scratch", 5), (0, "output", 0), None, None), re.escape("copy source rank 1 scratch[5]")),
        (("copy", (1, "input", 0), (0, "input", 0), None, None), "the input of an out-of-place call is read-only"),
        (("copy", (1, "input", 0), (0, "output", 1), None, (2.0, 1.0)), re.escape("got (2.0, 1.0)")),
    ],
)
def test_a_batch_of_copies_refuses_what_copy_slot_refuses(op, message):
    one, bulk = (ChunkProgram("ag", "ring:4", "allgather") for _ in range(2))
    with pytest.raises(DslError, match=message):
        _one_by_one(one, [*_COPIES, op])
    with pytest.raises(DslError, match=message):
        bulk.record_slots([*_COPIES, op, _COPIES[0]])
    _same(one, bulk)


@pytest.mark.parametrize(
    "times",
    [
        [None, None],
        [(0.0, 1.0), (1.0, 1.0), (0.5, math.inf)],
        [(0.0, 1.0), (2.0, 1.0)],
        [(-0.0, 0.0)],
        [(-1.0, 0.0)],
        [(0.0, 1.0), (math.nan, 1.0)],
        [(math.nan, 1.0), (0.0, 1.0)],
        [(0.0, math.nan)],
        [(0, 1)],
        [(0.0, 1.0), None],
        [(0.0,)],
        [[0.0, 1.0]],
        [(True, 1.0)],
    ],
)
def test_times_are_judged_in_bulk_as_one_by_one(times):
    from codegen.dsl_ops import _plain_time, _plain_times

    assert _plain_times(times) == all(map(_plain_time, times))


def _random_program(seed: int) -> ChunkProgram:
    """Copies and reduces of one chunk between random slots holding data (scratch, a named slice,
    the output; reduces in place and into another slot): every kind of slot conflict."""
    rng = random.Random(seed)
    prog = ChunkProgram("random", "fully-connected:3", "allreduce", chunks_per_rank=2)
    held = [(r, "input", j) for r in range(3) for j in range(2)]
    for _ in range(60):
        src, rank = rng.choice(held), rng.randrange(3)
        dst = (rank, rng.choice(["output", "scratch", "tmp"]), rng.randrange(3 if rank else 2))
        if rng.random() < 0.5:
            prog.copy_slot(src, *dst, (0.0, 1.0))
        else:
            mine = rng.choice([h for h in held if h[0] == rank])
            dst = prog.reduce_slot(src, mine, dst if mine[1] == "input" else rng.choice([None, dst]))
        held.append(dst)
    return prog


def _edges(deps) -> list:
    return [(d.pred, d.succ, d.pred_side, d.succ_side, d.kind) for d in deps]  # ChunkDep == ignores the kind


@pytest.mark.parametrize("seed", range(40))
def test_plain_deps_are_the_edges_build_chunk_dag_finds(seed):
    dag = _random_program(seed).chunk_dag()
    ids: dict = {}
    src, dst, operand = ([ids.setdefault(loc, len(ids)) for loc in column] for column in _sides(dag.ops))
    operand = [k if op.kind == "reduce" else -1 for op, k in zip(dag.ops, operand, strict=True)]
    expected = _edges(build_chunk_dag(dag.info, dag.ops).deps)
    assert _edges(plain_deps(src, dst, operand)) == _edges(dag.deps) == expected


def _sides(ops) -> tuple[list, list, list]:
    return [op.src for op in ops], [op.dst for op in ops], [op.local_operand for op in ops]


def test_a_lowered_exchange_and_ring_trace_as_build_chunk_dag_traces():
    topo = load("hypercube:2")
    steps, k = [], 1
    while k < 4:  # recursive doubling: each pair exchanges partial sums (one of each pair via scratch)
        steps.append(Step(1, tuple(Send(0, r, r ^ k, "reduce") for r in range(4))))
        k <<= 1
    butterfly = Algorithm(make_collective("allreduce", 4, 1), topo.name, tuple(steps))
    ring = make_baseline("ring", load("ring:4"), make_collective("allreduce", 4, 4))
    for algo in (butterfly, ring):
        dag = lower_algorithm(algo).chunk_dag()
        assert _edges(dag.deps) == _edges(build_chunk_dag(dag.info, dag.ops).deps)
        assert any(d.kind is DepKind.WAR for d in dag.deps)


def test_the_bulk_path_asks_the_topology_each_pair_once_and_still_refuses_a_missing_link():
    """A lowered step's pairs are mostly the step before's: each is asked of the topology once per
    program (a Python call each: 0.3 s of a 512-rank alltoall's lowering when asked per step)."""
    prog = ChunkProgram("ag", "ring:4", "allgather")
    links, asked = prog._links, []

    class Counting:
        def __contains__(self, pair: object) -> bool:
            asked.append(pair)
            return pair in links

    prog._links = Counting()
    prog.record_slots([("copy", (0, "input", 0), (1, "output", 0), None, None)])
    prog.record_slots(
        [
            ("copy", (1, "output", 0), (2, "output", 0), None, None),
            ("copy", (0, "input", 0), (1, "scratch", 0), None, None),
        ]
    )
    assert sorted(asked) == [(0, 1), (1, 2)]
    with pytest.raises(DslError, match="has no link 0 -> 2"):
        prog.record_slots([("copy", (0, "input", 0), (2, "scratch", 0), None, None)])
    assert prog.num_ops == 3
