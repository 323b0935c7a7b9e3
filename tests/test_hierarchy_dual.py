"""A composed allgather's reducescatter (run backwards) and allreduce held as arrays
(synth/reductions/hierarchy_dual.py): accepted exactly where the verifier accepts their
Algorithm, the same sends as the dual reduction's inverse, and timed from their parts
(simulate_stages) exactly as the engine times the whole (synth.cost.simulate)."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import numpy as np
import pytest
import verify_reference
from conftest import assert_one_line_error

from synth.algorithm import Provenance
from synth.collectives import make_collective
from synth.cost import simulate
from synth.errors import VerificationError
from synth.reductions.dual import invert
from synth.reductions.hierarchy import Composed, Composition, verify_composition
from synth.reductions.hierarchy_dual import allreduce_of, dual_of
from synth.timing import model_params
from synth.trees import synthesize
from synth.trees.synthesis import modeled
from topologies import load

PROVENANCE = Provenance("trees")
SIZES = (1024.0, float(1 << 20), float(1 << 30))


@functools.cache
def _composed(name: str, within: str = "trees") -> tuple[Composed, object]:
    topo = load(name)
    result = synthesize(topo, "allgather", hierarchical=True, within=within, size_bytes=1 << 16)
    assert result.composed is not None
    return result.composed, topo


def _verdict(check, *args) -> str:
    try:
        check(*args)
    except VerificationError as exc:
        return str(exc)
    return "verified"


def _inverse(composed: Composed):
    """The dual reduction's inverse of the composed allgather's Algorithm (what it verifies today)."""
    ag = composed.algorithm()
    return invert(ag, make_collective("reducescatter", ag.collective.num_ranks, ag.chunks))


@pytest.mark.parametrize(("name", "within"), [("dgx-h100x2", "trees"), ("dgx-a100x3", "ring")])
def test_the_dual_is_the_inverse_the_dual_reduction_makes(name, within):
    """Step by step the same sends (reductions, turned around, steps reversed) as
    synth.reductions.dual.invert of the Algorithm, and verified by both verifiers."""
    composed, topo = _composed(name, within)
    staged = dual_of(composed, topo)
    algo = staged.algorithm()
    want = _inverse(composed)
    assert [sorted(st.sends) for st in algo.steps] == [sorted(st.sends) for st in want.steps]
    assert algo.name == staged.name and algo.num_sends == staged.num_sends
    assert _verdict(algo.verify, topo) == "verified"
    assert _verdict(verify_reference.verify, algo, topo) == "verified"


def _broken(composition: Composition, rng: random.Random, kind: str) -> Composition:
    """A send again in a later step to a rank that has its chunk (``again``) or to the chunk's
    origin (``home``): still a valid allgather, but run backwards a contribution is reduced twice;
    or a send dropped (``drop``), which the allgather's own verification refuses."""
    blocks = [b.copy() for b in composition.blocks]
    k = rng.randrange(len(blocks) - 1)
    chunk, src, dst = (int(x) for x in blocks[k][rng.randrange(len(blocks[k]))])
    later = rng.randrange(k + 1, len(blocks))
    origin = chunk // composition.chunks
    if kind == "drop":
        blocks[k] = np.delete(blocks[k], rng.randrange(len(blocks[k])), axis=0)
    else:
        row = (chunk, src, dst) if kind == "again" else (chunk, dst, origin)
        blocks[later] = np.vstack([blocks[later], np.array([row], dtype=np.int64)])
    return replace(composition, blocks=tuple(blocks))


@pytest.mark.parametrize(("name", "within"), [("dgx-h100x2", "trees"), ("dgx-h100x3", "ring")])
def test_broken_duals_are_refused_where_the_verifier_refuses_their_inverse(name, within):
    composed, topo = _composed(name, within)
    rng = random.Random(name)
    refused = 0
    for kind in ["again", "home", "drop"] * 3:
        composition = _broken(composed.composition, rng, kind)
        allgather = _verdict(verify_composition, composition, topo, PROVENANCE)
        if allgather == "verified":
            broken = verify_composition(composition, topo, PROVENANCE)
            arrays = _verdict(dual_of, broken, topo)
            whole = _verdict(_inverse(broken).verify, topo)
            assert (arrays == "verified") == (whole == "verified"), (kind, arrays, whole)
            assert "would be reduced twice" in arrays and "counts the contributions" in whole
            refused += 1
        else:
            assert kind == "drop", allgather
    assert refused == 6


def test_a_dual_on_a_topology_without_its_links_names_the_send():
    """dgx-h100x2's dual checked on a 16-rank ring: the first send over a pair the ring lacks is
    named, with its step and the topology, as the verifier names it."""
    composed, _ = _composed("dgx-h100x2")
    ring = load("ring:16")
    message = _verdict(dual_of, composed, ring)
    assert "no link" in message and "in ring:16" in message and ": step " in message


def test_the_allreduce_is_the_reducescatter_then_the_allgather():
    composed, topo = _composed("dgx-h100x2")
    rs = dual_of(composed, topo)
    ar = allreduce_of(rs, composed, topo)
    algo = ar.algorithm()
    assert algo.collective.name == "allreduce" and algo.num_sends == 2 * composed.num_sends
    assert _verdict(algo.verify, topo) == "verified"
    assert _verdict(verify_reference.verify, algo, topo) == "verified"
    other, _ = _composed("dgx-a100x3")
    with pytest.raises(VerificationError, match="its parts are for"):
        allreduce_of(rs, other, topo)


@pytest.mark.parametrize(
    ("name", "collective", "path"),
    [
        ("dgx-h100x2", "reducescatter", "one rail's"),
        ("dgx-h100x3", "allreduce", "one rail's"),
        ("dgx-a100x3", "reducescatter", "one rail's"),
        ("ndv2x2", "reducescatter", "all 8 rails'"),  # one NIC per machine: the rails meet
        ("ndv2x2", "allreduce", "overlap in time"),
    ],
)
def test_the_parts_time_what_the_engine_times_on_the_whole(name, collective, path):
    topo = load(name)
    result = synthesize(topo, collective, hierarchical=True, size_bytes=1 << 16)
    algo = result.algorithm
    algo.verify(topo)
    hows: list[str] = []
    for size in SIZES:
        for model in ("ideal", "calibrated"):
            params = model_params(model)
            got = modeled(result, topo, size, params, log=hows.append)
            want = simulate(algo, topo, size, params)
            assert got.time_us == pytest.approx(want.time_us, rel=1e-9, abs=1e-12)
            assert got.busbw_GBps == pytest.approx(want.busbw_GBps, rel=1e-9)
    assert any(path in how for how in hows), hows


def test_an_allreduce_runs_its_inner_stages_apart_only_where_they_do_not_overlap():
    """On 2 x 8 H100 with one chunk per rank on the rails (as at 4096 GPUs) the reducescatter's
    inner sends are done before the allgather's begin: the parts run apart. Made for 1 GiB (many
    chunks, a deep pipeline) they overlap at 1 GiB and the whole runs at once."""
    topo = load("dgx-h100x2")
    ideal = model_params("ideal")
    cases = ((1 << 16, "1 machine run(s)"), (1 << 30, "overlap in time"))
    for made_for, path in cases:
        result = synthesize(topo, "allreduce", hierarchical=True, size_bytes=made_for)
        hows: list[str] = []
        got = modeled(result, topo, float(1 << 30), ideal, log=hows.append)
        want = simulate(result.algorithm, topo, float(1 << 30), ideal)
        assert got.time_us == pytest.approx(want.time_us, rel=1e-9)
        assert path in hows[0], hows


def test_a_composed_reducescatter_over_the_limit_is_verified_and_timed_without_its_algorithm(monkeypatch):
    """The 4096-GPU path on 16: over XCCL_MAX_TREES_SENDS the reducescatter and allreduce are
    still synthesized (as arrays: no Send made), verified and timed; the Algorithm is refused on
    demand naming the limit. Before, both were refused up front; then the reducescatter's collective
    (16.8 M contributions at 4096 GPUs, never read by the composition) was described and refused."""
    import synth.reductions.hierarchy_dual as hierarchy_dual
    from common.limits import LimitError

    def no_send(*args):
        raise AssertionError("a Send object was made")

    topo = load("dgx-h100x2")
    want = {
        c: synthesize(topo, c, hierarchical=True, size_bytes=1 << 20).algorithm
        for c in ("reducescatter", "allreduce")
    }
    monkeypatch.setenv("XCCL_MAX_TREES_SENDS", "100")
    monkeypatch.setenv("XCCL_MAX_CHUNKS", "200")  # a reducescatter of 16 ranks has 256 contributions
    monkeypatch.setattr(hierarchy_dual, "Send", no_send)
    for collective, sends in (("reducescatter", 240), ("allreduce", 480)):
        result = synthesize(topo, collective, hierarchical=True, size_bytes=1 << 20)
        with pytest.raises(LimitError, match=rf"{collective} on dgx-h100x2 as an Algorithm: {sends} sends"):
            result.algorithm  # noqa: B018
        timed = modeled(result, topo, 1 << 20)
        whole = want[collective]
        assert result.num_sends == whole.num_sends and result.name == whole.name
        assert timed.time_us == pytest.approx(simulate(whole, topo, 1 << 20).time_us, rel=1e-9)


@pytest.mark.parametrize("collective", ["reducescatter", "allreduce"])
def test_the_cli_refuses_to_write_a_composed_schedule_too_large_to_hold(xccl, tmp_path, collective):
    """As for the allgather: at 4096 GPUs the Algorithm JSON would be unreadable, so `xccl synth
    trees -o` is refused at once in one line naming the limit and where the arrays can be had."""
    out = tmp_path / "x.json"
    proc = xccl("synth", "trees", "--hierarchical", "-t", "dgx-h100x512", "-C", collective, "-o", str(out))
    sends = "16773120" if collective == "reducescatter" else "33546240"
    assert_one_line_error(proc, "as an Algorithm", f"{sends} sends", "XCCL_MAX_TREES_SENDS", "docs/trees.md")
    assert not out.exists()


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_the_timing_reads_the_routes_the_verification_found(monkeypatch, collective):
    """With few route tables kept (as at 4096 GPUs, where the verification's are gone by the time
    it ends), the timing searched every rail source's routes again (77 s at 4096 GPUs); it now
    reads the links the verification routed: no search at all."""
    import topologies.logical
    from topologies.io import topology_from_dict, topology_to_dict
    from topologies.routes import RouteGraph

    monkeypatch.setattr(topologies.logical, "TABLES_KEPT", 1)
    topo = topology_from_dict(topology_to_dict(load("dgx-h100x3")))  # anew: no routes found yet
    result = synthesize(topo, collective, hierarchical=True, size_bytes=1 << 16)
    searches = []
    routes = RouteGraph.routes
    monkeypatch.setattr(
        RouteGraph, "routes", lambda self, *a, **k: searches.append(a) or routes(self, *a, **k)
    )
    modeled(result, topo, float(1 << 30), model_params("ideal"))
    assert searches == []
