"""codegen.slotted: the chunk DAG's and the instruction DAG's slotted frozen dataclasses made in
bulk are the objects their constructors make, and stay frozen; ``evolve``/``made`` copy them."""

from __future__ import annotations

import dataclasses
from itertools import repeat

import pytest

from codegen.chunk_dag import ChunkDep, ChunkOp, DepKind, Loc, Side
from codegen.instr_dag import Instr, InstrEdge, new_edge, new_edges
from codegen.ir import Buffer, OpType, Ref, evolve, made
from codegen.slotted import copies, made_all

SEND = Instr(3, OpType.SEND, src=Ref(Buffer.INPUT, 1), count=2, send_to=4, send_match=7, time=1.5)
LOC = Loc(1, Buffer.SCRATCH, 5)


@pytest.mark.parametrize(
    "obj",
    [
        SEND,
        InstrEdge(1, 2, DepKind.RAW),
        LOC,
        ChunkOp("reduce", LOC, Loc(1, Buffer.OUTPUT, 0), operand=LOC, channel=1, time=(0.0, 2.0)),
        ChunkDep(0, 3, Side.SRC, Side.DST, DepKind.WAR),
    ],
)
def test_made_in_bulk_is_what_the_constructor_makes_and_stays_frozen(obj):
    cls = type(obj)
    fields = [f.name for f in dataclasses.fields(cls)]
    built = made_all(cls, 3, {name: repeat(getattr(obj, name)) for name in fields})
    assert built == [obj] * 3 and all(type(b) is cls for b in built)
    assert not hasattr(built[0], "__dict__")  # slotted: a million at 512 ranks
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].__setattr__(fields[0], None)
    assert made(cls, {name: getattr(obj, name) for name in fields}) == obj


def test_made_all_needs_every_field():
    with pytest.raises(TypeError, match="made_all needs each of"):
        made_all(InstrEdge, 1, {"pred": [0], "succ": [1]})


def test_copies_and_evolve_are_replace():
    copied = copies([SEND, dataclasses.replace(SEND, rank=5)], send_match=[9, None], time=[2.0, 3.0])
    assert copied == [
        dataclasses.replace(SEND, send_match=9, time=2.0),
        dataclasses.replace(SEND, rank=5, send_match=None, time=3.0),
    ]
    assert evolve(SEND, tb_hint=2) == dataclasses.replace(SEND, tb_hint=2)
    assert SEND.tb_hint is None  # the original is untouched
    assert copies([]) == []
    with pytest.raises(TypeError, match="no field sent"):
        copies([SEND], sent=[1])


def test_new_edges():
    assert new_edge(2, 5, DepKind.WAW) == InstrEdge(2, 5, DepKind.WAW)
    made_edges = new_edges([0, 1], [1, 2], [DepKind.MATCH, DepKind.RAW], 2)
    assert [(e.pred, e.succ, e.kind) for e in made_edges] == [(0, 1, DepKind.MATCH), (1, 2, DepKind.RAW)]
