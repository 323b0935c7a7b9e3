"""Issue 17 item 4: the compiled XML of every shipped multi-machine sketch's MILP schedule, at the
size the sketch synthesizes for, takes within 10% of its Algorithm's time in the IR simulator, in
the ideal model and the calibrated one (in the XML's protocol, against the Algorithm in that
protocol and in the default), compiled as ``xccl compile``, ``xccl.compile`` (and so ``xccl
tune`` and ``xccl demo``) and ``xccl bench`` compile it (``runtime.choice``: the port order, and
where that is not enough the merge window, channels and protocol, the IR simulator finds best);
or it is a strict xfail that says why not. The MILPs are made in the ideal model, where these ratios
were measured, and the DGX H100 x2 ones also in the calibrated default.

Measured ratios and causes: benchmarks/RESULTS.md, "Compiled schedules keep their speed" and
"Every shipped sketch's compiled schedule". The fast representatives run in the suite; the others
(20-200 s of MILP and compile each) are slow.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import pytest

import xccl
from codegen.compiler import compile_algorithm
from codegen.errors import CodegenError
from codegen.ir import IR
from common.errors import XcclError
from runtime.choice import (
    PORT_ORDERS,
    PROTOCOL_GAIN,
    SPEED,
    Choice,
    Variant,
    choose_port_order,
    compile_fastest,
    faster_protocol,
)
from runtime.sim import simulate as simulate_ir
from sketches.io import load_sketch
from synth.algorithm import Algorithm
from synth.cost import simulate
from synth.milp import Options, synthesize
from synth.timing import DEFAULT, IDEAL, Params, model_params
from topologies import Topology, load

SLOW = pytest.mark.slow
BEYOND = "the compiled IR takes more than 10% over its Algorithm (RESULTS.md, 'Every shipped sketch's compiled schedule')"


def _case(name: str, collective: str, made_in: Params = IDEAL, *, slow: bool = True, beyond: str = ""):
    """One (sketch, collective) row; ``beyond``: why its compiled IR is not within 10% (a strict
    xfail: the row fails the day it is)."""
    marks = [SLOW] if slow else []
    if beyond:
        marks.append(pytest.mark.xfail(strict=True, reason=f"{BEYOND}: {beyond}"))
    suffix = "" if made_in is IDEAL else "-calibrated"
    return pytest.param(name, collective, made_in, marks=marks, id=f"{name}-{collective}{suffix}")


CASES = [
    # the fast representative, made in the ideal model (two chunks, proven optimal in 1 s): 1.22x
    # (reducescatter; allreduce 1.11x) its Algorithm before the port order (runtime.choice); in the
    # calibrated default their MILPs take 32 chunks and a 30 s scheduling stage (slow)
    _case("dgx-h100x2-direct", "reducescatter", slow=False),
    _case("dgx-h100x2-direct", "allreduce"),
    _case("dgx-h100x2-direct", "reducescatter", DEFAULT),
    _case("dgx-h100x2-direct", "allgather"),
    _case("ndv2x2-relay", "allgather"),
    _case("dgx-a100x2-direct", "allgather"),
    _case("dgx-a100x4-direct", "allgather"),
    _case("ndv2x4-relay", "allgather"),  # 1.31x before the port order
    # 1.12x when it was listed as beyond; the MILP has changed since (6,663 us, was 7,928): 1.08x
    _case("dgx2x2-relay", "allgather"),
    _case("dgx-a100x8-direct", "allgather"),  # 1.14x before the port order
    # 64 KiB: a connection's two calls in flight bind, 2.37x ideal; pieces merged within 10% of
    # the span over 32 channels (runtime.choice.WIDER): 1.05x (6 s, in the suite); the Algorithm
    # model runs it 28x faster in LL, so it is compiled in LL now (runtime.choice.PROTOCOL_GAIN):
    # 1.05x its Algorithm in LL, 15.1 us where the Simple XML takes 22.4 us (39.0 us before the IR
    # simulator's connections were per channel: part conn9)
    _case("ndv2x2-fc", "allgather", slow=False),
    _case("ndv2x2-fc", "allreduce"),  # 1.94x ideal -> 1.08x (WIDER); in LL now 1.09x (24.3 us)
    # 1.16x ideal at its best in Simple (a connection's FIFO holds 2 Simple calls: a sender's third
    # waits for the receiver to take its first, per two 256-byte pieces); the Algorithm model runs it
    # 28x faster in LL (14.3 us, 410 us in Simple), whose FIFO holds 8 calls: in LL, pieces merged
    # within 5% over 32 channels, 1.05x in both models (runtime.choice.faster_protocol)
    _case("ndv2x2-fc", "reducescatter"),
    # 1.12x calibrated, 1.08x ideal: the port order chained the per-call costs the calibrated model
    # overlaps on a port (1.34x); as the Algorithm model runs it (runtime.choice.OVERLAPPED): 1.00x both
    _case("dgx-h100x2-direct", "allreduce", DEFAULT),
    # 1.27x calibrated (1.01x ideal, port order on): the ideal MILP's order through each NVSwitch
    # port, chained, serializes the per-call costs the calibrated model overlaps; re-timed as the
    # Algorithm model runs it, port order where it does not overlap sends: 1.07x, 1.05x ideal
    _case("dgx-a100x2-direct", "reducescatter"),
    # the compile failed (no channel below 32) before the compact layouts
    _case("ndv2x2-relay", "reducescatter"),
    _case("ndv2x2-relay", "allreduce"),  # 1.14x ideal before the port order, 1.04x
    # 1.103x ideal, 1.105x calibrated before only the pieces the schedule starts at once were merged
    # (runtime.choice.WIDER, window 0): a merged call lands whole, so every hop after it waited: 1.03x
    _case("dgx-a100x4-direct", "reducescatter"),
    _case("dgx-a100x4-direct", "allreduce"),  # 1.19x ideal before the port order, 1.02x
    _case("ndv2x4-relay", "reducescatter"),  # over 127 threadblocks before the compact layouts
    _case("ndv2x4-relay", "allreduce"),  # 1.23x calibrated before the port order, 1.03x
    _case("dgx-a100x8-direct", "reducescatter"),  # 1.18x calibrated before the port order, 1.03x
    # 1.28x ideal before the compact layouts let the variants compile
    _case("dgx-a100x8-direct", "allreduce"),
    _case(
        "dgx2x2-relay",
        "reducescatter",
        beyond="1.21x ideal, 1.20x calibrated. The ideal MILP keeps every NVSwitch port busy from start to end "
        "(rank 0: 953 sends of 6.99 us, the Algorithm's 6,663 us; NICs 99.5%) and holds a rank's own later "
        "chunks back by priority, which MSCCL XML cannot give a send (msccl.h's mscclTransfer has none): a port "
        "serves them first come, first served, before the partial sums its peers forward to the NIC. Keeping "
        "the MILP's order through each port instead (port order, only pieces starting together merged: 1.000x "
        "ideal) takes 1.275x calibrated: the chain makes each of rank 1's 952 NVSwitch sends wait out the whole "
        "call before it (a dependency fires after the step: 2.8 us per call + 8.74 us), 952 x 11.54 = 10,986 us, "
        "1.27x the Algorithm's 8,625; connections per channel (as the runtimes have them) do not change that. "
        "Chained to the send 2 / 3 before instead: 1.31x / 1.32x ideal, 1.39x / 1.26x calibrated; the calibrated "
        "model's own order (re-timed) where the port order does not overlap sends: 1.30x ideal, 1.35x calibrated",
    ),
    _case(
        "dgx2x2-relay",
        "allreduce",
        beyond="1.21x in both models; only the pieces started at once merged 1.125x ideal, 1.107x calibrated; "
        "port order 2.0x. The port order with only pieces starting together merged, which gives its "
        "reducescatter half 1.000x ideal (row above), exceeds the runtime's reader's 4,096 XML elements on rank "
        "0 (4,440), and could not be within 10% if it fit: its chain makes each of rank 0's 1,906 NVSwitch sends "
        "wait out the call before it (2.8 + 8.74 us), 21,995 us in the calibrated model, 1.30x its Algorithm's "
        "16,906 us",
    ),
    # 1.51x ideal, 1.08x calibrated: pieces merged within 2% of the span waited for their last,
    # and a chained port order serialized per-call costs; the port order where the schedule does
    # not overlap sends, pieces merged within 1%: 1.03x ideal, 1.10x calibrated
    # (runtime.choice.OVERLAPPED)
    _case("dgx-a100x2-direct", "allreduce"),
]


@functools.cache
def _milp(name: str, collective: str, made_in: Params) -> tuple[Algorithm, Topology, int]:
    """The MILP schedule of shipped sketch ``name`` at its size, optimised in ``made_in``."""
    sketch = load_sketch(name)
    topo = load(sketch.topology)
    size = sketch.target_size_bytes
    return synthesize(topo, collective, sketch, size, options=Options(params=made_in)).algorithm, topo, size


@functools.cache
def _compiled(name: str, collective: str, made_in: Params) -> tuple[IR, Choice | None]:
    """``xccl compile``'s choice for :func:`_milp`'s schedule (compiled once for the tests here)."""
    algo, topo, _ = _milp(name, collective, made_in)
    return compile_fastest(algo, topo)


@pytest.mark.parametrize(("name", "collective", "made_in"), CASES)
def test_compiled_schedule_keeps_its_speed(name, collective, made_in):
    algo, topo, size = _milp(name, collective, made_in)
    ir, choice = _compiled(name, collective, made_in)
    assert choice is not None and choice.size_bytes == size
    # the XML is timed in its own protocol (the calibrated model's per-call cost and rate are the
    # protocol's), against its Algorithm in that protocol and in the default one
    own = model_params("calibrated", ir.protocol)
    for ir_params, params in dict.fromkeys([(IDEAL, IDEAL), (own, own), (own, DEFAULT)]):
        model = simulate(algo, topo, size, params).time_us
        compiled = simulate_ir(ir, topo, size, params=ir_params).time_us
        assert compiled <= (1 + SPEED) * model, (
            f"{name} at {size} B: compiled {compiled:.1f} us ({ir_params.label}) vs Algorithm "
            f"{model:.1f} us ({params.label})"
        )


def test_the_api_and_xccl_bench_compile_the_order_xccl_compile_keeps(tmp_path, cli):
    # xccl.compile (which xccl tune and xccl demo call) and xccl bench compiled without the port
    # order before: 1.22x its Algorithm here, where xccl compile's choice gives 1.03x
    algo, topo, size = _milp("dgx-h100x2-direct", "reducescatter", IDEAL)
    model = simulate(algo, topo, size, DEFAULT).time_us
    ratio = {
        order: simulate_ir(xccl.compile(algo, topo, port_order=order), topo, size).time_us / model
        for order in PORT_ORDERS
    }
    assert ratio["off"] > 1 + SPEED >= ratio["auto"] == min(ratio["on"], ratio["off"])
    path = algo.save(tmp_path / "rs.json")
    proc = cli("bench", str(path), "--backend", "sim", "--sizes", str(size), "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["rows"]
    assert row["time_us"] == pytest.approx(ratio["auto"] * model, rel=1e-6)


def test_a_port_order_the_compiler_does_not_know_is_refused():
    algo = xccl.synthesize("ring:4", "allgather", "ring")
    with pytest.raises(XcclError, match=r"port_order: expected one of auto, on, off, got 'yes'"):
        xccl.compile(algo, port_order="yes")


def test_a_variant_that_does_not_compile_is_passed_over():
    # xccl compile failed outright where the port-ordered compile broke a runtime limit and the
    # plain one did not (the ndv2x2-fc and dgx-a100x4 MILP reducescatters: threadblock id over 127)
    algo, topo, _ = _milp("dgx-h100x2-direct", "reducescatter", IDEAL)

    def compiled(variant: Variant) -> IR:
        if variant.port_order:
            raise CodegenError("threadblock 128: its id exceeds 127")
        return compile_algorithm(algo, topo, window=variant.window, channels=variant.channels)

    ir, choice = choose_port_order(algo, topo, compiled)
    assert not choice.port_order and ir == compile_algorithm(algo, topo)
    with pytest.raises(CodegenError, match="exceeds 127"):
        choose_port_order(algo, topo, lambda v: compiled(replace(v, port_order=True)))


def test_the_protocol_the_algorithm_model_runs_fastest_is_found():
    # at 64 KiB the fully connected NDv2 x2 MILP's 256-byte pieces run 28x faster in LL (no
    # per-call cost, 8 calls in flight per connection) than in Simple; at 1 GiB Simple stays
    fc, fc_topo, fc_size = _milp("ndv2x2-fc", "allgather", IDEAL)
    times = {p: simulate(fc, fc_topo, fc_size, model_params("calibrated", p)).time_us for p in ("Simple", "LL")}
    assert times["LL"] * 10 < times["Simple"]
    assert faster_protocol(fc, fc_topo, fc_size) == "LL"
    assert faster_protocol(fc, fc_topo, fc_size, IDEAL) is None  # the ideal model has no protocol
    assert faster_protocol(fc, fc_topo, fc_size, model_params("calibrated", "LL")) is None
    assert faster_protocol(fc, fc_topo, fc_size, gain=PROTOCOL_GAIN) == "LL"
    h100, h100_topo, h100_size = _milp("dgx-h100x2-direct", "reducescatter", IDEAL)
    timed: list[str] = []

    def algorithm_us(p: Params) -> float:
        timed.append(p.protocol)
        return simulate(h100, h100_topo, h100_size, p).time_us

    assert faster_protocol(h100, h100_topo, h100_size, algorithm_us=algorithm_us) is None
    # at 1 GiB the line-rate bound over LL's and LL128's rates rules both out before they are timed
    # (two Algorithm simulations more for every compile: seconds at 512 ranks)
    assert timed == ["Simple"]


def test_a_schedule_the_algorithm_model_runs_faster_in_ll_is_compiled_in_ll():
    # the fully connected NDv2 x2 allgather at 64 KiB was kept in Simple (within 10% of its
    # Algorithm there, 39.0 us calibrated; 22.4 us since the IR simulator's connections are per
    # channel, its 32 channels' per-send costs at once) though the Algorithm model runs it 28x
    # faster in LL; a protocol the user gives is still kept
    algo, topo, size = _milp("ndv2x2-fc", "allgather", IDEAL)
    ir, choice = _compiled("ndv2x2-fc", "allgather", IDEAL)
    simple, simple_choice = compile_fastest(algo, topo, protocol="Simple")
    assert ir.protocol == choice.variant.protocol == "LL" and choice.fits
    assert "the LL protocol" in choice.describe() and "us in Simple at 64KiB" in choice.describe()
    assert simple.protocol == "Simple" and simple_choice.model == DEFAULT.label
    ll_us = simulate_ir(ir, topo, size, params=model_params("calibrated", "LL")).time_us
    # 15.1 us against 22.4 us: LL gains more than the choice asks of another protocol
    assert ll_us * (1 + PROTOCOL_GAIN) < simulate_ir(simple, topo, size, params=DEFAULT).time_us


def test_a_protocol_the_user_gives_is_kept_and_timed_in_it():
    # the choice timed an LL compile with Simple's per-call cost and rate (xccl compile --protocol
    # LL printed "modeled, calibrated, Simple" and that time)
    algo, topo, size = _milp("ndv2x2-fc", "allgather", IDEAL)
    ir, choice = compile_fastest(algo, topo, protocol="LL", channels=32)
    ll = model_params("calibrated", "LL")
    assert ir.protocol == "LL" and choice.variant.protocol is None and choice.model == ll.label
    assert choice.kept_us == pytest.approx(simulate_ir(ir, topo, size, params=ll).time_us)
    assert choice.algorithm_us == pytest.approx(simulate(algo, topo, size, ll).time_us)
