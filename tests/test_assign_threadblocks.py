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


def _lowered(where: str, collective: str, method: str):
    """A synthesized schedule on ``where``, through the passes before ``assign_threadblocks``'s
    channels, with its channel DAG at one channel."""
    from codegen.lower import lower_algorithm
    from codegen.passes import DEFAULT_PIPELINE
    from codegen.pipeline import run_pipeline
    from synth.baselines import make_baseline
    from synth.collectives import make_collective
    from topologies import load
    from xccl.api import synthesize

    topo = load(where)
    if method == "trees":
        algo = synthesize(topo, collective, "trees")
    else:
        algo = make_baseline(method, topo, make_collective(collective, topo.num_ranks))
    upto = DEFAULT_PIPELINE[: DEFAULT_PIPELINE.index("assign_channels")]
    return run_pipeline(lower_algorithm(algo, topo).chunk_dag(), upto).result


@pytest.mark.parametrize(
    ("where", "collective", "method"),
    [
        ("dgx1", "allgather", "trees"),
        ("dgx-h100x2", "allreduce", "trees"),
        ("switch:6", "alltoall", "direct"),
    ],
)
def test_threadblocks_placed_in_bulk_are_those_placed_one_instruction_at_a_time(
    where, collective, method, monkeypatch
):
    # sends and receives join their group's first one's threadblock; the first ones and the local
    # ops are placed one by one: every layout, at one channel and more, timed (trees) or not (direct)
    import importlib

    from codegen.passes.assign_channels import assign_channels

    at = importlib.import_module("codegen.passes.assign_threadblocks")  # the module, not the pass
    dag = _lowered(where, collective, method)
    assert not at._kinds(dag)[0]  # no pinned peers: the bulk placement applies
    for channels in (1, 3):
        for compact in range(4):
            cdag = assign_channels(dag, channels=channels, compact=min(compact, 1))
            in_bulk = at.assign_threadblocks(cdag, compact)
            with monkeypatch.context() as m:
                m.setattr(at, "_place_in_bulk", at._place_each)
                one_by_one = at.assign_threadblocks(cdag, compact)
            assert in_bulk.threadblocks == one_by_one.threadblocks, (channels, compact)
