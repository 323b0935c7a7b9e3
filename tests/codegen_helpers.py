"""Shared helpers of the codegen tests: run the pipeline up to a pass, compile and execute."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from ir_interpreter import execute

import codegen.compiler as compiler
from codegen.compiler import compile_program
from codegen.dsl import ChunkProgram
from codegen.instr_dag import InstrEdge
from codegen.ir import IR, Dep, OpType
from codegen.passes import DEFAULT_PIPELINE, PASSES
from codegen.pipeline import CompileOptions, run_pipeline
from codegen.rules import DIALECTS, file_problems, unlimited_window_problems
from codegen.semantics import find_wrong_result

__all__ = [
    "assert_loads_and_computes",
    "compile_and_run",
    "counted_builds",
    "heap_order",
    "map_ops",
    "stage_after",
    "steps_of",
    "writable",
]


def stage_after(program: ChunkProgram, last: str, **options) -> object:
    """The stage the default pipeline produces after pass ``last`` (inclusive)."""
    pipeline = DEFAULT_PIPELINE[: DEFAULT_PIPELINE.index(last) + 1]
    opts = CompileOptions(**{"instances": program.instances, **options})
    return run_pipeline(program.chunk_dag(), pipeline, opts, verify_each=True).result


def compile_and_run(program: ChunkProgram, seeds=(None, 1, 2), **options) -> IR:
    """Compile (checked for the azure dialect unless told otherwise) and execute symbolically."""
    ir = compile_program(program, verify_each=True, **options)
    for seed in seeds:
        execute(ir, seed=seed)
    return ir


def writable(ir: IR, dialect: str, max_bytes: int = 1 << 30) -> IR:
    """``ir`` with a ``max_bytes`` window where ``dialect``'s runtime has no unlimited one for it (the
    research runtime allocates scratch for ``maxBytes`` when the communicator starts)."""
    return replace(ir, max_bytes=max_bytes) if unlimited_window_problems(ir, DIALECTS[dialect]) else ir


def steps_of(ir: IR) -> list:
    return [op for g in ir.gpus for tb in g.threadblocks for op in tb.ops]


def map_ops(ir: IR, change) -> IR:
    """``ir`` with ``change(op)`` applied to every op."""
    gpus = tuple(
        replace(
            g,
            threadblocks=tuple(replace(tb, ops=tuple(change(op) for op in tb.ops)) for tb in g.threadblocks),
        )
        for g in ir.gpus
    )
    return replace(ir, gpus=gpus)


def assert_loads_and_computes(text: str, dialect: str, ir: IR) -> None:
    """``text``, written for ``dialect``, breaks none of that runtime's rules on files (the writer
    checked the IR's), and ``ir`` computes its collective by :mod:`codegen.semantics` too."""
    from codegen.formats.xml_reader import read_xml_facts

    read, facts = read_xml_facts(text)
    assert file_problems(read, facts, DIALECTS[dialect]) == []
    assert find_wrong_result(ir) is None


def heap_order(n: int, edges: Sequence[InstrEdge], key: Callable[[int], object]) -> tuple[int, ...]:
    """Kahn's algorithm with a heap of ``(key(i), i)``: the order ``topological_order`` and
    ``InstrDAG.build`` must give, written the plain way."""
    indegree = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for e in edges:
        succs[e.pred].append(e.succ)
        indegree[e.succ] += 1
    ready = [(key(i), i) for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, (key(j), j))
    return tuple(order)


def counted_builds(monkeypatch) -> Counter:
    """Counts of whole IRs built (``insert_dependencies`` runs) and of deadlock checks
    (``codegen.compiler.find_deadlock``) while the test runs."""
    counts: Counter = Counter()
    build, check = PASSES["insert_dependencies"], compiler.find_deadlock

    def built(sched):
        counts["IRs"] += 1
        return build.run(sched)

    def checked(ir):
        counts["deadlock checks"] += 1
        return check(ir)

    monkeypatch.setitem(PASSES, "insert_dependencies", replace(build, run=built))
    monkeypatch.setattr(compiler, "find_deadlock", checked)
    return counts


def unfolded(ir: IR) -> IR:
    """``ir`` with each nop's dependency given to the step after it instead (an IR as a hand-written
    file may hold it: ``insert_dependencies`` itself puts the extras in nops already)."""
    gpus = []
    for gpu in ir.gpus:
        place = {tb.id: {} for tb in gpu.threadblocks}  # old step -> step without the nops
        for tb in gpu.threadblocks:
            for k, op in enumerate(tb.ops):
                if op.type is not OpType.NOP:
                    place[tb.id][k] = len(place[tb.id])
        tbs = []
        for tb in gpu.threadblocks:
            ops, pending = [], []
            for op in tb.ops:
                deps = [Dep(d.tb, place[d.tb][d.op]) for d in op.deps]
                if op.type is OpType.NOP:
                    pending += deps
                else:
                    ops.append(replace(op, deps=(*pending, *deps)))
                    pending = []
            tbs.append(replace(tb, ops=tuple(ops)))
        gpus.append(replace(gpu, threadblocks=tuple(tbs)))
    return replace(ir, gpus=tuple(gpus))
