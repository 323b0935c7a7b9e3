"""assign_channels: flows on channels so every connection receives in send order."""

from __future__ import annotations

import pytest
from codegen_helpers import compile_and_run, stage_after

from codegen.chunk_dag import DepKind, ProgramInfo
from codegen.compiler import compile_program
from codegen.dsl import ChunkProgram
from codegen.errors import DslError
from codegen.examples import recursive_doubling_allgather, ring_allreduce, two_step_alltoall
from codegen.instr_dag import Instr, InstrDAG, InstrEdge
from codegen.ir import Buffer, OpType, Ref
from codegen.passes.assign_channels import assign_channels


def _info() -> ProgramInfo:
    return ProgramInfo("t", "alltoall", 2, None, 2, 2, (0, 0), 4)


def test_a_receive_order_the_sends_cannot_keep_gets_a_second_channel():
    """Rank 0 sends A then B to rank 1, but rank 1 must take B first: one FIFO cannot do it."""
    instrs = [
        Instr(0, OpType.SEND, src=Ref(Buffer.INPUT, 0), send_to=1, send_match=2),  # A
        Instr(0, OpType.SEND, src=Ref(Buffer.INPUT, 1), send_to=1, send_match=3),  # B
        Instr(1, OpType.RECV, dst=Ref(Buffer.OUTPUT, 0), recv_from=0, recv_match=0),
        Instr(1, OpType.RECV, dst=Ref(Buffer.OUTPUT, 1), recv_from=0, recv_match=1),
    ]
    edges = [
        InstrEdge(0, 2, DepKind.MATCH),
        InstrEdge(1, 3, DepKind.MATCH),
        InstrEdge(0, 1, DepKind.WAR),
        InstrEdge(3, 2, DepKind.WAW),
    ]
    dag = InstrDAG.build(_info(), instrs, edges, [0, 1, 2, 3])
    assert [dag.position[i] for i in range(4)] == [0, 1, 3, 2]
    cdag = assign_channels(dag)
    cdag.verify()
    assert cdag.channel[0] == cdag.channel[2] != cdag.channel[1] == cdag.channel[3]


def test_one_channel_when_the_order_allows_it():
    cdag = assign_channels(stage_after(ring_allreduce.program(8), "order_by_critical_path"))
    cdag.verify()
    assert set(cdag.channel) == {0}


def test_channels_spread_flows_round_robin():
    prog = ring_allreduce.program(4)
    cdag = assign_channels(stage_after(prog, "order_by_critical_path"), channels=2)
    cdag.verify()
    assert set(cdag.channel) == {0, 1}
    ir = compile_and_run(prog, channels=2)
    assert ir.nchannels == 2


def test_instances_get_their_own_channels():
    cdag = stage_after(two_step_alltoall.program("dgx-a100x2", instances=2), "assign_channels")
    per_instance = {}
    for i, ins in enumerate(cdag.dag.instrs):
        if cdag.channel[i] is not None:
            per_instance.setdefault(ins.instance, set()).add(cdag.channel[i])
    assert per_instance[0].isdisjoint(per_instance[1])


def test_user_channels_are_kept_and_must_agree_within_a_flow():
    prog = ChunkProgram("ch", "ring:3", "allgather", inplace=True)
    for r in range(3):
        prog.chunk(r, "output", r).copy((r + 1) % 3, channel=2).copy((r + 2) % 3, channel=2)
    ir = compile_and_run(prog)
    assert {tb.channel for g in ir.gpus for tb in g.threadblocks} == {2}
    # one user threadblock, two channels: impossible
    bad = ChunkProgram("ch", "ring:3", "allgather", inplace=True, chunks_per_rank=2)
    bad.chunk(0, "output", 0).copy(1, sendtb=0, channel=0)
    bad.chunk(0, "output", 1).copy(1, sendtb=0, channel=1)
    with pytest.raises(DslError, match="were given channels"):
        stage_after(bad, "assign_channels")


def test_an_exchange_longer_than_the_fifo_runs_both_ways_at_once():
    """Recursive doubling's last step exchanges 8 chunks (8 calls at large sizes, Simple's FIFO
    holds 2): each direction runs with its receive, so the sending and the receiving threadblock
    of a rank must be two."""
    ir = compile_program(recursive_doubling_allgather.program(8, chunks=2))
    for gpu in ir.gpus:
        peer = gpu.rank ^ 4
        (sender,) = [tb for tb in gpu.threadblocks if tb.send == peer]
        (receiver,) = [tb for tb in gpu.threadblocks if tb.recv == peer]
        assert [op.count for op in sender.ops if op.type.sends] == [8]
        assert sender.id != receiver.id


@pytest.mark.parametrize("where", ["dgx1", "dgx-h100x2"])
def test_a_compact_layout_at_one_channel_takes_the_default_ones_only_where_they_agree(where, monkeypatch):
    # at one channel both try the channels in one order, but a timed default layout first those not
    # busy while a flow runs: on DGX-1's doubled NVLinks it passes busy ones over, and the compact
    # layout's channels differ; on DGX H100 it passes none over, and the compact one reuses them
    import importlib

    from codegen.lower import lower_algorithm
    from codegen.passes import DEFAULT_PIPELINE
    from codegen.pipeline import run_pipeline
    from topologies import load
    from xccl.api import synthesize

    ac = importlib.import_module("codegen.passes.assign_channels")  # the module, not the pass
    topo = load(where)
    program = lower_algorithm(synthesize(topo, "allgather", "trees"), topo)
    upto = DEFAULT_PIPELINE[: DEFAULT_PIPELINE.index("assign_channels")]
    dag = run_pipeline(program.chunk_dag(), upto).result
    assert dag.info.model_timed and dag.times is not None
    monkeypatch.setattr(ac, "_SAME_DAG", ac.SameObjects())
    plain = assign_channels(dag, channels=1)
    compact = assign_channels(dag, channels=1, compact=1)
    monkeypatch.setattr(ac, "_SAME_DAG", ac.SameObjects())
    alone = assign_channels(dag, channels=1, compact=1)  # nothing remembered
    assert compact.channel == alone.channel
    reused = compact.channel is plain.channel  # the default layout's channels, as remembered
    assert reused == (plain.channel == alone.channel) == (where == "dgx-h100x2")


def test_a_compile_keeps_no_hold_on_its_instruction_dag():
    """The passes' memos of the last DAG hold it weakly: a 512-rank DAG is a million instructions,
    and the channels' memo, holding a ChannelDAG that refers to its DAG, kept it alive for good."""
    import gc
    import weakref

    from codegen.compiler import compile_program
    from codegen.instr_dag import InstrDAG

    made: list[weakref.ref] = []
    real = InstrDAG.__init__

    def seen(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(weakref.ref(self))

    InstrDAG.__init__ = seen
    try:
        ir = compile_program(two_step_alltoall.program("dgx-a100x2"))
    finally:
        InstrDAG.__init__ = real
    assert ir.num_ranks == 16 and made
    del ir
    gc.collect()
    assert [ref for ref in made if ref() is not None] == []
