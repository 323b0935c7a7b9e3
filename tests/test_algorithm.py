"""The Algorithm: JSON, verification (and its rejections, each naming the step)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

import topologies as T
from synth.algorithm import Algorithm, Send, Step
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.errors import AlgorithmFormatError, VerificationError


@pytest.fixture
def ring_ag():
    topo = T.ring(4)
    return topo, make_baseline("ring", topo, make_collective("allgather", 4))


def _drop(algo, step, index):
    steps = list(algo.steps)
    sends = list(steps[step].sends)
    del sends[index]
    steps[step] = replace(steps[step], sends=tuple(sends))
    return replace(algo, steps=tuple(steps))


def test_json_round_trip(tmp_path, ring_ag):
    _, algo = ring_ag
    path = algo.save(tmp_path / f"{algo.file_stem}.json")
    again = Algorithm.load(path)
    assert again == algo
    assert again.to_json() == algo.to_json()
    assert algo.rounds_per_chunk == Fraction(3, 1)


def test_start_times_survive_json(tmp_path):
    topo = T.ring(2)
    algo = Algorithm(
        make_collective("allgather", 2),
        topo.name,
        (Step(1, (Send(0, 0, 1, start_us=0.0), Send(1, 1, 0, start_us=1.5))),),
    )
    algo.verify(topo)
    again = Algorithm.from_dict(algo.to_dict())
    assert [s.start_us for s in again.steps[0].sends] == [0.0, 1.5]


def _one_step_doc(sends: list) -> dict:
    return {
        "format": "xccl-algorithm/1",
        "collective": {"name": "allgather", "ranks": 4, "chunks_per_rank": 1},
        "topology": "ring:4",
        "schedule": [{"rounds": 1, "sends": sends}],
    }


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([1, 1, 2, "move"], r"sends\[3\]: expected \[chunk, src, dst"),
        ([1, 1, 2], r"sends\[3\]: expected \[chunk, src, dst"),
        ((1, 1, 2, "copy"), r"sends\[3\]: expected \[chunk, src, dst"),
        ([1, -1, 2, "copy"], r"sends\[3\]\[1\]: expected an integer >= 0, got -1"),
        ([1, 1, True, "copy"], r"sends\[3\]\[2\]: expected an integer >= 0, got true"),
        ([1.0, 1, 2, "copy"], r"sends\[3\]\[0\]: expected an integer >= 0, got 1.0"),
        ([1, 1, 2, "copy", -0.5], r"sends\[3\]\[4\] \(start time\): expected a finite number"),
        ([1, 1, 2, "copy", float("inf")], r"sends\[3\]\[4\] \(start time\): .*got Infinity"),
        ([1, 1, 2, "copy", "0"], r"sends\[3\]\[4\] \(start time\): .*got \"0\""),
    ],
)
def test_a_bad_send_among_good_ones_is_named(bad, message):
    """A step's sends are read column by column; the first bad one is still named, as alone."""
    timed = len(bad) == 5
    good = [[0, 0, 1, "copy", 0.0] if timed else [0, 0, 1, "copy"] for _ in range(3)]
    with pytest.raises(AlgorithmFormatError, match=r"algo.json: schedule\[0\]\." + message):
        Algorithm.from_dict(_one_step_doc([*good, bad, good[0]]), where="algo.json")


def test_sends_read_in_bulk_are_those_read_one_by_one():
    sends = [[0, 0, 1, "copy", 1], [1, 1, 2, "copy", 2.5], [2, 3, 2, "copy", 0]]
    (step,) = Algorithm.from_dict(_one_step_doc(sends)).steps
    assert step.sends == (Send(0, 0, 1), Send(1, 1, 2), Send(2, 3, 2))
    assert [type(s.start_us) for s in step.sends] == [float] * 3  # as the reader gives them
    assert [s.start_us for s in step.sends] == [1.0, 2.5, 0.0]
    mixed = Algorithm.from_dict(_one_step_doc([[0, 0, 1, "copy"], [1, 1, 2, "copy", 2.5]])).steps[0]
    assert [s.start_us for s in mixed.sends] == [None, 2.5]


def test_dropped_send_breaks_the_postcondition(ring_ag):
    topo, algo = ring_ag
    with pytest.raises(VerificationError, match=r"postcondition: rank .* never gets chunk"):
        _drop(algo, 2, 0).verify(topo)


def test_dropped_relay_makes_a_later_send_premature(ring_ag):
    topo, algo = ring_ag
    with pytest.raises(VerificationError, match=r"step 1: send of chunk \d+ .* does not hold chunk"):
        _drop(algo, 0, 0).verify(topo)


def test_send_before_its_chunk_arrives_names_the_step(ring_ag):
    topo, algo = ring_ag
    swapped = replace(algo, steps=(algo.steps[1], algo.steps[0], *algo.steps[2:]))
    with pytest.raises(VerificationError, match=r"step 0: .*does not hold chunk"):
        swapped.verify(topo)


def test_send_on_a_missing_link_names_the_step(ring_ag):
    topo, algo = ring_ag
    bad = replace(
        algo, steps=(*algo.steps[:2], Step(1, (*algo.steps[2].sends, Send(0, 0, 2))), *algo.steps[3:])
    )
    with pytest.raises(VerificationError, match=r"step 2: .*no link 0 -> 2"):
        bad.verify(topo)


def test_over_capacity_step_names_the_step_and_resource():
    topo = T.switch(4)
    coll = make_collective("allgather", 4)
    sends = tuple(Send(r, r, d) for r in range(4) for d in range(4) if d != r)
    with pytest.raises(VerificationError, match=r"step 0: 3 chunks over .* exceed its capacity 1 x 1"):
        Algorithm(coll, topo.name, (Step(1, sends),)).verify(topo)
    Algorithm(coll, topo.name, (Step(3, sends),)).verify(topo)


def test_double_reduction_is_rejected():
    topo = T.ring(3)
    coll = make_collective("allreduce", 3, 1)
    steps = (
        Step(1, (Send(0, 0, 1, "reduce"),)),
        Step(1, (Send(0, 1, 2, "reduce"),)),
        Step(1, (Send(0, 2, 0, "reduce"),)),  # rank 0's contribution comes back: counted twice
    )
    with pytest.raises(VerificationError, match=r"step 2: reduce of chunk 0 .* twice"):
        Algorithm(coll, topo.name, steps).verify(topo)


def test_copy_that_discards_contributions_is_rejected():
    topo = T.ring(3)
    coll = make_collective("allreduce", 3, 1)
    steps = (Step(1, (Send(0, 0, 1, "copy"),)),)
    with pytest.raises(VerificationError, match=r"step 0: copy of chunk 0 .* discard"):
        Algorithm(coll, topo.name, steps).verify(topo)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"format": "other"}, "format"),
        (
            {
                "format": "xccl-algorithm/1",
                "collective": {"name": "allgather"},
                "topology": "x",
                "schedule": [],
            },
            "collective",
        ),
        (
            {
                "format": "xccl-algorithm/1",
                "collective": {"name": "allgather", "ranks": 2, "chunks_per_rank": 1},
                "topology": "ring:2",
                "schedule": [{"rounds": 0, "sends": []}],
            },
            "schedule[0].rounds",
        ),
        (
            {
                "format": "xccl-algorithm/1",
                "collective": {"name": "allgather", "ranks": 2, "chunks_per_rank": 1},
                "topology": "ring:2",
                "schedule": [{"rounds": 1, "sends": [[0, 0, 1, "move"]]}],
            },
            "schedule[0].sends[0]",
        ),
    ],
)
def test_malformed_algorithm_files(doc, field):
    with pytest.raises(AlgorithmFormatError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Algorithm.from_dict(doc, where="algo.json")
