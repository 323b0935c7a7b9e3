"""The chunk DSL: context, references, symbolic execution, check(), and the errors users meet."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import codegen.dsl
from codegen.dsl import ChunkProgram, chunk, current_program
from codegen.errors import DslError
from codegen.ir import Buffer
from synth.collectives import make_collective


def test_module_doctest():
    assert doctest.testmod(codegen.dsl).failed == 0


def test_with_block_sets_the_current_program_and_restores_it():
    with ChunkProgram("outer", "ring:4", "allgather") as outer:
        assert current_program() is outer
        with ChunkProgram("inner", "ring:4", "allgather") as inner:
            assert current_program() is inner
        assert current_program() is outer
    with pytest.raises(DslError, match="no program in context"):
        chunk(0, "input", 0)


def test_every_call_can_take_the_program_explicitly():
    prog = ChunkProgram("explicit", "ring:4", "allgather")
    ref = chunk(0, "input", 0, program=prog)
    assert ref.program is prog and prog.chunk(0, Buffer.INPUT, 0) == ref


def _ring_allgather(prog: ChunkProgram, skip_last: bool = False) -> None:
    n = prog.num_ranks
    for r in range(n):
        c = prog.chunk(r, "input", 0).copy(r, "output", r)
        for step in range(n - 1):
            if skip_last and r == 0 and step == n - 2:
                break
            c = c.copy((r + step + 1) % n, "output", r)


def test_check_is_empty_for_a_correct_program_and_lists_every_wrong_slot():
    good = ChunkProgram("ag", "ring:4", "allgather")
    _ring_allgather(good)
    assert good.check() == ()
    bad = ChunkProgram("ag", "ring:4", "allgather")
    _ring_allgather(bad, skip_last=True)
    wrong = bad.check()
    assert [(w.rank, w.index) for w in wrong] == [(3, 0)]
    assert "expected chunk 0 (from rank 0), got nothing" in str(wrong[0])
    with pytest.raises(DslError, match="1 wrong output slot"):
        bad.verify()


def test_check_reports_a_partial_or_double_counted_reduction():
    prog = ChunkProgram("ar", "fully-connected:3", "allreduce", inplace=True)
    a = prog.chunk(0, "input", 0)
    a.reduce(prog.chunk(1, "input", 0))
    a.reduce(prog.chunk(1, "input", 0))  # rank 1 counted twice, rank 2 never
    wrong = {(w.rank, w.index): w for w in prog.check()}
    assert "reduced over ranks 0+1+1" in wrong[(0, 0)].got
    assert set(wrong) == {(0, 0), (1, 0), (2, 0)}


def test_inplace_programs_see_the_input_inside_the_output():
    prog = ChunkProgram("ag", "ring:4", "allgather", inplace=True)
    # rank 2's input[0] is its output[2]: nothing to copy locally
    for r in range(4):
        c = prog.chunk(r, "output", r)
        for step in range(3):
            c = c.copy((r + step + 1) % 4, "output", r)
    assert prog.check() == ()
    assert prog.num_ops == 12


def test_copy_to_the_same_physical_slot_records_nothing():
    prog = ChunkProgram("ag", "ring:4", "allgather", inplace=True)
    dst = prog.chunk(1, "input", 0).copy(1, "output", 1)
    assert prog.num_ops == 0 and (dst.buffer, dst.index) == ("output", 1)


def test_copy_slot_records_what_a_reference_copy_records():
    """The lowering's copies between named slots trace as the same copies by reference do."""
    by_ref, by_slot = ChunkProgram("ag", "ring:4", "allgather"), ChunkProgram("ag", "ring:4", "allgather")
    for r in range(4):
        c = by_ref.chunk(r, "input", 0).copy(r, "output", r, time=(0.0, 0.0))
        s = by_slot.copy_slot((r, "input", 0), r, "output", r, (0.0, 0.0))
        for step in range(3):
            c = c.copy((r + step + 1) % 4, "output", r, time=(step, step + 1.0))
            s = by_slot.copy_slot(s, (r + step + 1) % 4, "output", r, (step, step + 1.0))
        c, s = c.copy(c.rank, "scratch", r), by_slot.copy_slot(s, s[0], "scratch", r)
        assert s == (c.rank, c.buffer, c.index)
    assert by_slot.check() == by_ref.check() == () and by_slot.chunk_dag() == by_ref.chunk_dag()
    with pytest.raises(DslError, match="has no link 0 -> 2"):
        by_slot.copy_slot((0, "input", 0), 2, "output", 0)
    with pytest.raises(DslError, match=re.escape("copy source rank 1 scratch[3] holds no data")):
        by_slot.copy_slot((1, "scratch", 3), 2, "output", 1)
    with pytest.raises(DslError, match="the input of an out-of-place call is read-only"):
        by_slot.copy_slot((0, "input", 0), 1, "input", 0)
    in_place = ChunkProgram("ag", "ring:4", "allgather", inplace=True)
    assert in_place.copy_slot((1, "input", 0), 1, "output", 1) == (1, "output", 1) and in_place.num_ops == 0


def test_copy_slots_records_what_copy_slot_records_and_raises_its_errors():
    """The lowering's copies of one step, recorded in one call, trace and fail as one by one."""
    one, bulk = ChunkProgram("ag", "ring:4", "allgather"), ChunkProgram("ag", "ring:4", "allgather")
    moves = [((r, "input", 0), r, "output", r, (0.0, 0.0)) for r in range(4)]
    moves += [((r, "output", r), (r + 1) % 4, "scratch", 0, (1.0, 2.0)) for r in range(4)]
    moves += [(((r + 1) % 4, "scratch", 0), (r + 2) % 4, "output", r, (2, 3)) for r in range(4)]
    moves += [((1, "output", 1), 1, "output", 1, None)]  # onto itself: nothing recorded
    assert bulk.copy_slots(moves) == [one.copy_slot(*m) for m in moves]
    assert bulk.num_ops == one.num_ops == 12 and bulk.chunk_dag() == one.chunk_dag()
    wrong = [
        (((0, "input", 0), 2, "output", 0, None), "has no link 0 -> 2"),
        (((1, "scratch", 3), 2, "output", 1, None), re.escape("copy source rank 1 scratch[3] holds no data")),
        (((0, "input", 0), 1, "input", 0, None), "the input of an out-of-place call is read-only"),
        (((0, "input", 0), 1, "output", 0, (2.0, 1.0)), re.escape("0 <= start <= arrival, got (2.0, 1.0)")),
    ]
    for move, message in wrong:
        with pytest.raises(DslError, match=message):
            bulk.copy_slots([((0, "input", 0), 1, "scratch", 5, None), move])
        with pytest.raises(DslError, match=message):
            one.copy_slot(*move)
    in_place = ChunkProgram("ag", "ring:4", "allgather", inplace=True)
    assert in_place.copy_slots([((1, "input", 0), 1, "output", 1, None)]) == [(1, "output", 1)]


def test_reduce_slot_records_what_a_reference_reduce_records():
    by_ref, by_slot = (ChunkProgram("ar", "fully-connected:4", "allreduce") for _ in range(2))
    mine = by_ref.chunk(0, "input", 0)
    out = mine.reduce(by_ref.chunk(1, "input", 0), dst=by_ref.chunk(0, "output", 0), time=(0.0, 1.0))
    out.reduce(by_ref.chunk(2, "input", 0))
    slot = by_slot.reduce_slot((1, "input", 0), (0, "input", 0), (0, "output", 0), (0.0, 1.0))
    assert by_slot.reduce_slot((2, "input", 0), slot) == (0, "output", 0) == (out.rank, out.buffer, out.index)
    assert by_slot.check() == by_ref.check() and by_slot.chunk_dag() == by_ref.chunk_dag()
    with pytest.raises(DslError, match=re.escape("reduce source rank 1 scratch[0] holds no data")):
        by_slot.reduce_slot((1, "scratch", 0), (0, "output", 0))


def test_named_scratch_slices_are_packed_in_creation_order():
    prog = ChunkProgram("a2a", "fully-connected:3", "alltoall")
    prog.chunk(0, "input", 1).copy(0, "tmp", 0)
    prog.chunk(0, "input", 2).copy(0, "tmp")  # no index: appended
    prog.chunk(0, "input", 0).copy(0, "other", 0)
    dag = prog.chunk_dag()
    assert dag.info.scratch_chunks == (3, 0, 0)
    assert [(op.dst.buffer, op.dst.index) for op in dag.ops] == [
        (Buffer.SCRATCH, 0),
        (Buffer.SCRATCH, 1),
        (Buffer.SCRATCH, 2),
    ]


def test_reduce_into_another_slot_reads_self_and_writes_dst():
    prog = ChunkProgram("ar", "fully-connected:2", "allreduce")
    for r in range(2):
        mine = prog.chunk(r, "input", 0)
        mine.reduce(prog.chunk(1 - r, "input", 0), dst=prog.chunk(r, "output", 0))
    assert prog.check() == ()


def test_split_group_and_sizes():
    prog = ChunkProgram("ag", "fully-connected:2", "allgather", chunks_per_rank=4)
    ref = prog.chunk(0, "input", 0, size=4)
    halves = ref.split(2)
    assert [(h.index, h.size) for h in halves] == [(0, 2), (2, 2)]
    assert halves[0].group(halves[1]) == ref
    assert len(list(ref)) == 4
    with pytest.raises(DslError, match="do not split"):
        ref.split(3)
    with pytest.raises(DslError, match="not contiguous"):
        prog.chunk(0, "input", 0).group(prog.chunk(0, "input", 3))


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda p: p.chunk(9, "input", 0), "expected a rank in 0..3"),
        (lambda p: p.chunk(0, "input", 1), "outside the buffer of 1 chunks"),
        (lambda p: p.chunk(0, 7, 0), "buffer: expected input, output, scratch"),
        (lambda p: p.chunk(0, "input", 0).copy(2, "output", 0), "ring:4 has no link 0 -> 2"),
        (lambda p: p.chunk(0, "tmp", 0).copy(1, "output", 0), "rank 0 tmp[0] holds no data"),
        (
            lambda p: p.chunk(0, "input", 0).copy(1, "output", 0, channel=-1),
            "channel: expected an integer >= 0",
        ),
        (lambda p: p.chunk(0, "input", 0).copy(1, "output", 4), "outside the buffer"),
        (lambda p: p.chunk(0, "input", 0).copy(1, "output", 0, sendtb=True), "sendtb: expected an integer >= 0"),
        *(
            (lambda p, t=t: p.chunk(0, "input", 0).copy(1, "output", 0, time=t), "time: expected (start, arrival)")
            for t in [(2.0, 1.0), (-1, 0), (True, 1), (0, float("nan")), (0,), [0, 1], (0, "1")]
        ),
    ],
)
def test_mistakes_raise_one_clear_dsl_error(action, message):
    prog = ChunkProgram("p", "ring:4", "allgather")
    with pytest.raises(DslError, match=re.escape(message)):
        action(prog)


def test_program_parameters_are_validated():
    with pytest.raises(DslError, match="protocol"):
        ChunkProgram("p", "ring:4", "allgather", protocol="LL64")
    with pytest.raises(DslError, match="instances"):
        ChunkProgram("p", "ring:4", "allgather", instances=0)
    with pytest.raises(DslError, match="has 4 ranks, the collective 5"):
        ChunkProgram("p", "ring:4", make_collective("allgather", 5))
    with pytest.raises(DslError, match="no in-place form"):
        ChunkProgram("p", "ring:4", "alltoall", inplace=True)


def test_without_a_topology_any_pair_may_talk():
    prog = ChunkProgram("p", None, make_collective("allgather", 3))
    prog.chunk(0, "input", 0).copy(2, "output", 0)
    assert prog.num_ops == 1


def test_the_example_in_the_docs_runs():
    text = (Path(__file__).parent.parent / "docs" / "dsl.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(code, "docs/dsl.md", "exec"), scope)
    assert scope["prog"].check() == ()


def test_out_of_place_programs_may_not_write_their_input():
    prog = ChunkProgram("p", "ring:4", "allreduce")
    with pytest.raises(DslError, match="read-only"):
        prog.chunk(0, "input", 0).reduce(prog.chunk(1, "input", 0))
    inplace = ChunkProgram("q", "ring:4", "allreduce", inplace=True)
    inplace.chunk(0, "input", 0).reduce(inplace.chunk(1, "input", 0))
    assert inplace.num_ops == 1
