"""codegen.columns.instr_columns: an instruction DAG's fields as arrays, read once for every DAG
that holds the same instructions, and let go with the last of them."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest

import codegen.columns
from codegen.columns import TYPE_CODE, instr_columns, refs
from codegen.dsl import ChunkProgram
from codegen.passes.expand_instructions import expand_instructions


def _dag():
    prog = ChunkProgram("mix", "fully-connected:2", "allreduce", chunks_per_rank=2)
    prog.chunk(0, "input", 0).copy(1, "scratch", 0)  # s + r
    prog.chunk(1, "input", 0).reduce(prog.chunk(1, "scratch", 0), dst=prog.chunk(1, "output", 0))  # cpy + re
    prog.chunk(0, "input", 1).reduce(prog.chunk(1, "input", 1), dst=prog.chunk(0, "output", 1))  # s + rrc
    return expand_instructions(prog.chunk_dag())


def test_the_columns_are_the_instructions_fields():
    dag = _dag()
    c = instr_columns(dag)  # the int columns as expand_instructions gave them, the others read
    instrs = dag.instrs

    def minus_one(name):
        return [-1 if getattr(i, name) is None else getattr(i, name) for i in instrs]

    assert c.rank.tolist() == [i.rank for i in instrs]
    assert c.type.tolist() == [TYPE_CODE[i.type] for i in instrs]
    assert c.count.tolist() == [i.count for i in instrs] and c.instance.tolist() == [0] * len(instrs)
    for name in ("send_to", "recv_from", "send_match", "recv_match"):
        assert getattr(c, name).tolist() == minus_one(name), name
    assert -1 in c.send_to.tolist() and -1 in c.send_match.tolist()  # local ops have none
    for name in ("src", "dst"):
        expected = refs([getattr(i, name) for i in instrs])
        assert all((a == b).all() for a, b in zip(getattr(c, name), expected, strict=True)), name
    assert not c.tb_hint[0].any() and not c.channel_hint[0].any() and c.plain


def test_dags_holding_the_same_instructions_share_them_until_the_last_goes():
    dag = _dag()
    c = instr_columns(dag)
    reordered = replace(dag, order=tuple(reversed(dag.order)))  # what order_by_critical_path makes
    assert instr_columns(reordered) is c
    with pytest.raises(ValueError):
        c.rank[0] = 5  # shared: read-only
    other = _dag()  # equal instructions, another tuple: read again
    assert instr_columns(other) is not c
    key = id(dag.instrs)
    del dag
    gc.collect()
    assert codegen.columns._HELD[key].columns is c  # the reordered DAG still holds them
    del reordered, c
    gc.collect()
    assert key not in codegen.columns._HELD
