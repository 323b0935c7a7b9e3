"""The loader folds ops as MSCCL's parser does, and every step type has its data semantics."""

from __future__ import annotations

import pytest

from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock
from codegen.rules import MAX_REDUCE_FUSION
from runtime.errors import ExecutionError
from runtime.numpy import HANDLERS
from runtime.program import build_program

IN, OUT, SCR = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def test_dispatch_table_covers_every_op_type():
    assert set(HANDLERS) == set(OpType)
    assert all(callable(h) and h.__name__.startswith("_") for h in HANDLERS.values())


def _one_tb(ops: list[Op], extra: tuple[Threadblock, ...] = ()) -> IR:
    tb = Threadblock(0, None, None, 0, tuple(ops))
    return IR("t", "allreduce", 1, 2, (Gpu(0, 2, 2, 20, (tb, *extra)),))


def _txs(ops: list[Op], extra=()):
    return build_program(_one_tb(ops, extra)).tb(0, 0).transmissions


def test_nops_hand_their_dependencies_to_the_next_step():
    other = Threadblock(1, None, None, 0, tuple(Op(OpType.NOP, has_dep=True) for _ in range(3)))
    ops = [
        Op(OpType.NOP, deps=(Dep(1, 0),)),
        Op(OpType.NOP, deps=(Dep(1, 1),)),
        Op(OpType.COPY, Ref(IN, 0), Ref(OUT, 0), deps=(Dep(1, 2),), has_dep=True),
        Op(OpType.NOP, deps=(Dep(1, 2),)),  # trailing: the runtime never waits for it
    ]
    (tx,) = _txs(ops, (other,))
    assert tx.type is OpType.COPY and tx.ops == (2,) and tx.step == 2
    assert tx.deps == (Dep(1, 0), Dep(1, 1), Dep(1, 2))


def test_consecutive_reduces_chain_like_the_runtime():
    re = [Op(OpType.REDUCE, Ref(SCR, i), Ref(OUT, 0)) for i in range(4)]
    txs = _txs([re[0], re[1], Op(OpType.NOP), re[2], re[3]])
    assert len(txs) == 1 and txs[0].ops == (0, 1, 3, 4) and txs[0].step == 4
    assert [r.index for r in txs[0].srcs] == [0, 1, 2, 3]
    # a chain ends at has_dep, at a dependency of its own, at another destination or source buffer
    cut = [
        re[0],
        Op(OpType.REDUCE, Ref(SCR, 1), Ref(OUT, 0), has_dep=True),
        re[2],
        Op(OpType.REDUCE, Ref(SCR, 3), Ref(OUT, 0), deps=(Dep(0, 0),)),
        Op(OpType.REDUCE, Ref(IN, 0), Ref(OUT, 0)),
        Op(OpType.REDUCE, Ref(IN, 1), Ref(OUT, 1)),
    ]
    assert [tx.ops for tx in _txs(cut)] == [(0, 1), (2,), (3,), (4,), (5,)]
    long = [Op(OpType.REDUCE, Ref(SCR, i), Ref(OUT, 0)) for i in range(MAX_REDUCE_FUSION + 2)]
    assert [len(tx.ops) for tx in _txs(long)] == [MAX_REDUCE_FUSION, 2]


def test_a_chain_moves_the_count_of_its_last_step():
    ops = [
        Op(OpType.REDUCE, Ref(SCR, 0), Ref(OUT, 0), count=1),
        Op(OpType.REDUCE, Ref(SCR, 2), Ref(OUT, 0), count=2),
    ]
    (tx,) = _txs(ops)
    assert tx.count == 2


@pytest.mark.parametrize(
    ("gpus", "fragment"),
    [
        ((), "expected ranks 0..0"),
        ((Gpu(0, 2, 2, 0, ()),), "at least one threadblock"),
        ((Gpu(0, 2, 2, 0, (Threadblock(0, 0, None, 0, ()),)),), "send peer 0: expected another rank"),
        (
            (Gpu(0, 2, 2, 0, (Threadblock(0, None, None, 0, (Op(OpType.SEND, Ref(IN, 0)),)),)),),
            "no send peer",
        ),
    ],
)
def test_structural_errors(gpus, fragment):
    with pytest.raises(ExecutionError, match=fragment):
        build_program(IR("t", "allreduce", 1, 2, gpus))


def test_collective_and_chunking_must_agree():
    tb = Threadblock(0, None, None, 0, ())
    gpus = tuple(Gpu(r, 1, 4, 0, (tb,)) for r in range(4))
    with pytest.raises(ExecutionError, match="needs a multiple of 4"):
        build_program(IR("t", "allgather", 4, 6, gpus))
    with pytest.raises(ExecutionError, match="unknown collective"):
        build_program(IR("t", "allsorts", 4, 4, gpus))
