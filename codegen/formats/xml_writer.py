"""Print an IR as MSCCL algorithm XML, in one of two dialects (:data:`codegen.rules.DIALECTS`).

The writer only prints: dependency folding, ``hasdep`` marks, buffer sizes and threadblock ids are
settled by passes before it runs, and an IR the runtime would reject is refused, not repaired.
Layout follows what the runtimes' tiny XML reader accepts (reference/msccl-xml.md, section 3):
no XML declaration, ``<algo>`` first, one element per line with all its attributes on that line,
single spaces, double quotes, two-space indentation, self-closing ``<step/>``, step numbers by
position (nops included). Operands the step type does not use repeat the used one (a ``nop``
writes ``i``/-1 and ``o``/-1, as the reference compiler does); for ``rrc``, ``rrs`` and ``rrcs``
``srcbuf``/``srcoff`` hold the LOCAL operand, which is how the runtimes read them.
"""

from __future__ import annotations

from itertools import chain, compress
from operator import not_

from codegen.check import check_ir
from codegen.errors import CodegenError, IRCheckError
from codegen.ir import IR, Op, OpType, Ref
from codegen.rules import Dialect, get_dialect, unlimited_window_problems
from synth.collectives import ROOTED

__all__ = ["write_xml"]


def _attrs(pairs: list[tuple[str, object]]) -> str:
    return " ".join(f'{k}="{v}"' for k, v in pairs)


def _operands(op: Op) -> tuple[Ref | None, Ref | None]:
    if op.type is OpType.NOP:
        return None, None
    src = op.src if op.type.reads_src else None
    dst = op.dst if op.type.writes_dst else None
    return src or dst, dst or src


def _head(op: Op) -> str:
    """A ``<step>`` element's attributes after its number ``s`` up to its dependency: one f-string
    (the buffers and types print as their values, being ``StrEnum`` members)."""
    src, dst = _operands(op)
    return (
        f'type="{op.type}" srcbuf="{src.buffer if src else "i"}" '
        f'srcoff="{src.index if src else -1}" dstbuf="{dst.buffer if dst else "o"}" '
        f'dstoff="{dst.index if dst else -1}" cnt="{0 if op.type is OpType.NOP else op.count}"'
    )


def _step(op: Op, heads: dict[tuple, str]) -> str:
    """One ``<step>`` element's attributes after its number: its head, printed once per IR for the
    ops alike but for their dependency and mark (kept in ``heads`` by the ids of the type and the
    operands, which the IR holds alive, and the count: most ops with a dependency are an object of
    their own), then those."""
    key = (id(op.type), id(op.src), id(op.dst), op.count)
    head = heads.get(key)
    if head is None:
        head = heads[key] = _head(op)
    dep = op.deps[0] if op.deps else None
    if dep is None:
        return f'{head} depid="-1" deps="-1" hasdep="{1 if op.has_dep else 0}"/>'
    return f'{head} depid="{dep.tb}" deps="{dep.op}" hasdep="{1 if op.has_dep else 0}"/>'


def _steps(ops: tuple[Op, ...], printed: dict[int, str], heads: dict[tuple, str]) -> str:
    """The ``<step>`` lines of a threadblock's ops, each after a line break. Each op's attributes
    are printed once per IR, kept in ``printed`` by the op's id: the IR shares one op among the
    steps written alike (a few thousand for half a million steps at 512 ranks) and holds it alive.
    The texts are looked up, the ops not printed yet found, and the texts joined to the steps'
    numbers through ``map``, ``compress`` and one ``join``: no Python step per step, and no string
    per line."""
    texts = list(map(printed.get, map(id, ops)))
    for k in list(compress(range(len(ops)), map(not_, texts))):  # the ops not printed before
        op = ops[k]
        text = printed.get(id(op))  # (an op twice in the threadblock: printed at its first)
        texts[k] = printed[id(op)] = _step(op, heads) if text is None else text
    return "".join(chain.from_iterable(zip(_numbered(len(ops)), texts, strict=True)))


_NUMBERED: list[str] = []
"""A line break and ``<step s="k" `` for k = 0, 1, ...: the start of each step's line, made once per
process."""


def _numbered(n: int) -> list[str]:
    """The starts of the lines of steps 0 .. n - 1."""
    if len(_NUMBERED) < n:
        _NUMBERED.extend(f'\n      <step s="{k}" ' for k in range(len(_NUMBERED), n))
    return _NUMBERED[:n]


def write_xml(ir: IR, dialect: str | Dialect = "azure") -> str:
    """The XML text of ``ir`` for ``dialect``; an IR that fails the dialect's static checks raises
    :class:`~codegen.errors.IRCheckError` (naming rank, threadblock and step) instead."""
    d = get_dialect(dialect)
    if d.xml is None:
        raise CodegenError(f"the {d.name} runtime reads no MSCCL XML")
    check_ir(ir, d)
    found = unlimited_window_problems(ir, d)
    if found:
        raise IRCheckError(f"{ir.name}: {found[0]}")
    head: list[tuple[str, object]] = [
        ("name", ir.name),
        ("proto", ir.protocol),
        ("nchannels", ir.nchannels),
        ("nchunksperloop", ir.nchunksperloop),
        ("ngpus", ir.num_ranks),
        ("coll", d.xml_collective(ir.collective)),
        ("inplace", int(ir.inplace)),
    ]
    if d.xml.writes_outofplace:
        head.append(("outofplace", int(ir.outofplace)))
    head += [("minBytes", ir.min_bytes), ("maxBytes", ir.max_bytes or d.xml.unlimited_max_bytes)]
    if ir.collective in ROOTED and ir.root is not None:
        head.append(("root", ir.root))
    lines = [f"<algo {_attrs(head)}>"]
    printed: dict[int, str] = {}
    heads: dict[tuple, str] = {}
    for gpu in ir.gpus:
        sizes = [("id", gpu.rank), ("i_chunks", gpu.input_chunks), ("o_chunks", gpu.output_chunks)]
        lines.append(f"  <gpu {_attrs([*sizes, ('s_chunks', gpu.scratch_chunks)])}>")
        for tb in sorted(gpu.threadblocks, key=lambda t: t.id):
            peers = [("id", tb.id), ("send", _peer(tb.send)), ("recv", _peer(tb.recv)), ("chan", tb.channel)]
            lines.append(f"    <tb {_attrs(peers)}>{_steps(tb.ops, printed, heads)}\n    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _peer(peer: int | None) -> int:
    return -1 if peer is None else peer
