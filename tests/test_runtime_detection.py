"""What the NumPy executor catches: wrong results, deadlocks, reads of memory nothing wrote, misused
connections. Each case is a small IR broken on purpose, and the report must name the culprit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import runtime_samples as samples
from ir_edit import edit_op

from codegen.compiler import compile_algorithm
from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock
from codegen.lower import lower_algorithm
from codegen.pipeline import CompileOptions, run_pipeline
from runtime.errors import DeadlockError, ExecutionError, ExecutionMismatch, UninitializedRead
from runtime.numpy import run
from runtime.reference import check_outputs, make_inputs, reference
from runtime.sim import simulate
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load
from topologies.builders import ring

IN, OUT, SCR = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def two_ranks(ops0: list[Op], ops1: list[Op], coll: str = "allgather", extra0=(), scratch=0) -> IR:
    """Two ranks, one threadblock each talking to the other on channel 0 (plus ``extra0`` on rank 0)."""
    gpus = (
        Gpu(0, 1, 2, scratch, (Threadblock(0, 1, 1, 0, tuple(ops0)), *extra0)),
        Gpu(1, 1, 2, scratch, (Threadblock(0, 0, 0, 0, tuple(ops1)),)),
    )
    return IR(f"broken-{coll}", coll, 2, 2, gpus)


# -- wrong results -------------------------------------------------------------------------------------
def test_swapped_destinations_are_reported_with_rank_buffer_chunk_and_index():
    ir = samples.ring_allgather(4)
    # rank 2 receives chunk 1 (op 2) and chunk 0 (op 3): write them to each other's slot
    bad = edit_op(edit_op(ir, 2, 0, 2, dst=Ref(OUT, 0)), 2, 0, 3, dst=Ref(OUT, 1))
    with pytest.raises(ExecutionMismatch) as info:
        run(bad, 4 * 16 * 4)
    err = info.value
    assert (err.rank, err.buffer, err.chunk, err.index) == (2, "output", 0, 0)
    assert "rank 2" in str(err) and "output[0]" in str(err)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_a_dropped_contribution_is_caught_in_every_dtype(dtype):
    """rank 1 forwards the partial sum of chunk 3 without adding its own input (rrs -> rcs)."""
    ir = samples.ring_allreduce(4)
    bad = edit_op(ir, 1, 0, 1, type=OpType.RECV_COPY_SEND, src=None, dst=Ref(OUT, 3))
    with pytest.raises(ExecutionMismatch) as info:
        run(bad, 4 * 32 * np.dtype(dtype).itemsize, dtype)
    assert info.value.chunk == 3


def test_first_differing_index_within_a_chunk():
    coll = make_collective("allgather", 3, 2)
    inputs = make_inputs(coll, 50, np.dtype(np.int64), "sum", seed=1)
    ref = reference(coll, inputs, 50, "sum")
    outputs = [np.concatenate(inputs) for _ in range(3)]
    check_outputs(ref, outputs, "hand")  # the right answer passes
    outputs[1][3 * 50 + 17] += 1
    outputs[1][3 * 50 + 30] += 1
    with pytest.raises(ExecutionMismatch) as info:
        check_outputs(ref, outputs, "hand")
    assert (info.value.rank, info.value.chunk, info.value.index) == (1, 3, 17)


def test_float_tolerance_is_tight_enough_to_see_one_ulp_of_input():
    coll = make_collective("allreduce", 4, 1)
    inputs = make_inputs(coll, 64, np.dtype(np.float32), "sum", seed=2)
    ref = reference(coll, inputs, 64, "sum")
    good = sum(x.astype(np.float64) for x in inputs).astype(np.float32)
    check_outputs(ref, [good] * 4, "hand")
    with pytest.raises(ExecutionMismatch):
        check_outputs(ref, [good, good, good - inputs[0], good], "hand")


# -- deadlocks -----------------------------------------------------------------------------------------
def test_both_ranks_receiving_first_deadlocks():
    recv_then_send = [Op(OpType.RECV, dst=Ref(OUT, 1)), Op(OpType.SEND, Ref(IN, 0))]
    ir = two_ranks(recv_then_send, [Op(OpType.RECV, dst=Ref(OUT, 0)), Op(OpType.SEND, Ref(IN, 0))])
    with pytest.raises(DeadlockError) as info:
        run(ir, 64)
    blocked = {(b.rank, b.tb, b.op): b.reason for b in info.value.blocked}
    assert set(blocked) == {(0, 0, 0), (1, 0, 0)}
    assert "waits for data from rank 1" in blocked[(0, 0, 0)]
    assert "waits for data from rank 0" in blocked[(1, 0, 0)]
    with pytest.raises(DeadlockError):  # the timing simulator sees it too
        simulate(ir, ring(2), 64)


def test_dependency_cycle_deadlocks():
    """Rank 0's sender waits for its receiver, which waits for the sender."""
    send = Threadblock(0, 1, None, 0, (Op(OpType.SEND, Ref(IN, 0), deps=(Dep(1, 0),), has_dep=True),))
    recv = Threadblock(1, None, 1, 0, (Op(OpType.RECV, dst=Ref(OUT, 1), deps=(Dep(0, 0),), has_dep=True),))
    peer = Threadblock(0, 0, 0, 0, (Op(OpType.SEND, Ref(IN, 0)), Op(OpType.RECV, dst=Ref(OUT, 0))))
    ir = IR("cycle", "allgather", 2, 2, (Gpu(0, 1, 2, 0, (send, recv)), Gpu(1, 1, 2, 0, (peer,))))
    with pytest.raises(DeadlockError) as info:
        run(ir, 64)
    reasons = {(b.rank, b.tb): b.reason for b in info.value.blocked}
    assert "waits for tb 1 op 0" in reasons[(0, 0)]
    assert "waits for tb 0 op 0" in reasons[(0, 1)]
    assert "waits for data from rank 0" in reasons[(1, 0)]
    with pytest.raises(DeadlockError) as timed:  # the timing simulator names the same waits
        simulate(ir, ring(2), 64)
    reasons = {(b.rank, b.tb): b.reason for b in timed.value.blocked}
    assert "waits for tb 1 op 0" in reasons[(0, 0)] and "waits for tb 0 op 0" in reasons[(0, 1)]
    assert "waits for data from rank 0 on channel 0" in reasons[(1, 0)]


def test_missing_has_dep_never_publishes():
    ir = samples.allpairs_allreduce(3)
    bad = edit_op(ir, 1, 0, 1, has_dep=False)  # the reducer waits for this receive
    with pytest.raises(DeadlockError) as info:
        run(bad, 3 * 4 * 8)
    (stuck,) = [b for b in info.value.blocked if b.rank == 1]
    assert stuck.tb == 2 and "tb 0 op 1" in stuck.reason and "never publishes" in stuck.reason
    with pytest.raises(DeadlockError, match="nothing in tb 0 from op 1 on has has_dep"):
        simulate(bad, ring(3), 3 * 4 * 8)


def test_a_schedule_that_needs_unbounded_fifos_deadlocks():
    """Every rank sends 3 calls (cnt=3, one chunk per call) before it receives: NCCL's Simple FIFO
    holds 2 calls, so this deadlocks; with deeper FIFOs, or chunks that share one call, it runs."""
    ir = samples.ring_allgather(4, chunks=3, aggregate=True)
    size = ir.nchunksperloop * 64 * 4  # 256-byte chunks
    with pytest.raises(DeadlockError) as info:
        run(ir, size, tile_bytes=256)
    assert all("waits for room to send" in b.reason for b in info.value.blocked)
    assert "2 of 2 calls queued" in info.value.blocked[0].reason
    assert run(ir, size, tile_bytes=256, fifo_depth=4).checked
    assert run(ir, size, tile_bytes=1024).checked  # 4 chunks per call: each step is one call


# -- memory nothing wrote --------------------------------------------------------------------------------
def test_read_of_unwritten_scratch():
    ir = samples.ring_allgather(4)
    gpus = list(ir.gpus)
    gpus[1] = dataclasses.replace(gpus[1], scratch_chunks=2)
    bad = edit_op(dataclasses.replace(ir, gpus=tuple(gpus)), 1, 0, 1, src=Ref(SCR, 1))  # its send
    with pytest.raises(UninitializedRead) as info:
        run(bad, 4 * 16 * 4)
    err = info.value
    assert (err.rank, err.tb, err.op, err.buffer, err.chunk, err.tile) == (1, 0, 1, "s", 1, 0)


def test_reduce_into_unwritten_output():
    """``re`` reads its destination: reducing into an output slot nothing wrote is caught."""
    ir = samples.allpairs_allreduce(3)
    # drop the copy of the input into the output (make it copy into scratch slot 0 instead)
    bad = edit_op(ir, 0, 2, 1, dst=Ref(SCR, 0), src=Ref(SCR, 1))
    with pytest.raises(UninitializedRead) as info:
        run(bad, 3 * 8 * 4)
    assert info.value.buffer == "o" and info.value.rank == 0


# -- misused connections and malformed IRs ---------------------------------------------------------------
def test_send_and_receive_counts_must_match():
    ops0 = [Op(OpType.SEND, Ref(IN, 0)), Op(OpType.RECV, dst=Ref(OUT, 1))]
    ops1 = [Op(OpType.SEND, Ref(IN, 0)), Op(OpType.RECV, dst=Ref(OUT, 0), count=2)]
    with pytest.raises(ExecutionError, match="send and receive counts differ"):
        run(two_ranks(ops0, ops1), 64)


def test_unreceived_sends_are_reported():
    ops0 = [Op(OpType.SEND, Ref(IN, 0)), Op(OpType.RECV, dst=Ref(OUT, 1))]
    ops1 = [Op(OpType.SEND, Ref(IN, 0)), Op(OpType.SEND, Ref(IN, 0)), Op(OpType.RECV, dst=Ref(OUT, 0))]
    with pytest.raises(ExecutionError, match="never received"):
        run(two_ranks(ops0, ops1), 64, check=False)


def test_two_threadblocks_on_one_connection_are_rejected():
    ops = [Op(OpType.SEND, Ref(IN, 0)), Op(OpType.RECV, dst=Ref(OUT, 1))]
    extra = Threadblock(1, 1, None, 0, (Op(OpType.SEND, Ref(IN, 0)),))
    ir = two_ranks(ops, [Op(OpType.SEND, Ref(IN, 0)), Op(OpType.RECV, dst=Ref(OUT, 0))], extra0=(extra,))
    with pytest.raises(ExecutionError, match="shares its connection with rank 1 on channel 0"):
        run(ir, 64)


@pytest.mark.parametrize(
    ("op", "fragment"),
    [
        (Op(OpType.SEND, Ref(IN, 1)), "outside the input buffer"),
        (Op(OpType.RECV, dst=None), "dst: expected a buffer location"),
        (Op(OpType.COPY, Ref(IN, 0), Ref(OUT, 0), deps=(Dep(3, 0),)), "no such op"),
        (Op(OpType.SEND, Ref(IN, 0), count=0), "count 0"),
    ],
)
def test_malformed_ops_name_rank_tb_and_op(op, fragment):
    ir = two_ranks([op], [Op(OpType.RECV, dst=Ref(OUT, 0))])
    with pytest.raises(ExecutionError, match=fragment) as info:
        run(ir, 64)
    assert "rank 0 tb 0 op 0" in str(info.value)


def test_a_compiled_schedule_that_overfills_the_fifos_deadlocks_and_the_compiler_avoids_it():
    """The ring alltoall in the plain critical-path order: every rank sends its 3 chunks to its
    neighbour before it receives anything, and Simple's FIFO holds 2 calls. The compiler's
    schedule (bounded order) runs."""
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("alltoall", 4, 1))
    plain = run_pipeline(lower_algorithm(algo, topo).chunk_dag(), options=CompileOptions(bounded_fifos=False))
    with pytest.raises(DeadlockError) as info:
        run(plain.result, 4 * 4 * 64)
    assert {b.rank for b in info.value.blocked} == {0, 1, 2, 3}
    assert all("waits for room to send" in b.reason for b in info.value.blocked if b.tb == 0)
    assert run(compile_algorithm(algo, topo), 4 * 4 * 64).checked
