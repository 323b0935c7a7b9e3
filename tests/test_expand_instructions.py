"""expand_instructions: chunk ops into matched s/r/rrc and local cpy/re instructions."""

from __future__ import annotations

from codegen.chunk_dag import DepKind
from codegen.dsl import ChunkProgram
from codegen.examples import allpairs_allreduce
from codegen.ir import OpType
from codegen.passes.expand_instructions import expand_instructions


def _program() -> ChunkProgram:
    prog = ChunkProgram("mix", "fully-connected:2", "allreduce", chunks_per_rank=2)
    prog.chunk(0, "input", 0).copy(1, "scratch", 0)  # remote copy: s + r
    prog.chunk(1, "input", 0).reduce(prog.chunk(1, "scratch", 0), dst=prog.chunk(1, "output", 0))  # cpy + re
    prog.chunk(1, "output", 0).copy(0, "output", 0)  # remote copy
    prog.chunk(0, "input", 1).reduce(prog.chunk(1, "input", 1), dst=prog.chunk(0, "output", 1))  # s + rrc
    prog.chunk(0, "output", 1).copy(1, "output", 1)
    return prog


def test_each_chunk_op_becomes_its_instructions():
    dag = expand_instructions(_program().chunk_dag())
    dag.verify()
    types = sorted(i.type.value for i in dag.instrs)
    assert types == sorted(["s", "r", "cpy", "re", "s", "r", "s", "rrc", "s", "r"])
    rrc = next(i for i in dag.instrs if i.type is OpType.RECV_REDUCE_COPY)
    assert (rrc.rank, str(rrc.src), str(rrc.dst), rrc.recv_from) == (0, "i[1]", "o[1]", 1)
    for i, ins in enumerate(dag.instrs):
        if ins.send_match is not None:
            recv = dag.instrs[ins.send_match]
            assert recv.recv_match == i and recv.rank == ins.send_to and recv.count == ins.count


def test_slot_dependencies_join_the_instructions_that_touch_the_slot():
    dag = expand_instructions(_program().chunk_dag())
    kinds = {(dag.instrs[e.pred].type.value, dag.instrs[e.succ].type.value, e.kind) for e in dag.edges}
    assert ("r", "re", DepKind.RAW) in kinds  # the received scratch is reduced
    assert ("cpy", "re", DepKind.RAW) in kinds  # 3-operand local reduce: copy, then reduce
    assert ("re", "s", DepKind.RAW) in kinds  # the result is sent
    assert all(
        (e.kind is DepKind.MATCH) == (dag.instrs[e.pred].rank != dag.instrs[e.succ].rank) for e in dag.edges
    )


def test_sizes_of_a_larger_program():
    chunk_dag = allpairs_allreduce.program(4).chunk_dag()
    dag = expand_instructions(chunk_dag)
    remote = sum(op.remote for op in chunk_dag.ops)
    assert len(dag.instrs) == len(chunk_dag.ops) + remote
    assert sum(e.kind is DepKind.MATCH for e in dag.edges) == remote


def test_times_hints_and_shared_locations():
    """A send runs at its op's start, a receive and a local op at its end; the hints go to the
    sending and the receiving side; equal locations are one Ref (frozen, so shared)."""
    prog = ChunkProgram("timed", "fully-connected:2", "allreduce", chunks_per_rank=2)
    prog.chunk(0, "input", 0).copy(1, "scratch", 0, sendtb=2, recvtb=3, channel=1, time=(1.0, 2.0))
    mine = prog.chunk(1, "input", 0)
    mine.reduce(prog.chunk(1, "scratch", 0), dst=prog.chunk(1, "output", 0), sendtb=4, time=(2.0, 3.0))
    prog.chunk(1, "output", 0).reduce(prog.chunk(0, "input", 1), recvtb=5, time=(0.5, 4.0))
    dag = expand_instructions(prog.chunk_dag())
    dag.verify()
    got = [
        (i.type.value, i.rank, i.time, i.tb_hint, i.channel_hint, i.send_to, i.recv_from) for i in dag.instrs
    ]
    assert got == [
        ("s", 0, 1.0, 2, 1, 1, None),
        ("r", 1, 2.0, 3, 1, None, 0),
        ("cpy", 1, 3.0, 4, None, None, None),
        ("re", 1, 3.0, 4, None, None, None),
        ("s", 0, 0.5, None, None, 1, None),
        ("rrc", 1, 4.0, 5, None, None, 0),
    ]
    assert [(i.send_match, i.recv_match) for i in dag.instrs] == [
        (1, None),
        (None, 0),
        (None, None),
        (None, None),
        (5, None),
        (None, 4),
    ]
    assert dag.instrs[2].dst is dag.instrs[3].dst  # the operand copied into o[0], reduced there
    assert str(dag.instrs[2].src) == "i[0]" and str(dag.instrs[2].dst) == "o[0]"
    assert dag.instrs[1].dst is dag.instrs[3].src  # the scratch slot received, then reduced
    assert dag.instrs[5].src is dag.instrs[5].dst is dag.instrs[3].dst  # rrc in place: o[0]
