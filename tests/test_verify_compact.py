"""The compact verifier (contributions as bitmasks) and the allreduce path at scale: it accepts and
rejects exactly what the set-based verifier did (tests/verify_reference.py), message for message,
and its memory no longer grows with n^3."""

from __future__ import annotations

import random
import tracemalloc
from dataclasses import replace

import pytest
import verify_reference

import topologies as T
from synth.algorithm import Algorithm, Send, Step
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.errors import VerificationError
from synth.reductions import DUAL, Problem
from synth.trees import synthesize
from topologies import load


def _outcome(check, algo: Algorithm, topo) -> str:
    try:
        check(algo, topo)
    except VerificationError as exc:
        return str(exc)
    return "verified"


def _agree(algo: Algorithm, topo) -> str:
    """Both verifiers' verdict on ``algo``, asserted equal; that verdict."""
    from synth.verify import verify

    new, old = _outcome(verify, algo, topo), _outcome(verify_reference.verify, algo, topo)
    assert new == old
    return new


def _with_steps(algo: Algorithm, steps: list[list[Send]]) -> Algorithm:
    return replace(
        algo, steps=tuple(Step(st.rounds, tuple(s)) for st, s in zip(algo.steps, steps, strict=True))
    )


def _mutants(algo: Algorithm, rng: random.Random, count: int) -> list[Algorithm]:
    """Wrong schedules (mostly): a send dropped, sent twice, to another rank, with the other op,
    of another chunk, or a step early."""
    n, out = algo.collective.num_ranks, []
    for _ in range(count):
        steps = [list(st.sends) for st in algo.steps]
        k = rng.choice([i for i, st in enumerate(steps) if st])
        j = rng.randrange(len(steps[k]))
        s = steps[k][j]
        kind = rng.choice(["drop", "twice", "dst", "op", "chunk", "early"])
        if kind == "drop":
            del steps[k][j]
        elif kind == "twice":
            steps[k].append(s)
        elif kind == "dst":
            steps[k][j] = replace(s, dst=rng.choice([r for r in range(n) if r not in (s.src, s.dst)]))
        elif kind == "op":
            steps[k][j] = replace(s, op="copy" if s.op == "reduce" else "reduce")
        elif kind == "chunk":
            steps[k][j] = replace(s, chunk=(s.chunk + 1) % algo.collective.num_addresses)
        elif k > 0:
            steps[k - 1].append(steps[k].pop(j))
        out.append(_with_steps(algo, steps))
    return out


def _instances() -> list[tuple[str, Algorithm, object]]:
    ring4, dgx1 = load("ring:4"), load("dgx1")
    return [
        ("ring allreduce (RS + AG)", make_baseline("ring", ring4, make_collective("allreduce", 4, 8)), ring4),
        ("ring reducescatter (dual)", make_baseline("ring", dgx1, make_collective("reducescatter", 8)), dgx1),
        (
            "ring reduce",
            make_baseline("ring", load("ring:5"), make_collective("reduce", 5, 2, 2)),
            load("ring:5"),
        ),
        ("ring allgather", make_baseline("ring", ring4, make_collective("allgather", 4, 2)), ring4),
        ("trees allreduce", synthesize(dgx1, "allreduce", size_bytes=1 << 16).algorithm, dgx1),
    ]


@pytest.mark.parametrize(
    ("name", "algo", "topo"), _instances(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_compact_verifier_agrees_with_the_set_based_one_on_wrong_schedules(name, algo, topo):
    """Correct schedules pass both; random mutations fail both with the same message."""
    assert _agree(algo, topo) == "verified"
    verdicts = [_agree(bad, topo) for bad in _mutants(algo, random.Random(name), 40)]
    assert sum(v != "verified" for v in verdicts) >= 30  # most mutations break the schedule


@pytest.mark.parametrize(
    ("name", "algo", "topo"),
    [i for i in _instances() if i[1].collective.combining],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_the_packed_replay_passes_exactly_what_the_set_based_verifier_passes(name, algo, topo):
    """The arrays' replay of a combining schedule (which the per-send one only follows to name a
    fault) passes a correct schedule and fails every wrong one, not one more or less."""
    from synth.replay import replayed_combining

    assert replayed_combining(algo, topo)
    for bad in _mutants(algo, random.Random(name), 40):
        assert replayed_combining(bad, topo) == (_outcome(verify_reference.verify, bad, topo) == "verified")


def test_the_packed_replay_holds_more_than_64_contributions_per_address():
    """An address summed over 70 ranks takes two words per rank: a reduce and a broadcast over a line."""
    from synth.replay import replayed_combining

    n = 70
    topo, coll = T.line(n), make_collective("allreduce", n, 1)
    steps = [Step(1, (Send(0, r, r + 1, "reduce"),)) for r in range(n - 1)]
    steps += [Step(1, (Send(0, r, r - 1, "copy"),)) for r in range(n - 1, 0, -1)]
    algo = Algorithm(coll, topo.name, tuple(steps))
    assert replayed_combining(algo, topo)
    algo.verify(topo)
    twice = Algorithm(coll, topo.name, (*steps[:1], *steps))
    assert not replayed_combining(twice, topo)
    with pytest.raises(VerificationError, match="step 1: reduce of chunk 0 from rank 0 into rank 1 counts"):
        twice.verify(topo)


def _ring3(*steps: tuple[Send, ...]) -> Algorithm:
    return Algorithm(make_collective("allreduce", 3, 1), "ring:3", tuple(Step(1, s) for s in steps))


GOOD = (
    (Send(0, 0, 1, "reduce"),),
    (Send(0, 1, 2, "reduce"),),
    (Send(0, 2, 0, "copy"), Send(0, 2, 1, "copy")),
)


def test_a_correct_reduce_then_broadcast_passes():
    assert _agree(_ring3(*GOOD), T.ring(3)) == "verified"


def test_missing_contribution_fails_the_postcondition():
    """Rank 0's contribution is never reduced in, and rank 0 never gets the sum."""
    bad = _ring3(GOOD[1], (Send(0, 2, 1, "copy"),))
    message = _agree(bad, T.ring(3))
    assert (
        "postcondition: rank 0 ends with chunk 0 reduced over ranks {0}, expected all of {0,1,2}" in message
    )


def test_double_contribution_fails_the_reduce_that_repeats_it():
    bad = _ring3(GOOD[0], GOOD[1], (Send(0, 2, 0, "reduce"),))
    assert (
        "step 2: reduce of chunk 0 from rank 2 into rank 0 counts the contributions of ranks {0} twice"
        in _agree(bad, T.ring(3))
    )


def test_wrong_destination_fails():
    """The second reduce goes back to rank 0 instead of on to rank 2: rank 0's part counted twice."""
    bad = _ring3(GOOD[0], (Send(0, 1, 0, "reduce"),), GOOD[2])
    assert (
        "step 1: reduce of chunk 0 from rank 1 into rank 0 counts the contributions of ranks {0} twice"
        in _agree(bad, T.ring(3))
    )


def test_wrong_destination_in_the_broadcast_fails():
    """The sum meant for rank 0 goes to rank 1 as well (two rounds, so the link can carry both)."""
    good = _ring3(*GOOD)
    bad = replace(good, steps=(*good.steps[:2], Step(2, (Send(0, 2, 1, "copy"), Send(0, 2, 1, "copy")))))
    assert "step 2: chunk 0 reaches rank 1 from several sends in one step" in _agree(bad, T.ring(3))


def test_the_allreduce_collective_shares_its_rank_sets():
    """An allreduce of n ranks with C chunks per rank has n x C chunks: each held its own n-rank
    postcondition (144 MB at n = C = 128, 4.2 GB in a 128-GPU trees allreduce); shared, 2.5 MB."""
    tracemalloc.start()
    try:
        coll = make_collective("allreduce", 128, 128)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10e6
    assert coll.address_posts[5] == frozenset(range(128))
    assert sorted(coll.contributions[5])[coll.contribution_bits[3 * 128 + 5]] == 3 * 128 + 5


def test_the_replay_of_an_allreduce_keeps_bits_not_sets():
    """The set-based replay of a 64-rank allreduce peaked at 7.1 MB (n^3 ids); bits: 0.3 MB."""
    topo = T.ring(64)
    algo = make_baseline("ring", topo, make_collective("allreduce", 64, 64))
    algo.collective.chunks  # noqa: B018 - the collective described before measuring
    tracemalloc.start()
    try:
        algo.verify(topo)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2e6


def test_verification_routes_one_search_per_source(monkeypatch):
    """The direct allreduce on 2 x 8 H100 uses every rank pair; routed pair by pair (a search each)
    the pairs of a 512-GPU allreduce took most of its verification. One search per source."""
    from topologies.routes import RouteGraph

    topo = load("dgx-h100x2")
    algo = make_baseline("direct", topo, make_collective("allreduce", 16, 16))
    fresh = topo.reverse()  # equal (the machine is symmetric), with a logical view not yet routed
    assert fresh == topo
    searches = []
    routes = RouteGraph.routes
    monkeypatch.setattr(
        RouteGraph, "routes", lambda self, *a, **k: searches.append(a) or routes(self, *a, **k)
    )
    algo.verify(fresh)
    pairs = {(s.src, s.dst) for st in algo.steps for s in st.sends}
    assert len(pairs) > 2 * topo.num_ranks
    assert len(searches) <= topo.num_ranks


def test_a_symmetric_topology_is_its_own_dual():
    """The dual runs on the reversed topology; a symmetric one is returned itself, so its logical
    view (261,632 links on 512 GPUs) is routed once."""
    topo = load("dgx-h100x2")
    (sub,) = DUAL.apply(Problem(topo, make_collective("reducescatter", 16))).subproblems
    assert sub.topology is topo


def test_a_symmetric_allreduce_packs_one_allgather_for_both_halves(monkeypatch):
    import synth.trees.synthesis as trees

    packs = []
    pack = trees.pack
    monkeypatch.setattr(trees, "pack", lambda *a, **k: packs.append(1) or pack(*a, **k))
    topo = load("dgx-h100x2")
    result = trees.synthesize(topo, "allreduce", size_bytes=1 << 20)
    result.algorithm.verify(topo)
    assert len(packs) == 1
    assert len(result.packings) == 2 and result.packings[0] is result.packings[1]
