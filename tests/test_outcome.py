"""One Outcome and one Status for every solver front end: z3's, HiGHS's and CBC's answers mapped to
the same four statuses; what the SMT commands print (sat/unsat/unknown) comes from them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sketches import Sketch, restrict
from synth.algorithm import Algorithm
from synth.collectives import make_collective
from synth.milp import Options, synthesize
from synth.milp.pipeline import run_stages
from synth.milp.solvers import Backend, Solution, Status, get_backend
from synth.outcome import SMT_WORDS, WORDS, Outcome, Question
from synth.outcome import Status as OneStatus
from synth.smt import solve_instance
from topologies import load


def test_the_solver_back_ends_use_the_one_status():
    assert Status is OneStatus


@pytest.mark.parametrize(
    ("steps", "time_limit_s", "status", "word"),
    [
        (2, None, Status.FEASIBLE, "sat"),
        (1, None, Status.INFEASIBLE, "unsat"),
        (5, 1e-9, Status.UNKNOWN, "unknown"),
    ],
)
def test_smt_answers_in_the_one_status_printed_as_sat_words(steps, time_limit_s, status, word):
    out = solve_instance(load("ring:4"), make_collective("allgather", 4), steps, time_limit_s=time_limit_s)
    assert out.status is status and out.word == word
    assert (out.algorithm is not None) == status.has_solution
    assert out.summary().startswith(f"{word} (")


def test_every_status_has_a_word_in_every_vocabulary():
    for words in (WORDS, SMT_WORDS):
        assert all(words[s] for s in Status)
    assert [WORDS[s] for s in Status] == ["optimal", "feasible", "infeasible", "unknown"]


def test_an_infeasible_outcome_says_what_was_proven():
    out = Outcome(
        Status.INFEASIBLE, Question("allreduce", 2, 2, 4), 0.5, scope="among compositions", words=SMT_WORDS
    )
    assert out.message() == "unsat: no allreduce algorithm with S=2 R=2 C=4 among compositions"


def test_milp_synthesis_answers_an_outcome_optimal_only_when_every_stage_was():
    out = synthesize(load("ring:4"), "allgather", Sketch("ring"), size_bytes=1 << 20)
    assert out.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert (out.status is Status.OPTIMAL) == out.algorithm.provenance.optimal
    assert out.makespan_us > 0 and out.chunkup >= 1 and out.reports


class _NoBound(Backend):
    """HiGHS, except that the routing MILP answers its MIP start with no finite bound (what a
    solver stopped before its first bound reports)."""

    name = "no-bound"

    def available(self) -> bool:
        return True

    def solve(self, model, time_limit_s, threads=1):
        if model.is_mip and model.start is not None:
            objective = float(model.col_cost @ model.start)
            return Solution(Status.FEASIBLE, objective, -math.inf, np.array(model.start), solver=self.name)
        return get_backend("highs").solve(model, time_limit_s, threads)


def test_a_routing_without_a_finite_bound_has_no_gap_and_its_file_is_json():
    """The gap was infinite: "gap inf%" in the log and Infinity in the algorithm file, which is
    not JSON (the tool could not read back what it wrote)."""
    r = restrict(Sketch("plain"), load("ring:4"))
    lines: list[str] = []
    out = run_stages(r, "allgather", 1 << 20, None, _NoBound(), Options(), lines.append)
    assert not any("inf" in line for line in lines)
    assert "routing_gap" not in dict(out.algorithm.provenance.params)
    doc = json.loads(out.algorithm.to_json(), parse_constant=lambda c: pytest.fail(f"{c} in the file"))
    assert Algorithm.from_dict(doc).name == out.algorithm.name
