"""The pieces of the SMT synthesizer: formula text, model dump, symmetries, cuts, speed switches."""

from __future__ import annotations

from fractions import Fraction

import pytest
import z3

from synth.collectives import make_collective
from synth.reductions import refine
from synth.reductions.symmetry import chunk_map, problem_symmetry
from synth.smt import IDEAS, SmtOptions, Synthesizer, build_model
from synth.smt.cuts import find_cuts
from synth.smt.formula import Formula
from synth.smt.pareto import prune_dominated
from synth.smt.witness import shortest_path_schedule
from topologies import load


def solve_text(text: str, extra: str = "") -> z3.CheckSatResult:
    solver = z3.SolverFor("QF_FD")
    solver.from_string(text.replace("(check-sat)", "") + extra)
    return solver.check()


def test_formula_folds_constants_and_parses():
    f = Formula()
    a, b, c = f.var("a"), f.var("b"), f.var("c")
    f.clause(["false", a])
    f.at_most([a, b, c, "true"], 1)  # a is forced, so b and c are not
    f.pb_ge([(2, b), (1, c), (5, "false")], 1)
    f.clause([b, "true"])  # dropped: always satisfied
    assert "true" not in f.smt2() and "false" not in f.smt2()
    assert solve_text(f.smt2()) == z3.unsat  # a forced, then at most 0 of b, c, but b or c needed


def test_build_model_dumps_a_self_contained_smt_lib_script():
    topo = load("ring:4")
    model = build_model(topo, make_collective("allgather", 4, 1), 2)
    text = model.smt2()
    assert text.startswith("; xccl-synth SMT model") and text.rstrip().endswith("(check-sat)")
    assert solve_text(text) == z3.sat
    one = build_model(topo, make_collective("allgather", 4, 1), 1).smt2()
    assert solve_text(one) == z3.unsat
    rs = build_model(topo, make_collective("reducescatter", 4, 1), 2).smt2()  # the dual, reversed
    assert solve_text(rs) == z3.sat
    ar = build_model(topo, make_collective("allreduce", 4, 1), 2).smt2()
    assert solve_text(ar) == z3.sat


def test_chunk_maps_follow_the_collective():
    dgx1 = load("dgx1")
    sym = problem_symmetry(dgx1, make_collective("allgather", 8, 3))
    assert len(sym.perms) == 3  # DGX-1 has 4 automorphisms, identity excluded
    for perm, image in zip(sym.perms, sym.chunk_maps, strict=True):
        assert all(image[r * 3 + i] == perm[r] * 3 + i for r in range(8) for i in range(3))
    a2a = make_collective("alltoall", 8, 2)
    perm = sym.perms[0]
    image = chunk_map(a2a, perm)
    for s, d, i in ((s, d, i) for s in range(8) for d in range(8) for i in range(2)):
        assert image[(s * 8 + d) * 2 + i] == (perm[s] * 8 + perm[d]) * 2 + i
    # a broadcast from rank 0 maps onto itself only where 0 stays put: not on DGX-1
    assert problem_symmetry(dgx1, make_collective("broadcast", 8, 1)).trivial
    ring = load("ring:6")
    kept = problem_symmetry(ring, make_collective("broadcast", 6, 1, 0)).perms
    assert kept and all(p[0] == 0 for p in kept)


def test_symmetric_restriction_falls_back_when_it_is_what_fails():
    """On a 4-ring no allgather in 2 steps is invariant under the reflections, but one exists."""
    topo = load("ring:4")
    out = Synthesizer(topo, "allgather").solve(2, 2, 1)
    assert out.word == "sat"
    assert dict(out.algorithm.provenance.params)["symmetric"] is False
    dgx1 = load("dgx1")
    out = Synthesizer(dgx1, "allgather").solve(2, 3, 2)  # DGX-1 has a symmetric one
    assert dict(out.algorithm.provenance.params)["symmetric"] is True
    out.algorithm.verify(dgx1)


def test_zero_slack_cuts_are_the_ones_the_bound_comes_from():
    dgx1 = load("dgx1")
    cuts = find_cuts(dgx1.chunk_capacity(), make_collective("allgather", 8, 6))
    tight = {c.ranks for c in cuts if c.slack(7) == 0}
    assert tight == {frozenset({r}) for r in range(8)}  # every rank's in-links, full in every round
    cuts = find_cuts(dgx1.chunk_capacity(), make_collective("alltoall", 8, 3))
    tight = {c.ranks for c in cuts if c.slack(8) == 0}
    assert tight == {frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})}  # the two sockets
    assert all(c.slack(7) < 0 for c in cuts if c.ranks in tight)  # fewer rounds: impossible


CASES = [
    ("ring:5", "allgather", 1, 1, 1, "unsat"),
    ("ring:5", "allgather", 2, 2, 1, "sat"),
    ("dgx1", "allgather", 2, 3, 2, "sat"),
    ("dgx1", "allgather", 2, 4, 3, "unsat"),
    ("dgx1", "alltoall", 2, 2, 1, "unsat"),
    ("line:4", "scatter", 3, 4, 1, "sat"),
]


@pytest.mark.parametrize("off", ["", *IDEAS])
def test_every_speed_idea_keeps_the_answers(off):
    """Switching any idea off changes the time, never the answer."""
    options = SmtOptions().without(off) if off else SmtOptions()
    synths = {}
    for topo_name, name, steps, rounds, chunks, expected in CASES:
        key = (topo_name, name)
        if key not in synths:
            synths[key] = Synthesizer(load(topo_name), name, options=options)
        out = synths[key].solve(steps, rounds, chunks)
        assert out.word == expected, (off, topo_name, name, steps, rounds, chunks)
        if out.algorithm is not None:
            out.algorithm.verify(load(topo_name))


@pytest.mark.parametrize("topo_name", ["dgx1", "ring:6", "line:4", "star:5", "switch:4"])
@pytest.mark.parametrize(
    "name", ["allgather", "alltoall", "reducescatter", "allreduce", "broadcast", "scatter"]
)
def test_shortest_path_schedules_are_verified_witnesses(topo_name, name):
    topo = load(topo_name)
    coll = make_collective(name, topo.num_ranks, 2)
    one_round = shortest_path_schedule(topo, coll, single_round_steps=True)
    assert all(step.rounds == 1 for step in one_round.steps)
    fewest = shortest_path_schedule(topo, coll, single_round_steps=False)
    if name not in ("allreduce",):
        from synth.bounds import steps_lower_bound

        assert fewest.num_steps == steps_lower_bound(topo, coll)


def test_refine_and_prune():
    topo = load("dgx1")
    algo = Synthesizer(topo, "allgather").solve(2, 3, 2).algorithm
    finer = refine(algo, 3)
    finer.verify(topo)
    assert (finer.num_steps, finer.rounds, finer.chunks) == (2, 9, 6)
    assert finer.rounds_per_chunk == algo.rounds_per_chunk == Fraction(3, 2)
    coarse = Synthesizer(topo, "allgather").solve(2, 2, 1).algorithm
    assert prune_dominated([coarse, algo, finer]) == (algo,)
