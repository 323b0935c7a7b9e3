"""The verifier's replay on arrays (synth/replay.py), the path of every copy-only collective and of
a composed allgather held as arrays: it accepts and rejects what the set-based verifier
(tests/verify_reference.py) does, message for message, on small compositions and broken ones."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
import verify_reference
from conftest import assert_one_line_error

from synth.algorithm import Algorithm, Provenance, Send, Step
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.errors import VerificationError
from synth.reductions.hierarchy import Composition, to_steps, verify_composition
from synth.trees import synthesize
from topologies import load

PROVENANCE = Provenance("trees")


def _verdict(check, *args) -> str:
    try:
        check(*args)
    except VerificationError as exc:
        return str(exc)
    return "verified"


def _agree(composition: Composition, topo) -> str:
    """The verdict on the composition as arrays, asserted equal to the set-based verifier's on its
    Algorithm (rounds as to_steps gives them) and to synth.verify's; that verdict."""
    algo = Algorithm(
        make_collective("allgather", topo.num_ranks, composition.chunks),
        topo.name,
        to_steps(composition, topo),
    )
    arrays = _verdict(verify_composition, composition, topo, PROVENANCE)
    assert arrays == _verdict(verify_reference.verify, algo, topo)
    assert arrays == _verdict(algo.verify, topo)
    return arrays


def _composition(topology: str, within: str) -> tuple[Composition, object]:
    topo = load(topology)
    result = synthesize(topo, "allgather", hierarchical=True, within=within, size_bytes=1 << 20)
    assert result.composed is not None
    return result.composed.composition, topo


def _broken(composition: Composition, rng: random.Random, kind: str) -> Composition:
    """One send dropped, sent twice, of a chunk out of range, or a step early (one that forwards
    what its source received in the step before, where there is one)."""
    blocks = [b.copy() for b in composition.blocks]
    k = rng.choice([i for i in range(1, len(blocks)) if len(blocks[i])])
    j = rng.randrange(len(blocks[k]))
    if kind == "early":
        arrived = {(d, c) for c, _, d in blocks[k - 1].tolist()}
        relays = [i for i, (c, s, _) in enumerate(blocks[k].tolist()) if (s, c) in arrived]
        j = rng.choice(relays) if relays else j
    row = blocks[k][j].copy()
    if kind == "drop":
        blocks[k] = np.delete(blocks[k], j, axis=0)
    elif kind == "twice":
        blocks[k] = np.vstack([blocks[k], row])
    elif kind == "early":
        blocks[k] = np.delete(blocks[k], j, axis=0)
        blocks[k - 1] = np.vstack([blocks[k - 1], row])
    elif kind == "chunk":
        blocks[k][j, 0] = -1
    return replace(composition, blocks=tuple(blocks))


CASES = [
    ("dgx-h100x2", "trees"),
    ("dgx-h100x3", "ring"),
    ("dgx-a100x3", "trees"),
    pytest.param("dgx-h100x2", "smt", marks=pytest.mark.slow),  # the machine's SMT solve: 9 s
]


@pytest.mark.parametrize(("topology", "within"), CASES)
def test_a_composition_verifies_as_arrays_as_its_algorithm_does(topology, within):
    composition, topo = _composition(topology, within)
    assert _agree(composition, topo) == "verified"
    rng = random.Random(topology + within)
    kinds = ["drop", "twice", "early", "chunk"] * 4
    verdicts = [_agree(_broken(composition, rng, kind), topo) for kind in kinds]
    assert sum(v != "verified" for v in verdicts) >= 12
    assert any("does not hold chunk" in v for v in verdicts)
    assert any("from several sends in one step" in v or "exceed its capacity" in v for v in verdicts)


def test_a_composition_on_a_topology_without_its_links_names_the_send():
    """dgx-h100x2's composition checked on a 16-rank ring: the first send over a pair the ring
    lacks is named, with its step, as the verifier names it."""
    composition, _ = _composition("dgx-h100x2", "trees")
    ring = load("ring:16")
    message = _agree(composition, ring)
    assert "step 0: send of chunk" in message and "in ring:16" in message and "no link" in message


def test_the_rounds_of_a_composition_are_the_capacity_models():
    """to_steps counts each step's loads on arrays: the same rounds ChunkCapacity gives its sends."""
    composition, topo = _composition("dgx-a100x3", "ring")
    capacity = topo.chunk_capacity()
    for step in to_steps(composition, topo):
        assert step.rounds == capacity.rounds_needed((s.src, s.dst) for s in step.sends)


def test_a_step_given_too_few_rounds_fails_on_its_edge():
    """Every send of an 8-rank direct allgather in one step, on one round: the first overloaded
    edge named, with its load and capacity, as the verifier names it."""
    topo = load("dgx-h100")
    algo = make_baseline("direct", topo, make_collective("allgather", 8, 4))
    squeezed = replace(algo, steps=tuple(Step(1, st.sends) for st in algo.steps))
    message = _verdict(squeezed.verify, topo)
    assert "exceed its capacity" in message
    assert message == _verdict(verify_reference.verify, squeezed, topo)


@pytest.mark.parametrize(
    ("name", "root"),
    [("broadcast", 2), ("scatter", 1), ("gather", 3), ("alltoall", None), ("allgather", None)],
)
def test_every_copy_only_collective_agrees_with_the_set_based_verifier(name, root):
    """The ring baseline of each copy-only collective, and its mutants (a send dropped, twice, to
    another rank, a reduce, another chunk, a step early), judged alike."""
    topo = load("ring:5")
    algo = make_baseline("ring", topo, make_collective(name, 5, 2, root))
    rng = random.Random(name)
    assert _verdict(algo.verify, topo) == _verdict(verify_reference.verify, algo, topo) == "verified"
    for _ in range(30):
        steps = [list(st.sends) for st in algo.steps]
        k = rng.choice([i for i, st in enumerate(steps) if st])
        j = rng.randrange(len(steps[k]))
        s = steps[k][j]
        kind = rng.choice(["drop", "twice", "dst", "op", "chunk", "early", "self", "unknown"])
        if kind == "drop":
            del steps[k][j]
        elif kind == "twice":
            steps[k].append(s)
        elif kind == "dst":
            steps[k][j] = replace(s, dst=(s.dst + 2) % 5 if (s.dst + 2) % 5 != s.src else (s.dst + 3) % 5)
        elif kind in ("op", "unknown"):
            steps[k][j] = replace(s, op="reduce" if kind == "op" else "move")
        elif kind == "chunk":
            steps[k][j] = replace(s, chunk=s.chunk + algo.collective.num_addresses)
        elif kind == "self":
            steps[k][j] = replace(s, dst=s.src)
        elif k > 0:
            steps[k - 1].append(steps[k].pop(j))
        bad = replace(
            algo, steps=tuple(Step(st.rounds, tuple(x)) for st, x in zip(algo.steps, steps, strict=True))
        )
        assert _verdict(bad.verify, topo) == _verdict(verify_reference.verify, bad, topo)


def test_a_rank_count_mismatch_is_refused_alike():
    topo = load("ring:4")
    algo = Algorithm(make_collective("allgather", 3), "ring:3", (Step(1, (Send(0, 0, 1),)),))
    message = _verdict(algo.verify, topo)
    assert "the topology has 4 ranks, the collective 3" in message
    assert message == _verdict(verify_reference.verify, algo, topo)


def test_a_composed_allgather_over_the_limit_is_verified_without_its_algorithm(monkeypatch):
    """The 4096-GPU path on 16: with XCCL_MAX_TREES_SENDS below its sends, the composed allgather
    is still synthesized and verified (as arrays: no Send made), its Algorithm refused on demand
    naming the limit, and its modeled time from the composition's parts equal to the engine's run
    of the whole Algorithm. Before, the synthesis was refused up front."""
    import synth.reductions.hierarchy as hierarchy
    from common.limits import LimitError
    from synth.cost import simulate
    from synth.trees.synthesis import modeled

    def no_send(*args):
        raise AssertionError("a Send object was made")

    monkeypatch.setenv("XCCL_MAX_TREES_SENDS", "100")
    monkeypatch.setattr(hierarchy, "Send", no_send)
    topo = load("dgx-h100x2")
    result = synthesize(topo, "allgather", hierarchical=True, size_bytes=1 << 20)
    assert result.composed is not None and result.num_sends > 100
    with pytest.raises(
        LimitError, match=r"allgather on dgx-h100x2 as an Algorithm: 240 sends.*XCCL_MAX_TREES_SENDS"
    ):
        result.algorithm  # noqa: B018
    timed = modeled(result, topo, 1 << 20)  # from the parts, with no Algorithm
    monkeypatch.undo()
    whole = synthesize(topo, "allgather", hierarchical=True, size_bytes=1 << 20).algorithm
    assert timed.time_us == pytest.approx(simulate(whole, topo, 1 << 20).time_us, rel=1e-9)


def test_a_composed_allgather_within_the_limit_gives_its_algorithm_and_time():
    """Under the limit the Algorithm is made from the verified arrays: the set-based verifier
    passes it, its name is the one the arrays were verified under, and modeled is the engine's."""
    from synth.cost import simulate
    from synth.timing import model_params
    from synth.trees.synthesis import modeled

    topo = load("dgx-h100x2")
    result = synthesize(topo, "allgather", hierarchical=True, size_bytes=1 << 20)
    algo = result.algorithm
    assert algo.num_sends == result.num_sends and algo.name == result.name
    assert _verdict(verify_reference.verify, algo, topo) == "verified"
    ideal = model_params("ideal")
    assert modeled(result, topo, 1 << 20, ideal) == simulate(algo, topo, 1 << 20, ideal)


def test_the_cli_refuses_to_write_a_composed_allgather_too_large_to_hold(xccl, tmp_path):
    """xccl synth trees writes an Algorithm: at 4096 GPUs it is refused at once, naming the limit
    and where the composed allgather can be had (the API, docs/trees.md)."""
    proc = xccl(
        "synth",
        "trees",
        "--hierarchical",
        "-t",
        "dgx-h100x512",
        "-C",
        "allgather",
        "-o",
        str(tmp_path / "ag.json"),
    )
    assert_one_line_error(proc, "as an Algorithm", "16773120 sends", "XCCL_MAX_TREES_SENDS", "docs/trees.md")


@pytest.mark.parametrize(("name", "root"), [("alltoall", None), ("allgather", None), ("gather", 2)])
def test_a_schedule_stopped_early_names_the_first_chunk_then_rank_missed(name, root):
    """Without its last steps, many chunks miss many ranks: both verifiers name the same pair."""
    topo = load("ring:5")
    algo = make_baseline("ring", topo, make_collective(name, 5, 2, root))
    for kept in range(1, len(algo.steps)):
        cut = replace(algo, steps=algo.steps[:kept])
        message = _verdict(cut.verify, topo)
        assert "postcondition: rank" in message
        assert message == _verdict(verify_reference.verify, cut, topo)
