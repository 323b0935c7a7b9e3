"""The torch backend: compiled schedules run by real processes, one per rank, over torch.distributed
point to point (Gloo on loopback), every rank's output compared with the NumPy reference; faults
(a rank that dies, hangs or gets a wrong-sized tensor) end the run in bounded time naming the rank
and level and leave no process behind; a dropped send is reported as a wrong result, not a hang.

The ranks are started once per world size (``pools``) and reused by every case: starting 8
processes that import torch is most of the cost on this machine."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

import runtime_samples as samples
import torch
from conftest import assert_one_line_error

from codegen.compiler import compile_algorithm
from codegen.formats import write_ir
from codegen.ir import IR, Buffer, Gpu, Op, OpType, Ref, Threadblock
from runtime.bench import bench
from runtime.errors import DeadlockError, ExecutionError, ExecutionMismatch
from runtime.program import build_program
from runtime.torch.errors import Fault, RankFault, parse_fault
from runtime.torch.jobs import Call
from runtime.torch.ops import HANDLERS
from runtime.torch.pool import Pool
from runtime.torch.schedule import build_schedule
from synth.algorithm import Algorithm
from synth.baselines import default_chunks, make_baseline
from synth.collectives import make_collective
from synth.milp import synthesize
from synth.smt import solve_instance
from topologies import load

pytestmark = pytest.mark.serial  # time limits, signals and processes: run alone (see Makefile)

FRONTS = Path(__file__).parent / "data" / "dgx1-fronts"
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
FAULT_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def pools():
    """One pool of ranks per world size, started on first use and closed at the end."""
    made: dict[int, Pool] = {}

    def get(world: int) -> Pool:
        if world not in made:
            made[world] = Pool(world, timeout_s=30)
        return made[world]

    yield get
    for pool in made.values():
        pool.close()


def run_on(pool: Pool, ir: IR, size: int, dtype="float32", op="sum", inplace=False, fault=None) -> float:
    """Prepare, load, run and check ``ir`` on every rank of ``pool``; the slowest rank's time."""
    call = Call(ir, size, dtype, op, inplace, None, 0, False, fault)
    prepared = pool.call("prepare", call=call)[0]
    pool.prepared(ir.name, prepared.levels)
    pool.call("reset")
    took = max(pool.call("run"))
    assert all(pool.call("check"))
    return took


def ring(topology: str, collective: str) -> IR:
    topo = load(topology)
    coll = make_collective(collective, topo.num_ranks, default_chunks("ring", collective, topo.num_ranks))
    return compile_algorithm(make_baseline("ring", topo, coll), topo)


def stored(name: str) -> IR:
    """A stored SMT result on DGX-1 (tests/data/dgx1-fronts), compiled."""
    algo = Algorithm.load(FRONTS / name)
    return compile_algorithm(algo, load("dgx1"))


# -- compiled schedules on 4 and 8 Gloo ranks ------------------------------------------------------------
@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("topology", ["fully-connected:4", "dgx1"])
def test_ring_baselines_compute_their_collective(pools, topology, collective):
    ir = ring(topology, collective)
    size = ir.nchunksperloop * 24 * 4
    run_on(pools(ir.num_ranks), ir, size)
    if ir.inplace and collective != "alltoall":
        run_on(pools(ir.num_ranks), ir, size, "int32", "max", inplace=True)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_nccl_baselines_on_dgx1_compute_their_collective(pools, collective):
    """NCCL's own channel layout (six rings over DGX-1's NVLinks; p2p for alltoall), compiled."""
    topo = load("dgx1")
    coll = make_collective(collective, 8, default_chunks("nccl", collective, 8, topo))
    ir = compile_algorithm(make_baseline("nccl", topo, coll), topo)
    run_on(pools(8), ir, ir.nchunksperloop * 8 * 4)


@pytest.mark.parametrize("name", ["allgather-dgx1-s2-r3-c2.json", "allreduce-dgx1-s4-r6-c16.json"])
def test_smt_schedules_on_dgx1_compute_their_collective(pools, name):
    ir = stored(name)
    run_on(pools(8), ir, ir.nchunksperloop * 8 * 4, "float16")
    run_on(pools(8), ir, ir.nchunksperloop * 8 * 8, "int64", "min")


@pytest.mark.parametrize(
    ("collective", "chunks", "steps", "rounds"), [("reducescatter", 2, 2, 3), ("alltoall", 1, 3, 3)]
)
def test_smt_synthesis_on_dgx1_runs_on_eight_ranks(pools, collective, chunks, steps, rounds):
    """Synthesized here (0.1-0.2 s each): reducescatter through its dual, alltoall at least steps."""
    dgx1 = load("dgx1")
    algo = solve_instance(dgx1, make_collective(collective, 8, chunks), steps, rounds).algorithm
    ir = compile_algorithm(algo, dgx1)
    run_on(pools(8), ir, ir.nchunksperloop * 8 * 4)


@pytest.mark.slow
def test_ndv2x2_ring_baselines_and_a_milp_allgather_on_sixteen_ranks(pools):
    """16 ranks: starting them and synthesizing the MILP take most of a minute on 2 cores."""
    topo = load("ndv2x2")
    irs = [ring("ndv2x2", collective) for collective in COLLECTIVES]
    irs.append(compile_algorithm(synthesize(topo, "allgather", "ndv2x2-relay", 1 << 30).algorithm, topo))
    for ir in irs:
        run_on(pools(16), ir, ir.nchunksperloop * 4 * 4)


def test_a_reduction_over_unsigned_words_matches_the_reference(pools):
    ir = samples.ring_allreduce(4)
    for op in ("sum", "max"):
        run_on(pools(4), ir, ir.nchunksperloop * 16 * 4, "uint32", op)


# -- the level schedule (no processes) ---------------------------------------------------------------------
def test_every_op_type_has_torch_semantics():
    assert set(HANDLERS) == set(OpType)


def test_the_ring_allgathers_levels_are_its_hops_and_both_ends_post_in_one_order():
    ir = samples.ring_allgather(4)
    schedule = build_schedule(build_program(ir))
    assert schedule.levels == 4 and not schedule.stuck  # 3 hops, and the last receives
    for t in schedule.transfers:
        assert t.dst == (t.src + 1) % 4 and t.level == t.seq
        assert t in schedule.sends[t.src][t.level] and t in schedule.receives[t.dst][t.level]


def test_a_cycle_through_a_dependency_and_a_transfer_is_a_deadlock():
    """Rank 0 sends only after its receive, and rank 1 sends only after its own: neither starts."""
    first = Op(OpType.RECV, None, Ref(Buffer.OUTPUT, 1), 1)
    then = Op(OpType.SEND, Ref(Buffer.INPUT, 0), None, 1)
    gpus = tuple(Gpu(r, 1, 2, 0, (Threadblock(0, 1 - r, 1 - r, 0, (first, then)),)) for r in range(2))
    ir = IR("cycle", "allgather", 2, 2, gpus)
    with pytest.raises(DeadlockError, match="waits in a cycle"):
        build_schedule(build_program(ir))


# -- a dropped send ---------------------------------------------------------------------------------------
def drop(ir: IR, rank: int, tb: int, index: int) -> IR:
    """``ir`` without op ``index`` of threadblock ``tb`` on ``rank``."""
    gpu = ir.gpus[rank]
    blocks = tuple(
        dataclasses.replace(b, ops=b.ops[:index] + b.ops[index + 1 :]) if b.id == tb else b
        for b in gpu.threadblocks
    )
    gpus = list(ir.gpus)
    gpus[rank] = dataclasses.replace(gpu, threadblocks=blocks)
    return dataclasses.replace(ir, gpus=tuple(gpus))


def test_a_dropped_send_leaves_its_receive_stuck_in_the_schedule():
    ir = drop(samples.ring_allgather(4), 1, 0, 1)  # rank 1's send of its own chunk to rank 2
    schedule = build_schedule(build_program(ir))
    (stuck,) = schedule.stuck
    assert stuck.node[0] == 2 and "rank 1 -> rank 2 channel 0: 2 sends, 3 receives" in str(stuck)
    assert all(t.receiver[0] != 2 or t.receiver[2] != stuck.op for t in schedule.transfers)


def test_a_dropped_send_is_a_wrong_result_naming_rank_and_buffer(pools):
    ir = drop(samples.ring_allgather(4), 1, 0, 1)
    start = time.monotonic()
    with pytest.raises(ExecutionMismatch) as info:
        run_on(pools(4), ir, ir.nchunksperloop * 16 * 4)
    assert time.monotonic() - start < 10  # no timeout: nothing waits for the missing transfer
    err = info.value
    assert (err.rank, err.buffer) == (0, "output")
    assert "rank 2 tb 0 op 4 (r) waits for a transfer that is never sent" in str(err)
    assert pools(4).running  # a wrong result leaves the ranks running


def test_a_receive_nothing_sends_to_is_a_deadlock_even_when_the_outputs_are_right(pools):
    """An extra receive at the end of rank 2 (of its own chunk, already in place): the outputs are
    right, but a real runtime would wait there forever."""
    ir = samples.ring_allgather(4)
    gpu = ir.gpus[2]
    (tb,) = gpu.threadblocks
    extra = dataclasses.replace(tb, ops=(*tb.ops, Op(OpType.RECV, None, Ref(Buffer.OUTPUT, 2), 1)))
    gpus = list(ir.gpus)
    gpus[2] = dataclasses.replace(gpu, threadblocks=(extra,))
    with pytest.raises(DeadlockError) as info:  # bench reports it as a "deadlock" row
        run_on(pools(4), dataclasses.replace(ir, gpus=tuple(gpus)), 256)
    assert (
        "rank 2 tb 0 op 5 (tile 0) (r) waits for a transfer never sent (rank 1 -> rank 2 channel 0)"
        in str(info.value)
    )


@pytest.mark.slow
def test_the_cli_reports_a_dropped_send_as_wrong(tmp_path, cli):
    path = tmp_path / "dropped.json"
    path.write_text(write_ir(drop(samples.ring_allgather(4), 1, 0, 1), "json"))
    proc = cli("run", "--backend", "torch", str(path), "--size", "256")
    assert proc.returncode == 1, proc.stderr
    assert "failed at 256B" in proc.stderr and "wrong result on rank 0: output[" in proc.stderr


# -- faults ------------------------------------------------------------------------------------------------
def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.fixture
def fault_pool():
    pool = Pool(2, timeout_s=FAULT_TIMEOUT_S)
    yield pool
    pool.close()


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        (Fault("die", 1, 1), "rank 1 died at level 1 of 0-1 (exit code 70)"),
        (Fault("hang", 1, 0), "rank 1 hung (its peers waited 2 s for it) at level 0 of 0-1"),
        (Fault("size", 0, 0), "rank 1 died at level 0 of 0-1 (killed by signal 6: "),
    ],
)
def test_a_faulty_rank_ends_the_run_in_bounded_time_and_leaves_no_process(fault_pool, fault, words):
    ir = samples.ring_allgather(2)
    fault_pool.start()
    pids = fault_pool.pids()
    start = time.monotonic()
    with pytest.raises(RankFault) as info:
        run_on(fault_pool, ir, ir.nchunksperloop * 16 * 4, fault=fault)
    assert time.monotonic() - start < 3 * FAULT_TIMEOUT_S + 3
    assert str(info.value).startswith(f"{ir.name}: {words}")
    if fault.kind == "size":  # the receiver of the grown message says why it ended
        assert "Received data size doesn't match expected size" in str(info.value)
    assert "\n" not in str(info.value)
    assert not fault_pool.running and all(_gone(pid) for pid in pids)
    if fault.kind == "die":
        run_on(fault_pool, ir, ir.nchunksperloop * 16 * 4)  # the next call starts afresh


def test_fault_injection_is_parsed_or_refused():
    assert parse_fault("hang@3:0") == Fault("hang", 3, 0)
    for bad in ("explode@1:0", "die@x:1", "die1:2"):
        with pytest.raises(ExecutionError, match="expected KIND@RANK:LEVEL"):
            parse_fault(bad)


# -- the benchmark: ours beside torch's own collective ------------------------------------------------
def test_bench_measures_torchs_own_collective_beside_ours():
    ir = ring("fully-connected:4", "reducescatter")
    report = bench(ir, [4096, 1 << 14], backend="torch", warmup=1, repeats=2)
    assert report.peer.startswith("torch.distributed.reduce_scatter_")
    assert "gloo, 4 processes" in report.device
    for row in report.rows:
        assert row.check == "ok" and row.time_us > 0
        assert row.peer.check == "ok" and row.peer.time_us > 0
        assert row.peer.busbw_GBps == pytest.approx(row.peer.algbw_GBps * 3 / 4)
    data = json.loads(json.dumps(report.to_json()))
    assert data["rows"][0]["peer"]["check"] == "ok"


# -- NCCL: one process per GPU ---------------------------------------------------------------------------
def one_rank_allgather() -> IR:
    """The allgather of one rank (its input copied to its output): all NCCL can run on one GPU."""
    ops = (Op(OpType.COPY, Ref(Buffer.INPUT, 0), Ref(Buffer.OUTPUT, 0), 1),)
    gpu = Gpu(0, 1, 1, 0, (Threadblock(0, None, None, 0, ops),))
    return IR("allgather-one-rank", "allgather", 1, 1, (gpu,), inplace=True, outofplace=True)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="NCCL needs a GPU per rank, and this machine has none"
)
def test_nccl_runs_our_schedule_beside_torchs_own_on_one_gpu():
    report = bench(
        one_rank_allgather(), [4096, 1 << 20], backend="torch", options={"dist": "nccl"}, repeats=3
    )
    assert "nccl, 1 process on 1 GPU(s)" in report.device
    for row in report.rows:
        assert row.check == "ok" and row.peer.check == "ok", (row.error, row.peer.error)


def test_the_nccl_path_imports_without_a_gpu():
    from runtime.torch import collective, joined, launch

    assert launch.resolve_dist("auto", 1) == ("nccl" if torch.cuda.is_available() else "gloo")
    assert callable(collective.torch_collective) and joined.Joined
    if not torch.cuda.is_available():
        with pytest.raises(ExecutionError, match="nccl needs one GPU per rank: 1 rank"):
            launch.resolve_dist("nccl", 1)


# -- the CLI and a user's torch program -----------------------------------------------------------------
def test_cli_run_on_four_ranks(tmp_path, xccl):
    path = tmp_path / "ring.json"
    path.write_text(write_ir(ring("fully-connected:4", "allreduce"), "json"))
    proc = xccl("run", "--backend", "torch", "--ranks", "4", "--timeout", "20", str(path), "--size", "1KiB")
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.startswith("ok: ") and "every output matches the NumPy reference (torch," in proc.stdout
    )


def test_cli_refuses_ranks_other_than_the_irs(tmp_path, xccl):
    path = tmp_path / "ring.json"
    path.write_text(write_ir(ring("fully-connected:4", "allgather"), "json"))
    proc = xccl("run", "--backend", "torch", "--ranks", "8", str(path))
    assert_one_line_error(proc, "--ranks 8", "has 4 ranks")


def _torchrun(tmp_path: Path, ir: IR, *extra: str) -> dict[int, str]:
    path = tmp_path / "ir.json"
    path.write_text(write_ir(ir, "json"))
    out = tmp_path / "out"
    out.mkdir()
    program = Path(__file__).parent / "torch_user_program.py"
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ir.num_ranks),
    ]
    proc = subprocess.run(
        [*cmd, str(program), str(path), str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {r: (out / f"rank{r}.txt").read_text() for r in range(ir.num_ranks)}


def test_the_cli_under_torchrun_runs_one_rank_per_process_and_only_rank_0_reports(tmp_path):
    """Before, a rank's status message to a peer could be cancelled (its send's Work dropped
    unfinished) and the job stopped after the timeout with 'rank 0 did not take part'."""
    path = tmp_path / "ring.json"
    path.write_text(write_ir(ring("ring:4", "allgather"), "json"))
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
    cmd = [*launch, "-m", "xccl.cli.main", "run", "--backend", "torch", "--timeout", "20", str(path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    said = [line for line in proc.stdout.splitlines() if line.strip()]
    assert (
        len(said) == 1
        and said[0].startswith("ok: allgather-ring:4")
        and "matches the NumPy reference" in said[0]
    )


def test_a_users_program_calls_the_ir_like_torchs_own_collective(tmp_path):
    said = _torchrun(tmp_path, ring("fully-connected:4", "allgather"))
    assert set(said.values()) == {"ok\n"}


@pytest.mark.slow
def test_a_wrong_sized_tensor_raises_on_every_rank_and_leaves_the_tensors(tmp_path):
    said = _torchrun(tmp_path, ring("fully-connected:4", "allgather"), "1")
    assert (
        said[1].startswith("ExecutionError: allgather-fully-connected:4") and "rank 1: output of" in said[1]
    )
    for rank in (0, 2, 3):
        assert said[rank].startswith(f"PeerFailure: rank {rank} at level"), said[rank]
    assert all(text.endswith("untouched: True\n") for text in said.values())


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_sigterm_keeps_the_finished_rows_and_ends_every_rank(tmp_path):
    path = tmp_path / "ring.json"
    path.write_text(write_ir(ring("fully-connected:4", "allgather"), "json"))
    cmd = [sys.executable, "-m", "xccl.cli.main", "bench", "--backend", "torch", str(path)]
    proc = subprocess.Popen(
        [*cmd, "--sizes", "1KiB:1GiB", "--repeats", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    while not any(line.startswith("[2/") for line in lines):
        lines.append(proc.stderr.readline())
        assert lines[-1], "".join(lines)
    ranks = _children(proc.pid)
    assert len(ranks) == 4
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "   1024 " in out and "   2048 " in out and "ok" in out  # the rows finished are printed
    assert "interrupted: " in err
    assert all(_gone(pid) for pid in ranks)
