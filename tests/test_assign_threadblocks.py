"""assign_threadblocks: one send peer, one receive peer, one channel per threadblock."""

from __future__ import annotations

import pytest
from codegen_helpers import compile_and_run, stage_after

from codegen.dsl import ChunkProgram
from codegen.errors import DslError
from codegen.examples import allpairs_allreduce, hierarchical_allreduce, ring_allreduce
from codegen.ir import OpType


@pytest.mark.parametrize(
    "prog",
    [ring_allreduce.program(8), allpairs_allreduce.program(4), hierarchical_allreduce.program("dgx-a100x2")],
    ids=["ring", "allpairs", "hierarchical"],
)
def test_threadblocks_own_their_connections(prog):
    sched = stage_after(prog, "assign_threadblocks")
    sched.verify()  # peers fit, one threadblock per (channel, peer, direction), global order kept
    for tbs in sched.threadblocks:
        keys = [(t.channel, "send", t.send) for t in tbs if t.send is not None]
        keys += [(t.channel, "recv", t.recv) for t in tbs if t.recv is not None]
        assert len(keys) == len(set(keys))


def test_one_threadblock_per_rank_when_one_suffices():
    ir = compile_and_run(ring_allreduce.program(8))
    assert [len(g.threadblocks) for g in ir.gpus] == [1] * 8


def test_user_threadblocks_are_honoured():
    prog = ChunkProgram("tb", "fully-connected:3", "allgather", inplace=True)
    for r in range(3):
        for k, peer in enumerate(p for p in range(3) if p != r):
            senders_of_peer = [q for q in range(3) if q != peer]
            prog.chunk(r, "output", r).copy(peer, sendtb=k, recvtb=2 + senders_of_peer.index(r))
    ir = compile_and_run(prog)
    for gpu in ir.gpus:
        assert len(gpu.threadblocks) == 4
        assert all((tb.send is None) != (tb.recv is None) for tb in gpu.threadblocks)


def test_one_user_threadblock_cannot_send_to_two_peers():
    prog = ChunkProgram("tb", "fully-connected:3", "allgather", inplace=True)
    prog.chunk(0, "output", 0).copy(1, sendtb=0)
    prog.chunk(0, "output", 0).copy(2, sendtb=0)
    with pytest.raises(DslError, match="threadblock 0: a threadblock has one send peer"):
        stage_after(prog, "assign_threadblocks")


def test_a_rank_without_work_still_gets_a_threadblock():
    prog = ChunkProgram("bcast", "fully-connected:3", "broadcast", root=0)
    prog.chunk(0, "input", 0).copy(0, "output", 0)
    prog.chunk(0, "input", 0).copy(1, "output", 0)
    prog.chunk(0, "input", 0).copy(2, "output", 0)
    ir = compile_and_run(prog)
    assert all(gpu.threadblocks for gpu in ir.gpus)
    local = [op for op in ir.gpus[0].threadblocks[0].ops if op.type is OpType.COPY]
    assert len(local) <= 1
