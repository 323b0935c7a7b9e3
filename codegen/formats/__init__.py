"""The IR's file formats: MSCCL XML in two dialects and our JSON, behind one registry.

``write_ir(ir, "azure" | "msccl" | "json")`` prints, ``read_ir(text)`` parses either kind (JSON
starts with ``{``), ``load_ir(path)`` and ``save_ir(ir, path, fmt, force)`` do the file handling
(an existing file is kept unless ``force``). ``read_ir_facts`` / ``load_ir_facts`` also return what
an XML file says beyond its IR, for the rules of each runtime (``codegen.rules.file_problems``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from codegen.errors import CodegenError, XmlFormatError
from codegen.formats.json_ir import read_ir_json, write_ir_json
from codegen.formats.xml_reader import XmlFacts, read_xml, read_xml_facts
from codegen.formats.xml_writer import write_xml
from codegen.ir import IR
from codegen.rules import DIALECTS
from common.files import read_text, save_text

__all__ = ["FORMATS", "Format", "load_ir", "load_ir_facts", "read_ir", "read_ir_facts", "save_ir", "write_ir"]


@dataclass(frozen=True)
class Format:
    name: str
    suffix: str
    description: str
    write: Callable[[IR], str]


def _xml(dialect: str) -> Callable[[IR], str]:
    return lambda ir: write_xml(ir, dialect)


FORMATS: dict[str, Format] = {
    **{
        name: Format(name, ".xml", f"MSCCL XML for the {d.description}", _xml(name))
        for name, d in DIALECTS.items()
        if d.xml is not None
    },
    "json": Format("json", ".json", "xccl's JSON IR (several dependencies per step allowed)", write_ir_json),
}


def _format(fmt: str) -> Format:
    if fmt not in FORMATS:
        raise CodegenError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return FORMATS[fmt]


def write_ir(ir: IR, fmt: str = "azure") -> str:
    return _format(fmt).write(ir)


def read_ir(text: str, where: str = "<ir>") -> IR:
    """Parse our JSON IR or MSCCL XML (either dialect)."""
    if _is_json(text):
        return read_ir_json(text, where)
    return read_xml(text, where)


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


def save_ir(ir: IR, path: str | Path, fmt: str = "azure", force: bool = False) -> Path:

    return save_text(path, write_ir(ir, fmt), force=force, error=CodegenError)
