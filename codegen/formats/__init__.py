"""The IR's file formats: MSCCL XML in two dialects, our JSON and MSCCL++ plans, behind one registry.

``write_ir(ir, "azure" | "msccl" | "json" | "mscclpp")`` prints, ``read_ir(text)`` parses XML or
our JSON IR (JSON starts with ``{``; an MSCCL++ plan is written, not read back), ``load_ir(path)``
and ``save_ir(ir, path, fmt, force)`` do the file handling (an existing file is kept unless
``force``). ``reduction`` is the reduction the schedule will be called with: a format for a runtime
that does not perform it refuses (an MSCCL++ plan only sums). ``read_ir_facts`` /
``load_ir_facts`` also return what an XML file says beyond its IR, for the rules of each runtime
(``codegen.rules.file_problems``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from codegen.errors import CodegenError, IRCheckError, XmlFormatError
from codegen.formats.json_ir import read_ir_json, write_ir_json
from codegen.formats.mscclpp_json import write_mscclpp
from codegen.formats.xml_reader import XmlFacts, read_xml, read_xml_facts
from codegen.formats.xml_writer import write_xml
from codegen.ir import IR
from codegen.rules import DIALECTS, machine_problems, reduction_problems
from common.files import read_text, save_text
from common.gc_pause import gc_paused

if TYPE_CHECKING:
    from topologies import Topology

__all__ = ["FORMATS", "Format", "load_ir", "load_ir_facts", "read_ir", "read_ir_facts", "save_ir", "write_ir"]


@dataclass(frozen=True)
class Format:
    name: str
    suffix: str
    description: str
    write: Callable[[IR], str]
    dialect: str | None = None
    """The runtime whose rules the written file follows (None: our JSON IR, every runtime's rules)."""


def _xml(dialect: str) -> Callable[[IR], str]:
    return lambda ir: write_xml(ir, dialect)


def _plan(dialect: str) -> Callable[[IR], str]:
    return lambda ir: write_mscclpp(ir, dialect)


FORMATS: dict[str, Format] = {
    **{
        name: Format(name, ".xml", f"MSCCL XML for the {d.description}", _xml(name), name)
        for name, d in DIALECTS.items()
        if d.xml is not None
    },
    "json": Format("json", ".json", "xccl's JSON IR (several dependencies per step allowed)", write_ir_json),
    **{
        name: Format(name, ".json", f"execution plan for the {d.description}", _plan(name), name)
        for name, d in DIALECTS.items()
        if d.plan is not None
    },
}


def _format(fmt: str) -> Format:
    if fmt not in FORMATS:
        raise CodegenError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return FORMATS[fmt]


@gc_paused()
def write_ir(ir: IR, fmt: str = "azure", reduction: str = "sum", topology: Topology | None = None) -> str:
    """The text of ``ir`` in format ``fmt``; ``topology``, where known, lets a format for a runtime
    that joins the ranks of one machine only refuse a schedule that crosses machines."""
    form = _format(fmt)
    if form.dialect is not None:
        d = DIALECTS[form.dialect]
        found = reduction_problems(ir, d, reduction)
        found += machine_problems(ir, d, topology.node_of) if topology is not None else []
        if found:
            raise IRCheckError(f"{ir.name}: {found[0]}")
    return form.write(ir)


@gc_paused()
def read_ir(text: str, where: str = "<ir>") -> IR:
    """Parse our JSON IR or MSCCL XML (either dialect)."""
    if _is_json(text):
        return read_ir_json(text, where)
    return read_xml(text, where)


@gc_paused()
def read_ir_facts(text: str, where: str = "<ir>") -> tuple[IR, XmlFacts | None]:
    """As :func:`read_ir`, with what an XML file says beyond its IR (None for JSON)."""
    if _is_json(text):
        return read_ir_json(text, where), None
    return read_xml_facts(text, where)


def _is_json(text: str) -> bool:
    return text.lstrip(" \n\r").startswith("{")


def load_ir(path: str | Path) -> IR:
    return read_ir(read_text(path, XmlFormatError), str(path))


def load_ir_facts(path: str | Path) -> tuple[IR, XmlFacts | None]:
    return read_ir_facts(read_text(path, XmlFormatError), str(path))


def save_ir(
    ir: IR,
    path: str | Path,
    fmt: str = "azure",
    force: bool = False,
    reduction: str = "sum",
    topology: Topology | None = None,
) -> Path:
    return save_text(path, write_ir(ir, fmt, reduction, topology), force=force, error=CodegenError)
