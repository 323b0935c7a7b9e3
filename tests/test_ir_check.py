"""The static checker rejects every broken case with a message naming rank, threadblock and step."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from codegen.check import check_ir, find_problems
from codegen.compiler import compile_program
from codegen.errors import IRCheckError
from codegen.examples import allpairs_allreduce, ring_allreduce
from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock

WHERE = re.compile(r"rank \d+, threadblock \d+, step \d+: ")


def _edit(ir: IR, rank: int, tb: int, **changes) -> IR:
    gpu = ir.gpu(rank)
    tbs = tuple(replace(t, **changes) if t.id == tb else t for t in gpu.threadblocks)
    return replace(ir, gpus=tuple(replace(g, threadblocks=tbs) if g.rank == rank else g for g in ir.gpus))


def _edit_op(ir: IR, rank: int, tb: int, step: int, **changes) -> IR:
    ops = list(ir.gpu(rank).threadblock(tb).ops)
    ops[step] = replace(ops[step], **changes)
    return _edit(ir, rank, tb, ops=tuple(ops))


@pytest.fixture(scope="module")
def ring() -> IR:
    return compile_program(ring_allreduce.program(4))


@pytest.fixture(scope="module")
def allpairs() -> IR:
    return compile_program(allpairs_allreduce.program(4))


def test_compiled_programs_pass(ring, allpairs):
    for ir in (ring, allpairs):
        for dialect in (None, "azure", "msccl"):
            assert find_problems(ir, dialect) == []


def _only(ir: IR, dialect=None) -> str:
    with pytest.raises(IRCheckError) as info:
        check_ir(ir, dialect)
    message = str(info.value)
    assert WHERE.search(message), message
    return message


def test_mismatched_counts_on_a_connection(ring):
    broken = _edit_op(ring, 0, 0, 0, count=2)  # rank 0 sends 2 chunks where rank 1 takes 1
    message = _only(broken)
    assert "rank 0, threadblock 0, step 0: transfer 0 to rank 1 on channel 0 sends cnt=2" in message
    assert "rank 1 threadblock 0 step 1 receives cnt=1" in message


def test_a_transfer_nobody_receives(ring):
    ops = ring.gpu(0).threadblock(0).ops
    broken = _edit(ring, 0, 0, ops=(*ops, Op(OpType.SEND, Ref(Buffer.INPUT, 0))))
    assert (
        "rank 0, threadblock 0, step 7: sends 7 transfers to rank 1 on channel 0, rank 1 threadblock 0 receives 6"
        in _only(broken)
    )


def test_a_dependency_cycle(allpairs):
    gpu = allpairs.gpu(0)
    a, b = gpu.threadblocks[0], gpu.threadblocks[1]
    broken = _edit_op(allpairs, 0, a.id, 0, deps=(Dep(b.id, len(b.ops) - 1),), has_dep=True)
    broken = _edit_op(broken, 0, b.id, len(b.ops) - 1, deps=(Dep(a.id, 0),), has_dep=True)
    message = _only(broken)
    assert "deadlock: a cycle of" in message and "dependencies and connection order" in message


def test_a_cycle_through_connection_order_alone(ring):
    """Rank 1 receives before it sends, and so does everyone: the ring waits forever."""
    broken = ring
    for rank in range(4):
        ops = ring.gpu(rank).threadblock(0).ops
        broken = _edit(broken, rank, 0, ops=(*ops[1:2], ops[0], *ops[2:]))
    assert "deadlock" in _only(broken)


def _exchange(ops: tuple[Op, ...], protocol: str, split: bool = False) -> IR:
    """Two ranks running the same ops against each other; ``split`` puts the receives in a
    threadblock of their own."""
    sends = tuple(op for op in ops if op.type.sends)
    recvs = tuple(op for op in ops if op.type.receives)
    gpus = []
    for rank in (0, 1):
        peer = 1 - rank
        if split:
            tbs = (Threadblock(0, peer, None, 0, sends), Threadblock(1, None, peer, 0, recvs))
        else:
            tbs = (Threadblock(0, peer, peer, 0, ops),)
        gpus.append(Gpu(rank, 4, 4, 0, tbs))
    return IR("exchange", "custom", 2, 4, tuple(gpus), protocol=protocol)


@pytest.mark.parametrize(
    "ops",
    [
        (Op(OpType.SEND, Ref(Buffer.INPUT, 0), count=3), Op(OpType.RECV, dst=Ref(Buffer.OUTPUT, 0), count=3)),
        (
            *(Op(OpType.SEND, Ref(Buffer.INPUT, k)) for k in range(3)),
            *(Op(OpType.RECV, dst=Ref(Buffer.OUTPUT, k)) for k in range(3)),
        ),
    ],
    ids=["one-step-of-3-chunks", "three-steps"],
)
def test_a_deadlock_of_the_bounded_fifos(ops):
    """Both ranks send 3 calls (at large sizes, one per chunk) before they receive: Simple's FIFO
    holds 2, so both wait for room forever; LL's holds 8, and receiving in a threadblock of its
    own drains the FIFO whatever the protocol."""
    message = _only(_exchange(ops, "Simple"))
    assert "deadlock: a cycle of" in message and "once connections hold 2 calls" in message
    assert find_problems(_exchange(ops, "LL")) == []
    assert find_problems(_exchange(ops, "Simple", split=True)) == []


def test_two_threadblocks_on_one_channel_and_peer(allpairs):
    gpu = allpairs.gpu(0)
    first, second = [tb for tb in gpu.threadblocks if tb.send is not None][:2]
    broken = _edit(allpairs, 0, second.id, send=first.send)
    message = _only(broken)
    assert f"rank 0, threadblock {second.id}, step" in message
    assert f"sends to rank {first.send} on channel 0, as threadblock {first.id} does" in message


def test_an_offset_out_of_range(ring):
    broken = _edit_op(ring, 2, 0, 3, src=Ref(Buffer.INPUT, 4))
    assert "rank 2, threadblock 0, step 3: src i[4..4] is outside the buffer of 4 chunk(s)" in _only(broken)
    broken = _edit_op(ring, 2, 0, 3, src=Ref(Buffer.SCRATCH, 0))
    assert "src s[0..0] is outside the buffer of 0 chunk(s)" in _only(broken)


def test_a_step_waited_for_without_hasdep(allpairs):
    rank, tb, step = next(
        (g.rank, t.id, k)
        for g in allpairs.gpus
        for t in g.threadblocks
        for k, op in enumerate(t.ops)
        if op.has_dep
    )
    broken = _edit_op(allpairs, rank, tb, step, has_dep=False)
    assert f"rank {rank}, threadblock {tb}, step {step}: threadblock" in _only(broken)
    assert find_problems(broken, final=False) == []


# -- dialect limits ------------------------------------------------------------------------------


def test_steps_per_threadblock(ring):
    ops = ring.gpu(1).threadblock(0).ops
    long = _edit(ring, 1, 0, ops=ops + (Op(OpType.NOP, count=0),) * 60)
    assert find_problems(long, "msccl") == []
    assert "67 steps: the azure runtime allows 64 per threadblock" in str(find_problems(long, "azure")[0])


def test_one_dependency_per_step_and_nops_followed_by_a_waiting_step(allpairs):
    rank, tb, step, dep = next(
        (g.rank, t.id, k, op.deps[0])
        for g in allpairs.gpus
        for t in g.threadblocks
        for k, op in enumerate(t.ops)
        if op.deps
    )
    other = next(t for t in allpairs.gpu(rank).threadblocks if t.id not in (tb, dep.tb))
    doubled = _edit_op(allpairs, rank, tb, step, deps=(dep, Dep(other.id, 0)))
    doubled = _edit_op(doubled, rank, other.id, 0, has_dep=True)
    assert find_problems(doubled) == []  # our IR allows it...
    assert any("2 dependencies" in str(p) for p in find_problems(doubled, "azure"))  # ...the runtimes do not
    ops = list(allpairs.gpu(rank).threadblock(tb).ops)
    nop = Op(OpType.NOP, count=0, deps=(dep,))
    shifted = _edit(allpairs, rank, tb, ops=(*ops[:step], nop, replace(ops[step], deps=()), *ops[step + 1 :]))
    problems = [str(p) for p in find_problems(shifted, "msccl")]
    assert any(f"step {step + 1}: follows nops with dependencies but has none" in p for p in problems), (
        problems
    )


def test_dependency_targets_fit_int8_and_collective_names():
    cpy = Op(OpType.COPY, Ref(Buffer.INPUT, 0), Ref(Buffer.OUTPUT, 0))
    tbs = [Threadblock(t, None, None, 0, (replace(cpy, has_dep=(t == 130)),)) for t in range(131)]
    tbs[0] = Threadblock(0, None, None, 0, (replace(cpy, deps=(Dep(130, 0),)),))
    ir = IR("big", "gather", 1, 1, (Gpu(0, 1, 1, 0, tuple(tbs)),), root=0)
    problems = [str(p) for p in find_problems(ir, "msccl")]
    assert any(
        "rank 0, threadblock 130: other threadblocks wait for it, but its id exceeds 127" in p
        for p in problems
    )
    assert any("does not run gather" in p for p in problems)
    assert any("131 threadblocks" not in p for p in problems)
    assert not any("gather" in p for p in map(str, find_problems(ir, "azure")))


def test_count_limit(ring):
    big = replace(
        ring, nchunksperloop=80, gpus=tuple(replace(g, input_chunks=80, output_chunks=80) for g in ring.gpus)
    )
    broken = _edit_op(_edit_op(big, 0, 0, 0, count=72), 1, 0, 1, count=72)
    assert any("count 72: the runtime allows at most 71" in str(p) for p in find_problems(broken, "azure"))


def test_an_ir_that_passed_is_not_checked_again_for_the_same_rules(monkeypatch):
    """The compiler checks the IR it keeps; writing it checks that same IR again (at 512 ranks, seconds)."""
    import codegen.check
    from codegen.formats.xml_writer import write_xml

    looked: list[tuple[int, object, bool]] = []
    find = codegen.check.find_problems

    def counted(ir, dialect=None, final=True, facts=None):
        looked.append((id(ir), getattr(dialect, "name", dialect), final))
        return find(ir, dialect, final, facts)

    monkeypatch.setattr(codegen.check, "find_problems", counted)
    ir = compile_program(ring_allreduce.program(4))
    assert looked == [(id(ir), "azure", True)]
    write_xml(ir, "azure")
    check_ir(ir, "azure")
    assert len(looked) == 1  # the same IR, the same rules: passed before
    check_ir(ir, "msccl")
    check_ir(ir, "azure", final=False)
    check_ir(ir)
    copy = replace(ir, name=ir.name)  # equal, but not the IR that was checked
    check_ir(copy, "azure")
    assert looked[1:] == [
        (id(ir), "msccl", True),
        (id(ir), "azure", False),
        (id(ir), None, True),
        (id(copy), "azure", True),
    ]
    broken = _edit(ir, 0, 0, channel=-1)
    for _ in range(2):  # a failed check is made again, and fails again
        with pytest.raises(IRCheckError, match="channel -1"):
            check_ir(broken, "azure")
    assert len(looked) == 7


def test_a_check_run_beside_gives_the_verdict_check_ir_gives(ring, monkeypatch):
    """``xccl compile`` checks the IR it compiled in a child while it times it: the verdict, taken
    later, is check_ir's (its error, or a pass remembered for the same rules)."""
    import os

    import codegen.check
    import common.forked
    from codegen.check import check_ir_beside, settle
    from codegen.rules import get_dialect

    monkeypatch.setattr(common.forked, "_cpus", lambda: 2)
    forks = []
    fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(fork()) or forks[-1])
    azure = get_dialect("azure")
    broken = _edit_op(ring, 0, 0, 0, count=2)
    check_ir_beside(broken, azure)  # nothing raised yet: a child checks it
    with pytest.raises(IRCheckError) as beside:
        settle(broken)
    assert len(forks) == 1 and str(beside.value) == _only(broken, azure)
    fresh = replace(ring, name="fresh")  # not checked before
    check_ir_beside(fresh, azure)
    monkeypatch.setattr(codegen.check, "find_problems", lambda *a, **k: pytest.fail("checked again"))
    check_ir(fresh, azure)  # waits for the child's pass, and remembers it
    check_ir(fresh, azure)
    settle(fresh)  # taken already: nothing left
    assert len(forks) == 2


def test_threadblocks_found_sound_are_not_judged_again_for_the_same_buffers(monkeypatch):
    """The compiler checks the IR it keeps and the IR simulator loads that IR again (over a second
    each at 512 ranks): sound for some buffers, final or not, it is sound for them again; judged
    for other buffers, or broken, it is judged again, and its problems are found each time."""
    import codegen.rules.structure as structure
    from codegen.rules import declared_sizes, load_problems, threadblock_problems

    judged: list[bool] = []
    judge = structure._threadblock_problems
    monkeypatch.setattr(
        structure,
        "_threadblock_problems",
        lambda ir, sizes, final: judged.append(final) or judge(ir, sizes, final),
    )
    ir = compile_program(ring_allreduce.program(4))
    assert judged == [True]  # the compiler's check
    assert load_problems(ir, declared_sizes(ir)) == [] and threadblock_problems(ir) == []
    assert judged == [True]
    smaller = [{**held, Buffer.INPUT: held[Buffer.INPUT] - 1} for held in declared_sizes(ir)]
    assert any("outside the buffer" in str(p) for p in load_problems(ir, smaller))
    broken = _edit(ir, 0, 0, channel=-1)
    for _ in range(2):
        assert [str(p) for p in threadblock_problems(broken)] == [
            "rank 0, threadblock 0: channel -1: expected >= 0"
        ]
    assert judged == [True, False, False, False]


def test_a_compile_whose_ir_fails_its_check_beside_the_timing_is_refused(monkeypatch):
    """``xccl compile``'s choice passes over a variant whose IR fails the check run beside its
    timing, as one that does not compile; where none passes, the check's error is raised."""
    import codegen.check
    import common.forked
    import runtime.choice
    from codegen.rules import Problem
    from runtime.choice import compile_fastest
    from synth.trees import synthesize
    from topologies import load

    topo = load("dgx-a100x2")
    algo = synthesize(topo, "allgather", size_bytes=1 << 26).algorithm
    monkeypatch.setattr(common.forked, "_cpus", lambda: 2)  # the check in a child
    monkeypatch.setattr(codegen.check, "find_problems", lambda *a, **k: [Problem("made up", 0, 1, 2)])
    compiles = []
    run_compiler = runtime.choice.run_compiler
    monkeypatch.setattr(runtime.choice, "run_compiler", lambda *a, **k: compiles.append(1) or run_compiler(*a, **k))
    with pytest.raises(IRCheckError, match="rank 0, threadblock 1, step 2: made up"):
        compile_fastest(algo, topo)
    assert len(compiles) > 1  # the first one refused, the next variants were tried
