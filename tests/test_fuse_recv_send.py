"""fuse_recv_send: r+s -> rcs, rrc+s -> rrcs or rrs, when they fit one threadblock."""

from __future__ import annotations

from codegen_helpers import compile_and_run, stage_after

from codegen.dsl import ChunkProgram
from codegen.examples import ring_allreduce
from codegen.ir import OpType
from codegen.lower import lower_algorithm
from codegen.passes.fuse_recv_send import fuse_recv_send
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load


def test_ring_allreduce_fuses_every_forward():
    prog = ring_allreduce.program(4)
    before = stage_after(prog, "aggregate_chunks")
    after = fuse_recv_send(before)
    after.verify()
    counts = {t: sum(i.type is t for i in after.instrs) for t in OpType}
    assert counts[OpType.RECV_REDUCE_SEND] == 4 * 2
    assert counts[OpType.RECV_REDUCE_COPY_SEND] == 4
    assert counts[OpType.RECV_COPY_SEND] == 4 * 2
    assert len(after.instrs) == len(before.instrs) - sum(counts[t] for t in OpType if t.sends and t.receives)
    compile_and_run(prog)


def test_a_result_read_again_is_kept():
    """rrs drops the local write: only when nothing reads the result later."""
    prog = ChunkProgram("keep", "fully-connected:3", "allreduce", inplace=True)
    a = prog.chunk(1, "input", 0).reduce(prog.chunk(0, "input", 0))
    a.copy(2, "scratch", 0)  # forwarded...
    a.copy(1, "scratch", 0)  # ...and read again on rank 1
    prog.chunk(2, "input", 0).reduce(prog.chunk(2, "scratch", 0))
    prog.chunk(2, "input", 0).copy(0, "input", 0)
    prog.chunk(2, "input", 0).copy(1, "input", 0)
    after = fuse_recv_send(stage_after(prog, "aggregate_chunks"))
    fused = [i for i in after.instrs if i.type.sends and i.type.receives]
    assert [i.type for i in fused] == [OpType.RECV_REDUCE_COPY_SEND]
    compile_and_run(prog)


def test_scratch_results_forwarded_once_are_not_written():
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("reducescatter", 4))
    after = fuse_recv_send(stage_after(lower_algorithm(algo, topo), "aggregate_chunks"))
    assert any(i.type is OpType.RECV_REDUCE_SEND for i in after.instrs)
    assert compile_and_run(lower_algorithm(algo, topo)).gpus[0].scratch_chunks == 0


def test_fused_pairs_that_would_need_two_threadblocks_per_peer_are_not_fused():
    """The ring allreduce baseline reduces one way and gathers the other: fusing the turn would
    need (send 1, recv 1) beside (send 3, recv 1) on rank 0, i.e. a channel per chunk."""
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("allreduce", 4, 4))
    after = fuse_recv_send(stage_after(lower_algorithm(algo, topo), "aggregate_chunks"))
    pairs: dict = {}
    for i in after.instrs:
        if i.send_to is not None and i.recv_from is not None:
            pairs.setdefault((i.rank, "send", i.send_to), set()).add(i.recv_from)
            pairs.setdefault((i.rank, "recv", i.recv_from), set()).add(i.send_to)
    assert pairs and all(len(v) == 1 for v in pairs.values())
    assert compile_and_run(lower_algorithm(algo, topo)).nchannels == 1


def test_different_hints_are_not_fused():
    prog = ChunkProgram("hints", "ring:3", "allgather", inplace=True)
    for r in range(3):
        c = prog.chunk(r, "output", r)
        c = c.copy((r + 1) % 3, recvtb=0)
        c.copy((r + 2) % 3, sendtb=1)
    after = fuse_recv_send(stage_after(prog, "aggregate_chunks"))
    assert not any(i.type.sends and i.type.receives for i in after.instrs)
    compile_and_run(prog)
