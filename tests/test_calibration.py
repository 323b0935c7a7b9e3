"""The calibrated timing model (synth.timing.calibration): what each parameter does to a time, and
that the lower bound stays at line rate."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error

import topologies as T
from synth.algorithm import Algorithm, Provenance, Send, Step
from synth.baselines import make_baseline
from synth.bounds import lower_bound_us
from synth.collectives import make_collective
from synth.cost import simulate
from synth.nccl.compare import nccl_layout
from synth.timing import CALIBRATION, IDEAL, TimingModelError, model_params

ALPHA, GBPS = 0.7, 25.0


def _pair():
    return T.line(2, GBPS, ALPHA)  # one link each way (ring:2 doubles it)


def _serial_sends(k: int) -> Algorithm:
    """Rank 0 sends its k chunks to rank 1 one step after another (and rank 1 its to 0): no send
    waits for another's data, only for the connection."""
    coll = make_collective("allgather", 2, k)
    steps = tuple(Step(1, (Send(i, 0, 1), Send(k + i, 1, 0))) for i in range(k))
    return Algorithm(coll, "line:2", steps)


def test_a_send_cost_occupies_the_connection():
    """k sends on one connection pay k send costs one after another (alpha, by contrast, only
    delays an arrival): the defect of issue 15, where many tiny sends looked free."""
    k, size, send = 8, 1 << 20, 2.0
    chunk_us = size / 2 / k / (GBPS * 1e3)
    params = model_params("ideal", send_us=send)
    time = simulate(_serial_sends(k), _pair(), size, params).time_us
    assert time == pytest.approx(k * (send + chunk_us) + ALPHA)
    assert simulate(_serial_sends(k), _pair(), size, IDEAL).time_us == pytest.approx(k * chunk_us + ALPHA)


def _one_step(k: int, method: str, start_us: float | None = None) -> Algorithm:
    """Both ranks send their k chunks to each other in one step."""
    coll = make_collective("allgather", 2, k)
    sends = tuple(Send(i, 0, 1, start_us=start_us) for i in range(k)) + tuple(
        Send(k + i, 1, 0, start_us=start_us) for i in range(k)
    )
    return Algorithm(coll, "line:2", (Step(1, sends),), Provenance(method))


@pytest.mark.parametrize(("method", "start_us"), [("baseline:ring", None), ("milp", 0.0)])
def test_sends_the_compiler_merges_are_one_call(method, start_us):
    """The sends of a step between two ranks that the compiler merges into one call pay the send
    cost once: a textbook baseline's (dataflow order), a timed schedule's that start together."""
    k, size, send = 8, 1 << 20, 2.0
    params = model_params("ideal", send_us=send)
    assert simulate(_one_step(k, method, start_us), _pair(), size, params).time_us == pytest.approx(
        send + ALPHA + size / 2 / (GBPS * 1e3)
    )


def test_sends_the_compiler_keeps_apart_are_a_call_each():
    """An untimed synthesized step's sends on one link: the compiler follows the model's list
    schedule, where they run one after another, and gives each its call (it was one call in the
    model, so the model was 10.5 us faster than the compiled SMT DGX-1 allgather at 1 MiB)."""
    k, size, send = 8, 1 << 20, 2.0
    params = model_params("ideal", send_us=send)
    chunk_us = size / 2 / k / (GBPS * 1e3)
    assert simulate(_one_step(k, "smt"), _pair(), size, params).time_us == pytest.approx(
        k * (send + chunk_us) + ALPHA
    )


def test_calibrated_model_applies_launch_rate_and_protocol():
    c = CALIBRATION
    size, k = 1 << 20, 1
    chunk = size / 2
    for protocol in ("Simple", "LL128", "LL"):
        params = model_params("calibrated", protocol)
        rate = GBPS * 1e3 * c.link_efficiency * c.protocol_efficiency[protocol]
        expected = c.launch_us + c.send_us[protocol] + ALPHA + chunk / rate
        assert simulate(_serial_sends(k), _pair(), size, params).time_us == pytest.approx(expected)
        assert simulate(_serial_sends(k), _pair(), size, params).model == f"calibrated, {protocol}"


def test_the_lower_bound_stays_at_line_rate_under_every_model():
    topo = T.load("dgx1")
    coll = make_collective("allgather", 8)
    bound = lower_bound_us(topo, coll, 1 << 30)
    assert bound == pytest.approx(6263.49, abs=0.01)  # 7/8 GiB over 6 NVLinks of 25 GB/s, per rank
    nccl = nccl_layout(topo, coll)  # NCCL's six rings reach the bound in the ideal model ...
    assert simulate(nccl, topo, 1 << 30, IDEAL).time_us == pytest.approx(bound, rel=0.001)
    calibrated = simulate(nccl, topo, 1 << 30, model_params("calibrated")).time_us
    assert calibrated >= bound / CALIBRATION.link_efficiency  # ... and stay above it, derated, calibrated


def test_bound_and_cost_say_line_rate(xccl, tmp_path):
    bound = xccl("bound", "-t", "dgx1", "-C", "allgather")
    assert "at line rate" in bound.stdout
    path = tmp_path / "ring.json"
    assert xccl("baseline", "ring", "-t", "dgx1", "-C", "allgather", "-o", str(path)).returncode == 0
    cost = xccl("cost", str(path), "--json", "--model", "ideal", "-s", "1GiB")
    (row,) = json.loads(cost.stdout)["rows"]
    assert row["model"] == "ideal" and row["of_bound"] == pytest.approx(6263.49 / 37585.86, rel=1e-4)


def test_unknown_model_or_negative_cost_are_refused(xccl, tmp_path):
    with pytest.raises(TimingModelError, match="send_us"):
        model_params("calibrated", send_us=-1.0)
    with pytest.raises(TimingModelError, match="timing model"):
        model_params("exact")
    path = tmp_path / "ring.json"
    xccl("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(path))
    proc = xccl("cost", str(path), "--send-us", "-3")
    assert proc.returncode == 2 and "--send-us" in proc.stderr


def test_milp_and_cost_give_one_time_for_one_file(xccl, tmp_path):
    """`synth milp --send-us` and `cost --send-us` time the same file alike (they used to differ by
    30x: the MILP charged the cost as occupancy, cost as latency)."""
    out = tmp_path / "milp.json"
    made = xccl(
        "synth", "milp", "-t", "ndv2x2", "-k", "ndv2x2-relay", "-C", "allgather", "-s", "64KiB",
        "--model", "ideal", "--send-us", "2", "-o", str(out),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    said = float(made.stdout.split("modeled ")[1].split(" us")[0])
    cost = xccl("cost", str(out), "--json", "--model", "ideal", "--send-us", "2", "-s", "64KiB")
    (row,) = json.loads(cost.stdout)["rows"]
    assert row["time_us"] == pytest.approx(said, abs=0.01)
    assert_one_line_error(xccl("cost", str(out), "--model", "exact"), "--model")


def test_nccl_channels_run_at_once():
    """NCCL's eight rings on two DGX-2 run at once, each channel with its own connection: at 1 KiB,
    where the per-send cost is nearly all of it, the layout costs about what one ring does (121 us
    against 115 us), not eight rings' sends one after another (613 us when each send was timed as a
    call of its own)."""
    topo = T.load("dgx2x2")
    coll = make_collective("allgather", topo.num_ranks)
    layout = nccl_layout(topo, coll)
    assert layout.chunks == 8
    ring = make_baseline("ring", topo, coll)
    params = model_params("calibrated")
    assert simulate(layout, topo, 1024, params).time_us < 1.1 * simulate(ring, topo, 1024, params).time_us
