"""Whether an MSCCL runtime selects an IR for a call of a given size: its ``minBytes``/``maxBytes``
window, read as each runtime reads it (reference/msccl-xml.md, 3.2 and 3.8; what each compares is
its entry's in :data:`codegen.rules.DIALECTS`).

- ``azure`` (msccl-executor-nccl) compares ``count x type size x ngpus`` for allgather,
  reducescatter and alltoall (nccl-tests' size: the whole larger buffer) and ``count x type size``
  for the others (allreduce, broadcast, reduce: the buffer; gather, scatter: a rank's share), and
  selects the IR when ``minBytes <= bytes`` and (``maxBytes`` is 0, no limit, or ``bytes <=
  maxBytes``).
- ``msccl`` (microsoft/msccl, the research runtime) compares NCCL's ``nBytes``: ``count x type
  size``, times the ranks for allgather and reducescatter, whose count is per rank (NCCL's
  ``ArgsCheck``), so nccl-tests' size for every collective; it selects the IR when ``minBytes <=
  bytes < maxBytes`` and refuses to load a file whose ``minBytes`` exceeds its ``maxBytes``.

The IR keeps ``max_bytes`` 0 for "no limit" (the XML reader maps the research dialect's written
"no limit" to it). An IR read from XML is judged in the file's dialect; any other IR in the dialect
of the runtime that runs its collective (``azure``, or ``msccl`` for ``custom``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from codegen.ir import IR
from codegen.rules import DIALECTS, Dialect, get_dialect
from common.units import format_size
from runtime.errors import SizeNotSelected

if TYPE_CHECKING:
    from codegen.dsl import ChunkProgram
    from synth.collectives import Collective

__all__ = ["RunTarget", "check_window", "compiled_within", "run_target", "runtime_dialect", "window_bytes"]

T = TypeVar("T")


def runtime_dialect(collective: str) -> str:
    """The dialect of the runtime that runs ``collective`` (what an IR that came from no XML file is
    judged by): ``azure`` when the executor runs it, else ``msccl`` (``custom`` runs only there)."""
    return "azure" if DIALECTS["azure"].xml_collective(collective) else "msccl"


@dataclass(frozen=True)
class RunTarget:
    """What to execute: the IR, the result declared for a ``custom`` one (a DSL program's custom
    collective; None otherwise) and the dialect whose window applies."""

    ir: IR
    declared: Collective | None
    dialect: str


def run_target(source: IR | ChunkProgram | str | Path, dialect: Dialect | None = None) -> RunTarget:
    """An IR as given (judged by its runtime's dialect), a DSL program compiled for the runtime
    that runs its collective (keeping a custom collective as the declared result; ``dialect``: that
    runtime's entry with limits of the executor's, such as fewer threadblocks), or an IR file
    (MSCCL XML judged by its own dialect, or our JSON IR)."""
    from codegen.compiler import compile_program
    from codegen.dsl import ChunkProgram
    from codegen.errors import XmlFormatError
    from codegen.formats import read_ir
    from codegen.formats.xml_reader import xml_dialect
    from common.files import read_text

    if isinstance(source, IR):
        return RunTarget(source, None, runtime_dialect(source.collective))
    if isinstance(source, ChunkProgram):
        d = dialect or get_dialect(runtime_dialect(source.collective.name))
        ir = compile_program(source, dialect=d)
        return RunTarget(ir, source.collective if ir.collective == "custom" else None, d.name)
    text = read_text(source, XmlFormatError)
    ir = read_ir(text, str(source))
    json_ir = text.lstrip(" \n\r").startswith("{")
    return RunTarget(ir, None, runtime_dialect(ir.collective) if json_ir else xml_dialect(text, str(source)))


def compiled_within(
    compile: Callable[[Dialect], T],
    dialect: str,
    limit: int | None,
    note: Callable[[str], None] | None = None,
) -> T:
    """``compile(entry)`` for ``dialect``'s entry with at most ``limit`` threadblocks per rank (a
    backend's :meth:`~runtime.backends.Backend.rank_threadblocks`: the compiler then picks a layout
    and width that fit); where none fits, for the entry as it is, so that the executor's own refusal
    names what the IR needs and the device holds (``note`` is told so)."""
    from codegen.errors import NoLayoutError

    entry = get_dialect(dialect)
    if limit is None or limit >= entry.max_threadblocks:
        return compile(entry)
    try:
        return compile(replace(entry, max_threadblocks=limit))
    except NoLayoutError:
        if note is not None:
            note(
                f"no threadblock layout fits {limit} threadblocks per rank: compiled within the "
                f"{dialect} runtime's own limits"
            )
        return compile(entry)


def window_bytes(ir: IR, size_bytes: int, dialect: str | Dialect) -> int:
    """The bytes ``dialect``'s runtime compares with the window for a call of nccl-tests' size."""
    if ir.collective in get_dialect(dialect).window_whole_buffer:
        return size_bytes
    return size_bytes // ir.num_ranks


def _bounds(ir: IR, d: Dialect) -> str:
    high = "no limit" if not ir.max_bytes else str(ir.max_bytes)
    upper = "<=" if d.max_bytes_inclusive else "<"
    return f"minBytes {ir.min_bytes} <= bytes {upper} maxBytes {high}"


def check_window(ir: IR, size_bytes: int, dialect: str) -> None:
    """Raise :class:`SizeNotSelected` unless ``dialect``'s runtime selects ``ir`` for a call of
    ``size_bytes`` (nccl-tests' size), naming the window as that runtime reads it."""
    if dialect not in DIALECTS:
        raise SizeNotSelected(f"{ir.name}: dialect {dialect!r}: expected one of {', '.join(DIALECTS)}")
    d = DIALECTS[dialect]
    low, high, runtime = ir.min_bytes, ir.max_bytes, d.runtime
    if high and low > high:
        raise SizeNotSelected(
            f"{ir.name}: minBytes {low} > maxBytes {high}: no runtime ever selects this algorithm "
            "(the research runtime refuses to load it, the Azure executor's window is empty)"
        )
    if high and low == high and not d.max_bytes_inclusive:
        raise SizeNotSelected(
            f"{ir.name}: minBytes = maxBytes = {low}: {runtime} never selects this algorithm "
            "(its window [minBytes, maxBytes) is empty)"
        )
    nbytes = window_bytes(ir, size_bytes, dialect)
    below_max = nbytes <= high if d.max_bytes_inclusive else nbytes < high
    if low <= nbytes and (not high or below_max):
        return
    share = "" if nbytes == size_bytes else f", a rank's share of {format_size(size_bytes)}"
    raise SizeNotSelected(
        f"{ir.name}: {format_size(size_bytes)} is outside the algorithm's window: {runtime} compares "
        f"{nbytes} bytes{share} and selects it only for {_bounds(ir, d)}"
    )
