"""One set of rules: the checker, the XML writer and reader, the runtime loader and the compiler
all take what a runtime accepts from ``codegen.rules``, and no other module keeps a copy."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

import codegen.rules
from codegen import compile_algorithm
from codegen.check import find_problems
from codegen.compiler import compile_program
from codegen.errors import IRCheckError
from codegen.examples import ring_allreduce
from codegen.formats import FORMATS
from codegen.formats.xml_reader import read_xml
from codegen.formats.xml_writer import write_xml
from codegen.ir import IR, Buffer, Gpu, Op, OpType, Ref, Threadblock
from codegen.rules import DIALECTS, MAX_REDUCE_FUSION
from runtime.errors import SizeNotSelected
from runtime.program import build_program
from runtime.selection import check_window
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("codegen", "runtime", "synth", "topologies", "sketches", "xccl", "common")


def _reduces(n: int) -> IR:
    """One threadblock of ``n`` chained ``re`` steps into one output slot."""
    ops = tuple(Op(OpType.REDUCE, Ref(Buffer.SCRATCH, i), Ref(Buffer.OUTPUT, 0)) for i in range(n))
    return IR("chain", "allreduce", 1, 1, (Gpu(0, 1, 1, n, (Threadblock(0, None, None, 0, ops),)),))


def _steps(ir: IR) -> int:
    return max(len(tb.ops) for g in ir.gpus for tb in g.threadblocks)


def _largest_count(ir: IR) -> int:
    return max(op.count for g in ir.gpus for tb in g.threadblocks for op in tb.ops)


def test_checker_writer_reader_loader_and_compiler_follow_a_changed_entry(monkeypatch):
    ir = compile_program(ring_allreduce.program(4), dialect="msccl")
    topo = load("ring:4")
    algo = make_baseline("ring", topo, make_collective("allgather", 4, 4))
    assert _largest_count(compile_algorithm(algo, topo, dialect="msccl")) == 4
    assert [len(tx.ops) for tx in build_program(_reduces(6)).tb(0, 0).transmissions] == [6]
    text = write_xml(ir, "msccl")

    entry = DIALECTS["msccl"]
    strict = replace(
        entry,
        max_steps=_steps(ir) - 1,
        reduce_fusion=4,
        max_count=2,
        xml=replace(entry.xml, unlimited_max_bytes=1 << 20),
        max_bytes_inclusive=True,
        op_types=frozenset(OpType) - {OpType.RECV_REDUCE_SEND},
    )
    monkeypatch.setitem(DIALECTS, "msccl", strict)
    limit = f"{_steps(ir)} steps: the msccl runtime allows {_steps(ir) - 1} per threadblock"
    found = [str(p) for p in find_problems(ir, "msccl")]  # the checker
    assert any(limit in p for p in found) and any("rrs: the msccl runtime has no such step" in p for p in found)
    with pytest.raises(IRCheckError, match=limit):  # the writer
        write_xml(ir, "msccl")
    assert read_xml(text.replace('maxBytes="1073741824"', 'maxBytes="1048576"')).max_bytes == 0  # the reader
    assert [len(tx.ops) for tx in build_program(_reduces(6)).tb(0, 0).transmissions] == [4, 2]  # the loader
    assert _largest_count(compile_algorithm(algo, topo, dialect="msccl")) == 2  # the compiler's passes
    window = replace(ir, min_bytes=4096, max_bytes=4096)
    check_window(window, 4096, "msccl")  # the selection window: [min, max] now
    monkeypatch.setitem(DIALECTS, "msccl", entry)
    with pytest.raises(SizeNotSelected):
        check_window(window, 4096, "msccl")


def test_every_dialect_reading_xml_has_a_format_and_the_loader_folds_as_its_entry_says():
    assert {name for name, d in DIALECTS.items() if d.xml is not None} <= set(FORMATS)
    assert all(d.reduce_fusion == MAX_REDUCE_FUSION for d in DIALECTS.values())


INDEPENDENT = {ROOT / "codegen" / "formats" / f"mscclpp_{m}.py" for m in ("validator", "hb", "interp")}
"""The MSCCL++ plan validator (``xccl check PLAN.json``) reads the plan format on its own, with limits
of its own, by design: it judges what the writer made from the rules, so it must not share them
(``tests/test_mscclpp_plans.py`` checks it imports nothing else of xccl)."""


def _library_files() -> list[Path]:
    return [p for package in LIBRARY for p in sorted((ROOT / package).rglob("*.py")) if ".venv" not in p.parts]


def _assigned_names(path: Path) -> set[str]:
    """Names a module binds at its top level (assignments, not imports)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_no_second_owner_of_a_rule():
    """The rules' constants are defined in ``codegen/rules`` only, no module keeps an ``MSCCL_``
    constant of its own, and no module outside it defines rules (``*_problems`` functions that
    judge an IR) or a dialect table."""
    rules_dir = ROOT / "codegen" / "rules"
    constants = {name for name in codegen.rules.__all__ if name.isupper()}
    for path in _library_files():
        if rules_dir in path.parents or path in INDEPENDENT:
            continue
        where = path.relative_to(ROOT)
        bound = _assigned_names(path)
        assert not bound & constants, f"{where} defines {sorted(bound & constants)}: take them from codegen.rules"
        assert not {n for n in bound if n.startswith("MSCCL_")}, f"{where} keeps an MSCCL_ constant"
        text = path.read_text()
        assert not re.search(r"^def \w*_problems\(", text, re.M) or path.name == "check.py", (
            f"{where} defines rules of its own"
        )
        assert "Dialect(" not in text, f"{where} builds a dialect entry"


def _one_by_one(ir: IR, final: bool) -> list:
    """The op rules of ``threadblock_problems`` judged step by step, as before the bulk scan."""
    from codegen.rules import Problem
    from codegen.rules.structure import _awaited, _fine, _op_problems, declared_sizes

    out = []
    for gpu in ir.gpus:
        held, steps = declared_sizes(ir)[gpu.rank], {tb.id: len(tb.ops) for tb in gpu.threadblocks}
        awaited = _awaited(gpu) if final else {}
        for tb in sorted(gpu.threadblocks, key=lambda t: t.id):
            for k, op in enumerate(tb.ops):
                if not _fine(tb, op, held, steps):
                    out.extend(_op_problems(tb, op, held, steps, (gpu.rank, tb.id, k)))
                if k in awaited.get(tb.id, {}) and not op.has_dep:
                    (u, v), at = awaited[tb.id][k], (gpu.rank, tb.id, k)
                    out.append(Problem(f"threadblock {u} step {v} waits for this step, but hasdep is not set", *at))
    return [str(p) for p in out]


def test_the_bulk_scan_finds_what_judging_each_step_finds():
    """``threadblock_problems`` spells out only the steps its NumPy scan flags: on ops broken every
    way (counts, operands outside their buffer or missing, missing peers, dependencies on no step, an
    awaited step without hasdep; on rank 3 without its send peer), each op shared by many steps as
    the XML reader shares them, it finds what judging every step finds."""
    from codegen.ir import Dep
    from codegen.rules import declared_sizes, threadblock_problems
    from codegen.rules.structure import _suspects

    topo = load("ring:4")
    ir = compile_algorithm(make_baseline("ring", topo, make_collective("allgather", 4)), topo)
    gpus = list(ir.gpus)
    for rank in (1, 3):
        tbs = list(gpus[rank].threadblocks)
        tb = next(t for t in tbs if any(op.type is OpType.RECV_COPY_SEND for op in t.ops))
        op = next(op for op in tb.ops if op.type is OpType.RECV_COPY_SEND)
        size = gpus[rank].output_chunks
        broken = (
            replace(op, count=0),
            replace(op, count=size + 1),
            replace(op, src=replace(op.dst, index=-1)),
            replace(op, dst=replace(op.dst, index=size)),
            replace(op, dst=None),
            replace(op, type=OpType.NOP, count=0, src=None, dst=None),
            replace(op, deps=(Dep(tb.id, 99),)),
            replace(op, deps=(Dep(99, 0),)),
            replace(op, deps=(Dep(-1, 0),)),
            replace(op, deps=(Dep(tb.id, 0),), has_dep=False),
        )
        ops = (replace(op, has_dep=False), *tb.ops, *broken * 12)  # shared ops, as read from XML
        tbs[tbs.index(tb)] = replace(tb, ops=ops, send=None if rank == 3 else tb.send)
        gpus[rank] = replace(gpus[rank], threadblocks=tuple(tbs))
    ir = replace(ir, gpus=tuple(gpus))
    assert _suspects(ir, declared_sizes(ir), True) is not None  # the scan, not step by step
    for final in (False, True):
        found = [str(p) for p in threadblock_problems(ir, final=final) if p.step is not None]
        assert len(found) > 12 and found == _one_by_one(ir, final)
