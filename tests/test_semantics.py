"""codegen.semantics: what an IR computes, against its collective's postcondition."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from executor_suite import baseline_cases
from ir_edit import edit_op
from ir_interpreter import ExecutionError, execute

from codegen.check import find_problems
from codegen.compiler import compile_algorithm, compile_program
from codegen.errors import IRCheckError
from codegen.examples import allpairs_allreduce, ring_allreduce
from codegen.ir import IR, Buffer, Op, OpType, Ref
from codegen.semantics import _Layout, check_result, find_wrong_result
from synth.baselines import make_baseline
from synth.collectives import COLLECTIVES, ROOTED, make_collective
from topologies import load


def _ir_for(name: str, n: int, c: int) -> IR:
    coll = make_collective(name, n, c, 1 if name in ROOTED else None)
    return IR("x", name, n, coll.size_chunks, (), root=coll.root)


@pytest.mark.parametrize("name", COLLECTIVES)
@pytest.mark.parametrize(("n", "c"), [(3, 2), (4, 3)])
def test_one_chunk_per_rank_scaled_is_the_full_collective(name, n, c):
    """The layout rests on chunk x of the one-chunk collective standing for chunks x*c..x*c+c-1."""
    full = make_collective(name, n, c, 1 if name in ROOTED else None)
    layout = _Layout(_ir_for(name, n, c), make_collective(name, n, 1, full.root))
    assert (layout.inputs, layout.outputs) == (full.input_chunks, full.output_chunks)
    for r in range(n):
        found = full.inplace_alias(r)
        assert layout.alias(r) == (None if found is None else (Buffer(found[0][0]), found[1]))
        initial, expected = layout.initial(r), layout.expected(r)
        assert (len(initial), len(expected)) == (full.input_chunks, full.output_chunks)
        for j, cid in enumerate(full.inputs[r]):
            got = initial[j]
            if cid is None:
                assert isinstance(got, str)
            elif full.combining:  # (address, the contributing rank's bit)
                address, bit = got
                assert address == full.chunks[cid].address
                members = sorted(full.contributions[address])
                assert [min(full.chunks[m].pre) for m in members][bit.bit_length() - 1] == r
            else:
                assert got == cid
        for j, address in enumerate(full.outputs[r]):
            want = expected[j]
            if address is None:
                assert want is None
            elif full.combining:
                assert want == (address, (1 << len(full.contributions[address])) - 1)
            else:
                assert want == address


def test_a_redirected_receive_names_rank_buffer_and_chunk():
    ir = compile_program(ring_allreduce.program(4))
    assert find_wrong_result(ir) is None
    tb = ir.gpu(0).threadblock(0)
    last = len(tb.ops) - 1
    assert tb.ops[last].type is OpType.RECV
    wrong = edit_op(ir, 0, 0, last, dst=replace(tb.ops[last].dst, index=(tb.ops[last].dst.index + 1) % 4))
    assert find_problems(wrong) == []  # nothing static is wrong
    problem = find_wrong_result(wrong)
    assert problem.rank == 0 and "output chunk" in str(problem), problem
    with pytest.raises(IRCheckError, match="computes a wrong result: rank 0: output chunk"):
        check_result(wrong)


def test_a_contribution_counted_twice_can_never_be_right():
    """A later reduce into the same slot takes the operand an earlier one took (written before both)."""
    ir = compile_program(allpairs_allreduce.program(4))
    rank, tb, reduces = next(
        (g.rank, t, [k for k, op in enumerate(t.ops) if op.type is OpType.REDUCE])
        for g in ir.gpus
        for t in g.threadblocks
        if sum(op.type is OpType.REDUCE for op in t.ops) > 1
    )
    first, later = reduces[0], reduces[1]
    assert tb.ops[first].dst == tb.ops[later].dst
    twice = edit_op(ir, rank, tb.id, later, src=tb.ops[first].src)
    assert find_problems(twice) == []
    assert "a mix that can never be right" in str(find_wrong_result(twice))


def test_an_unwritten_scratch_slot_in_place_is_not_the_input():
    """In place, the input lies inside the output, not inside the scratch: a send of a scratch slot
    before anything wrote it sends garbage, though the slot's index is that of the input chunk."""
    ir = compile_program(allpairs_allreduce.program(4))
    assert (ir.inplace, ir.outofplace) == (True, False)
    tb = ir.gpu(0).threadblock(0)
    k, op = next(
        (k, op) for k, op in enumerate(tb.ops) if op.type is OpType.SEND and op.src.buffer is Buffer.INPUT
    )
    scratch = edit_op(ir, 0, tb.id, k, src=Ref(Buffer.SCRATCH, op.src.index))
    assert find_problems(scratch) == []
    with pytest.raises(ExecutionError, match="before anything wrote it"):
        execute(scratch, inplace=True, seed=None)
    assert "data nothing wrote" in str(find_wrong_result(scratch))


def test_every_call_the_ir_is_marked_for_is_checked():
    topo = load("ring:4")
    ir = compile_algorithm(make_baseline("ring", topo, make_collective("allgather", 4)), topo)
    assert (ir.inplace, ir.outofplace) == (False, True)
    tb = ir.gpu(0).threadblocks[0]  # first, overwrite our own output chunk with one nothing wrote yet
    scribble = Op(OpType.COPY, Ref(Buffer.OUTPUT, 1), Ref(Buffer.OUTPUT, 0))
    ir = replace(
        ir, gpus=(replace(ir.gpu(0), threadblocks=(replace(tb, ops=(scribble, *tb.ops)),)), *ir.gpus[1:])
    )
    assert find_wrong_result(ir) is None  # out of place, output chunk 0 is written again later
    problem = find_wrong_result(replace(ir, inplace=True))  # in place, it was the input, sent later
    assert "rank 0: output chunk 0 (in-place call)" in str(problem) and "data nothing wrote" in str(problem)


def test_custom_collectives_and_missing_roots():
    ir = compile_program(ring_allreduce.program(4))
    assert find_wrong_result(replace(ir, collective="custom")) is None
    assert "without a root" in str(find_wrong_result(replace(ir, collective="broadcast", root=None)))


def test_the_slot_limit_comes_first(monkeypatch):
    ir = compile_program(ring_allreduce.program(4))
    monkeypatch.setenv("XCCL_MAX_SLOTS", "15")
    with pytest.raises(IRCheckError, match=r"16 buffer chunks over all ranks, more than .* XCCL_MAX_SLOTS"):
        find_wrong_result(ir)


def test_it_agrees_with_the_test_interpreter_on_broken_schedules():
    """Random one-operand edits of compiled baselines (in place and out of place) that keep the IR
    statically sound: the library and the tests' independent interpreter give the same verdict."""
    rng = random.Random(7)
    small = [c for c in baseline_cases() if c.topology in ("ring:4", "fully-connected:4", "star:5")]
    verdicts = set()
    for case in rng.sample(small, 12):
        ir = case.compile()
        for _ in range(6):
            g = rng.choice(ir.gpus)
            tb = rng.choice(g.threadblocks)
            k = rng.randrange(len(tb.ops))
            op = tb.ops[k]
            field = "dst" if op.dst is not None else "src"
            ref = getattr(op, field)
            if ref is None:
                continue
            broken = edit_op(ir, g.rank, tb.id, k, **{field: replace(ref, index=rng.randrange(4))})
            if find_problems(broken, final=False):
                continue
            ours = find_wrong_result(broken) is not None
            try:
                execute(broken, inplace=case.inplace, seed=None)
                theirs = False
            except ExecutionError:
                theirs = True
            assert ours == theirs, (case.name, g.rank, tb.id, k, find_wrong_result(broken))
            verdicts.add(ours)
    assert verdicts == {True, False}
