"""What the runtimes' XML reader accepts: its limits, and what an XML file says beyond its IR.

Both MSCCL runtimes read their files with NCCL's tiny XML reader (``xml.h``: MAX_STR_LEN,
MAX_ATTR_COUNT, MAX_SUBS, MAX_NODES). The XML reader (:mod:`codegen.formats.xml_reader`) refuses
outright what it cannot read; :func:`xml_problems` says what an IR would break once written, and
:func:`file_problems` what a file says beyond its IR (attributes present, how ``coll`` is spelled,
its byte window, ``nthreads``, step numbers). Integers are read as :func:`strtol` reads them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from codegen.ir import IR, Gpu
from codegen.rules.dialects import MAX_CHANNELS, Dialect
from codegen.rules.problem import Problem

if TYPE_CHECKING:
    from codegen.formats.xml_reader import XmlFacts

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_CHILDREN",
    "MAX_NAME",
    "MAX_NODES",
    "MAX_VALUE",
    "file_dialect",
    "file_problems",
    "load_elements",
    "strtol",
    "unlimited_window_problems",
    "xml_problems",
]

MAX_NAME = 253
"""Characters of an element or attribute name (longer ones: "name too long")."""
MAX_VALUE = 255
"""Characters of an attribute value (the buffer holds 255; longer ones overflow it)."""
MAX_ATTRIBUTES = 16
"""Attributes of an element the reader keeps; later ones are skipped ("Ignoring extra attributes")."""
MAX_CHILDREN = 1024
"""Children one element holds (its array has no bounds check: more corrupt the parser's memory)."""
MAX_NODES = 4096
"""Elements one load holds: ``<algo>``, every ``<gpu>``, and the loading rank's ``<tb>`` and ``<step>``
elements; the reader fails as soon as the count reaches it."""
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)")


def file_dialect(algo: dict[str, str]) -> str:
    """The dialect a file is written in, from its ``<algo>`` attributes: ``azure`` if it carries
    ``outofplace`` (only the executor's dialect writes it)."""
    return "azure" if "outofplace" in algo else "msccl"


def unlimited_window_problems(ir: IR, d: Dialect) -> list[Problem]:
    """An IR with no size limit that uses scratch, for a runtime that allocates scratch for
    ``maxBytes`` when the communicator starts: no finite ``maxBytes`` covers every call, and
    INT64_MAX would make that allocation (and communicator init) fail."""
    if d.xml is None or not d.xml.preallocates_scratch or ir.max_bytes:
        return []
    used = [g for g in ir.gpus if g.scratch_chunks]
    if not used:
        return []
    g = max(used, key=lambda g: g.scratch_chunks)
    return [
        Problem(
            f"no maxBytes given and rank {g.rank} uses {g.scratch_chunks} scratch chunk(s) of "
            f"{ir.nchunksperloop} per loop: the {d.name} runtime allocates maxBytes x s_chunks / nchunksperloop "
            "bytes of scratch when the communicator starts, so it has no unlimited window (give --max-bytes; "
            "calls of that size and more run NCCL's own algorithms)"
        )
    ]


def xml_problems(ir: IR) -> list[Problem]:
    """What the runtimes' XML reader could not hold once ``ir`` is written: its name, its
    ``<gpu>`` elements, the elements one rank loads."""
    out = []
    if any(c in ir.name for c in '"<>&\n\r') or len(ir.name) > MAX_VALUE:
        out.append(
            Problem(
                f"name {ir.name!r}: the runtimes' XML reader needs <= {MAX_VALUE} characters without "
                "quotes or markup"
            )
        )
    if ir.num_ranks > MAX_CHILDREN:
        out.append(
            Problem(
                f"ngpus={ir.num_ranks}: the runtimes' XML reader holds at most {MAX_CHILDREN} <gpu> "
                "elements (children of one element)"
            )
        )
    for gpu in ir.gpus:
        steps = sum(len(tb.ops) for tb in gpu.threadblocks)
        nodes = load_elements(gpu, ir.num_ranks)
        if nodes >= MAX_NODES:
            room = max(0, MAX_NODES - 2 - ir.num_ranks - len(gpu.threadblocks))
            out.append(
                Problem(
                    f"{nodes} XML elements to load (<algo>, {ir.num_ranks} <gpu>, {len(gpu.threadblocks)} "
                    f"<tb>, {steps} <step>): the runtimes' XML reader holds fewer than {MAX_NODES}, so "
                    f"at most {room} steps fit with these threadblocks ({steps - room} fewer: fewer "
                    "chunks per rank or larger merged steps)",
                    gpu.rank,
                )
            )
    return out


def load_elements(gpu: Gpu, num_ranks: int) -> int:
    """The XML elements the reader holds when ``gpu``'s rank loads the file: ``<algo>``, the
    ``num_ranks`` ``<gpu>`` elements, and this rank's ``<tb>`` and ``<step>`` elements."""
    return 1 + num_ranks + len(gpu.threadblocks) + sum(len(tb.ops) for tb in gpu.threadblocks)


def file_problems(ir: IR, facts: XmlFacts, d: Dialect | None) -> list[Problem]:
    """What the runtimes reject in an XML file beyond its IR: ``nchannels`` for both, and with a
    dialect its required ``<algo>`` attributes, its spelling of ``coll``, its byte window, its
    ``nthreads`` and its step numbers."""
    out = _channel_problems(ir, facts, MAX_CHANNELS if d is None else d.max_channels)
    if d is None or d.xml is None:
        return out
    late = set(facts.algo_ignored)
    for key in d.xml.required:
        if key not in facts.algo:
            why = f" (only the first {MAX_ATTRIBUTES} attributes are read)" if key in late else ""
            out.append(Problem(f"<algo>: attribute {key} is missing{why}: the {d.name} runtime requires it"))
    coll = facts.algo.get("coll")
    if coll is not None and d.our_collective(coll) is None:
        known = ", ".join(xml for _, xml in d.collectives)
        out.append(Problem(f"<algo>: coll {coll!r}: the {d.name} runtime knows only {known}"))
    out.extend(_window_problems(facts, d))
    for (rank, tb), numbers in sorted(facts.step_numbers.items()):
        bad = [k for k, s in enumerate(numbers) if not 0 <= s < d.max_steps]
        if bad:
            more = f" (and {len(bad) - 1} more step(s) of this threadblock)" if len(bad) > 1 else ""
            out.append(
                Problem(
                    f"<step> s={numbers[bad[0]]}: the {d.name} runtime needs 0 <= s < {d.max_steps}{more}",
                    rank,
                    tb,
                    bad[0],
                )
            )
    return out


def _channel_problems(ir: IR, facts: XmlFacts, max_channels: int) -> list[Problem]:
    nchannels = _int(facts.algo.get("nchannels"))
    if nchannels is None:
        return []
    if not 1 <= nchannels <= max_channels:
        return [Problem(f"<algo>: nchannels={nchannels}: the runtimes have 1 to {max_channels} channels")]
    return [
        Problem(f"<tb> chan={tb.channel} is not below the file's nchannels={nchannels}", g.rank, tb.id)
        for g in ir.gpus
        for tb in g.threadblocks
        if tb.channel >= nchannels
    ]


def _window_problems(facts: XmlFacts, d: Dialect) -> list[Problem]:
    out = []
    xml = d.xml
    if xml is not None and xml.checks_byte_window:
        low = _int(facts.algo.get("minBytes", "0"))
        high = _int(facts.algo.get("maxBytes", str(xml.default_max_bytes)))
        if low is not None and high is not None and low > high:
            default = "" if "maxBytes" in facts.algo else " (its default when maxBytes is absent)"
            out.append(
                Problem(f"<algo>: minBytes={low} > maxBytes={high}{default}: the {d.name} runtime rejects it")
            )
    raw = facts.algo.get("nthreads")
    if xml is not None and xml.nthreads_multiple and raw is not None:
        value = _int(raw)
        if value is None or value % xml.nthreads_multiple:
            out.append(
                Problem(
                    f"<algo>: nthreads={raw!r}: the {d.name} runtime needs a multiple of {xml.nthreads_multiple}"
                )
            )
    return out


def strtol(text: str) -> int:
    """``strtol(text, NULL, 0)`` for a whole string, as both parsers read integers: decimal, ``0x``
    hex, leading-zero octal (what follows a number the runtimes ignore; we refuse it)."""
    if _DECIMAL.fullmatch(text):
        return int(text)
    s = text.strip()
    sign = -1 if s.startswith("-") else 1
    body = s[1:] if s[:1] in "+-" else s
    if body.lower().startswith("0x"):
        value = int(body[2:], 16)
    elif len(body) > 1 and body.startswith("0"):
        value = int(body[1:], 8)
    else:
        if not body.isdigit():
            raise ValueError(text)
        value = int(body)
    return sign * value


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return strtol(text)
    except ValueError:
        return None
