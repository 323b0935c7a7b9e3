"""The rail-aligned alltoall held as arrays (synth.baselines.rails): the schedule the docs describe,
verified as arrays with the verifier's verdict, timed from one machine's and one rail's runs with the
engine's time of the whole Algorithm (synth.cost.simulate)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import assert_one_line_error

from common.limits import LimitError
from synth.algorithm import Algorithm, Send, Step
from synth.baselines import make_baseline
from synth.baselines.hierarchical import rail_alltoall
from synth.baselines.rails import Rails, rail_aligned, verify_rails
from synth.baselines.rails_time import simulate_rails
from synth.collectives import make_collective
from synth.cost import simulate
from synth.errors import VerificationError
from synth.timing import model_params
from topologies.io import topology_from_dict
from topologies.registry import load

CASES = [("dgx-h100x2", 1), ("dgx-h100x3", 1), ("dgx-h100x4", 2), ("dgx-a100x2", 1)]
SIZES = (1024.0, float(1 << 20), float(1 << 30))
MODELS = ("ideal", "calibrated")


@functools.cache
def _topology(name: str):
    return load(name)


def _reference(topo, chunks: int) -> list[set[Send]]:
    """The schedule as docs/scale.md states it, per step (the baseline's construction before the
    arrays): relay inside the machine a step ahead, across on the destination's rail."""
    k, n = topo.num_machines, topo.num_ranks
    g = n // k
    steps: list[set[Send]] = [set() for _ in range(k)]
    coll = make_collective("alltoall", n, chunks)
    for cid, chunk in enumerate(coll.chunks):
        (src,), (dst,) = chunk.pre, chunk.post
        if src == dst:
            continue
        shift, relay = (dst // g - src // g) % k, (src // g) * g + dst % g
        if shift == 0:
            steps[-1].add(Send(cid, src, dst))
        elif relay == src:
            steps[shift - 1].add(Send(cid, src, dst))
        else:
            steps[shift - 1].add(Send(cid, src, relay))
            steps[shift].add(Send(cid, relay, dst))
    return [s for s in steps if s]


def _algorithm_of(rails: Rails, topo) -> Algorithm:
    """The held schedule's sends as an Algorithm, whatever their faults (rounds: enough)."""
    coll = make_collective("alltoall", topo.num_ranks, rails.chunks)
    steps = [Step(10_000, tuple(sends)) for sends in rails.send_steps() if sends]
    return Algorithm(coll, topo.name, tuple(steps))


def _verdicts(rails: Rails, topo) -> tuple[str | None, str | None]:
    """(the held check's error, the verifier's error on the same sends), None where it passes."""
    out = []
    for check in (lambda: verify_rails(rails, topo), lambda: _algorithm_of(rails, topo).verify(topo)):
        try:
            check()
            out.append(None)
        except VerificationError as exc:
            out.append(str(exc))
    return out[0], out[1]


@pytest.mark.parametrize(("name", "chunks"), CASES)
def test_the_held_schedule_is_the_baseline_and_verifies(name, chunks):
    topo = _topology(name)
    held = rail_alltoall(topo, chunks)
    algo = make_baseline("hierarchical", topo, make_collective("alltoall", topo.num_ranks, chunks))
    made = held.algorithm()
    assert made.steps == algo.steps and made.provenance == algo.provenance
    assert held.name == algo.name and held.num_sends == algo.num_sends
    assert [set(s.sends) for s in algo.steps] == _reference(topo, chunks)
    made.verify(topo)


def _broken(rails: Rails, **changes) -> Rails:
    fields = {f: getattr(rails, f) for f in ("topology", "machines", "size", "chunks", "across")}
    fields |= {f: getattr(rails, f) for f in ("own_at", "relay_at", "rail_at", "local_at")}
    return Rails(**(fields | changes))


def _mutations(rails: Rails) -> dict[str, Rails]:
    k = rails.machines
    twice = rails.across.copy()
    twice[-1, 3, 0] = twice[0, 3, 0]  # NIC 3 of machine 0 sends to one machine twice, misses another
    home = rails.across.copy()
    home[0, 1, 1] = 1  # a NIC sends to its own machine
    late = rails.relay_at.copy()
    late[k - 2] = rails.rail_at[k - 2]  # shuffled in the step that sends it across
    swapped = rails.across[::-1].copy()  # the machines in the other order: still valid
    per_rail = rails.across.copy()
    per_rail[:, 2, :] = rails.across[::-1, 2, :]  # one rail in another order: valid, rails unlike
    return {
        "twice": _broken(rails, across=twice),
        "home": _broken(rails, across=home),
        "late": _broken(rails, relay_at=late),
        "after": _broken(rails, relay_at=rails.rail_at + 1),
        "local first": _broken(rails, local_at=0),
        "reversed": _broken(rails, across=swapped),
        "per rail": _broken(rails, across=per_rail),
    }


@pytest.mark.parametrize(("name", "chunks"), CASES)
def test_the_check_gives_the_verifiers_verdict_on_broken_and_valid_forms(name, chunks):
    topo = _topology(name)
    rails = rail_aligned(topo, topo.num_machines, chunks)
    verdicts = {what: _verdicts(form, topo) for what, form in _mutations(rails).items()}
    for what, (held, full) in verdicts.items():
        assert (held is None) == (full is None), (what, held, full)
    assert verdicts["late"][0] is not None and "not before" in verdicts["late"][0]
    assert verdicts["home"][0] is not None
    assert verdicts["twice"][0] is not None or rails.machines < 3  # one rail step: nothing to repeat
    assert verdicts["reversed"] == (None, None) and verdicts["local first"] == (None, None)


def test_a_missing_link_is_named_by_both():
    # two machines of two GPUs with no link between the GPUs of a machine: only NICs
    switches = [{"name": f"m{m}.nic{b}", "kind": "nic"} for m in range(2) for b in range(2)]
    switches.append({"name": "net", "kind": "network"})
    links = []
    for r in range(4):
        m, b = divmod(r, 2)
        links.append({"src": r, "dst": f"m{m}.nic{b}", "bandwidth_GBps": 50, "alpha_us": 0.0})
        links.append({"src": f"m{m}.nic{b}", "dst": "net", "bandwidth_GBps": 50, "alpha_us": 0.85})
    data = {"name": "nics-only", "ranks": 4, "switches": switches, "links": links, "node_of": [0, 0, 1, 1]}
    topo = topology_from_dict(data)
    held, full = _verdicts(rail_aligned(topo, 2, 1), topo)
    assert held is not None and full is not None
    assert "no link 0 -> 1" in held and "no link" in full


@pytest.mark.parametrize(("name", "chunks"), CASES)
def test_the_parts_time_what_the_engine_times_on_the_whole(name, chunks):
    topo = _topology(name)
    held = rail_alltoall(topo, chunks)
    algo = held.algorithm()
    for size in SIZES:
        for model in MODELS:
            params = model_params(model)
            lines: list[str] = []
            got = simulate_rails(held, topo, size, params, log=lines.append)
            want = simulate(algo, topo, size, params)
            assert got.time_us == pytest.approx(want.time_us, rel=1e-9, abs=1e-12)
            assert (got.model, got.size_bytes) == (want.model, want.size_bytes)
            assert got.busbw_GBps == pytest.approx(want.busbw_GBps, rel=1e-9)
            assert "machine 0's" in lines[0] and "rail 0's" in lines[0], lines[0]


@pytest.mark.parametrize("what", ["per rail", "reversed"])
def test_unlike_rails_or_a_tiny_transfer_run_together_and_time_the_same(what):
    topo = _topology("dgx-h100x3")
    form = _mutations(rail_aligned(topo, 3, 1))[what]
    held = verify_rails(form, topo)
    algo = held.algorithm()
    for size in (1e-3, float(1 << 30)):
        lines: list[str] = []
        got = simulate_rails(held, topo, size, model_params("ideal"), log=lines.append)
        assert got.time_us == pytest.approx(
            simulate(algo, topo, size, model_params("ideal")).time_us, rel=1e-9
        )
        if size < 1:
            assert "one run of all" in lines[0]
        elif what == "per rail":
            assert "all 8 rails'" in lines[0]


def test_the_algorithm_over_the_limit_is_refused_naming_it(monkeypatch):
    held = rail_alltoall(_topology("dgx-h100x2"))
    monkeypatch.setenv("XCCL_MAX_BASELINE_SENDS", "100")
    with pytest.raises(LimitError, match="XCCL_MAX_BASELINE_SENDS"):
        held.algorithm()
    assert np.asarray(held.rails.across).shape == (1, 8, 2)


def test_synth_hierarchical_at_4096_gpus_is_refused_at_once(xccl, tmp_path):
    out = tmp_path / "a2a.json"
    proc = xccl("synth", "hierarchical", "-t", "dgx-h100x512", "-o", str(out))
    assert_one_line_error(proc, "31424512 sends", "XCCL_MAX_BASELINE_SENDS", "arrays")
    assert not out.exists()
