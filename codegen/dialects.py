"""The two MSCCL XML dialects: what each runtime reads, spells and allows, and the rules that follow.

``msccl``: microsoft/msccl, the research runtime (an NCCL 2.12 fork). ``azure``: the Azure
msccl-executor-nccl, the production executor (an NCCL 2.23 fork). See reference/msccl-xml.md,
sections 3 and 8, and the parsers themselves (``src/graph/topo.cc`` and ``xml.cc`` of the first,
``src/misc/msccl/msccl_parser.cc`` of the second). Limits are the defaults of each build.

This module owns every rule that depends on the runtime: :func:`dialect_problems` checks an IR
(the writer refuses an IR that breaks one, so our files always load), :func:`file_problems` what
an XML file says beyond its IR (attributes present, how ``coll`` is spelled, step numbers). What
both runtimes' shared XML reader rejects outright (quotes, layout, lengths) the reader refuses.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codegen.errors import CodegenError
from codegen.ir import IR, Gpu, OpType, Threadblock
from codegen.problems import Problem

if TYPE_CHECKING:
    from codegen.formats.xml_reader import XmlFacts

__all__ = [
    "DIALECTS",
    "MAX_ATTRIBUTES",
    "MAX_NAME",
    "MAX_NODES",
    "MAX_VALUE",
    "Dialect",
    "dialect_problems",
    "file_problems",
    "get_dialect",
    "strtol",
]

# The XML reader both runtimes share (NCCL's xml.h: MAX_STR_LEN, MAX_ATTR_COUNT, MAX_SUBS, MAX_NODES).
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
MAX_BUFFER_CHUNKS = 1 << 15
"""Chunks a buffer can have: step offsets are stored as 16-bit integers."""
MAX_CHANNELS = 32
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)")


@dataclass(frozen=True)
class Dialect:
    name: str
    description: str
    collectives: tuple[tuple[str, str], ...]
    """(our collective name, the XML ``coll`` value) for each collective the runtime runs."""
    max_steps: int
    """Steps per threadblock, nops included (MSCCL_MAX_NUM_STEPS); ``s`` must be below it."""
    max_threadblocks: int
    """Threadblocks per GPU (MSCCL_MAX_NUM_THREAD_BLOCKS)."""
    writes_outofplace: bool
    """Whether ``<algo>`` carries ``outofplace`` (the executor requires it; the old runtime ignores it)."""
    unlimited_max_bytes: int
    """``maxBytes`` written for "no limit". The executor reads 0 so; the research runtime has no such
    value and preallocates scratch for ``maxBytes``, so a finite large size is written."""
    checks_buffer_sizes: bool
    """Whether the runtime rejects i_chunks/o_chunks that are neither 0 nor the whole buffer."""
    required: tuple[str, ...]
    """``<algo>`` attributes the parser reads without a default ("Attribute X of node algo not found")."""
    default_max_bytes: int | None
    """``maxBytes`` when absent (None: it is required), for the check that ``minBytes`` is not above it."""
    checks_byte_window: bool
    """Whether the parser rejects ``minBytes > maxBytes``."""
    nthreads_multiple: int | None
    """The research runtime reads an optional ``nthreads`` and rejects it unless a multiple of this."""
    max_channels: int = MAX_CHANNELS
    max_count: int = 71
    max_dep_threadblock: int = 127
    max_tbs_per_channel: int = 32

    def xml_collective(self, collective: str) -> str | None:
        return dict(self.collectives).get(collective)

    def our_collective(self, coll: str) -> str | None:
        return {xml: ours for ours, xml in self.collectives}.get(coll)


DIALECTS: dict[str, Dialect] = {
    "msccl": Dialect(
        name="msccl",
        description="microsoft/msccl research runtime (NCCL 2.12 fork)",
        collectives=(
            ("allreduce", "allreduce"),
            ("allgather", "allgather"),
            ("reduce", "reduce"),
            ("broadcast", "broadcast"),
            ("alltoall", "alltoall"),
            ("reducescatter", "reduce_scatter"),
            ("custom", "custom"),
        ),
        max_steps=256,
        max_threadblocks=216,
        writes_outofplace=False,
        unlimited_max_bytes=1 << 30,
        checks_buffer_sizes=True,
        required=("name", "ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace"),
        default_max_bytes=1 << 27,
        checks_byte_window=True,
        nthreads_multiple=32,
    ),
    "azure": Dialect(
        name="azure",
        description="Azure msccl-executor-nccl production executor (NCCL 2.23 fork)",
        collectives=(
            ("allreduce", "allreduce"),
            ("allgather", "allgather"),
            ("reduce", "reduce"),
            ("broadcast", "broadcast"),
            ("alltoall", "alltoall"),
            ("reducescatter", "reducescatter"),
            ("gather", "gather"),
            ("scatter", "scatter"),
        ),
        max_steps=64,
        max_threadblocks=1024,
        writes_outofplace=True,
        unlimited_max_bytes=0,
        checks_buffer_sizes=False,
        required=(
            "nchunksperloop",
            "nchannels",
            "ngpus",
            "proto",
            "coll",
            "minBytes",
            "maxBytes",
            "inplace",
            "outofplace",
        ),
        default_max_bytes=None,
        checks_byte_window=False,
        nthreads_multiple=None,
    ),
}


def get_dialect(dialect: str | Dialect) -> Dialect:
    if isinstance(dialect, Dialect):
        return dialect
    if not isinstance(dialect, str) or dialect not in DIALECTS:
        raise CodegenError(f"unknown dialect {dialect!r}: expected one of {', '.join(DIALECTS)}")
    return DIALECTS[dialect]


# -- rules on the IR ---------------------------------------------------------------------------


def dialect_problems(ir: IR, d: Dialect) -> list[Problem]:
    """What the runtime ``d`` rejects, would corrupt or would never select in ``ir``."""
    out = _algo_problems(ir, d)
    for gpu in ir.gpus:
        out.extend(_gpu_problems(ir, gpu, d))
        awaited = {(dep.tb, dep.op) for tb in gpu.threadblocks for op in tb.ops for dep in op.deps}
        for tb in gpu.threadblocks:
            out.extend(_threadblock_problems(gpu.rank, tb, d, awaited))
    return out


def _algo_problems(ir: IR, d: Dialect) -> list[Problem]:
    out = []
    if d.xml_collective(ir.collective) is None:
        known = ", ".join(ours for ours, _ in d.collectives)
        out.append(Problem(f"the {d.name} runtime does not run {ir.collective} (it runs {known})"))
    if ir.nchannels > d.max_channels:
        out.append(Problem(f"{ir.nchannels} channels: the {d.name} runtime allows at most {d.max_channels}"))
    high = ir.max_bytes or d.unlimited_max_bytes  # what the file will say
    if high and ir.min_bytes > high:
        written = "" if ir.max_bytes else f" (the {d.name} dialect's maxBytes for no limit)"
        out.append(Problem(f"minBytes {ir.min_bytes} > maxBytes {high}{written}"))
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
    return out


def _gpu_problems(ir: IR, gpu: Gpu, d: Dialect) -> list[Problem]:
    r = gpu.rank
    out = []
    if not gpu.threadblocks:
        out.append(Problem("no threadblock: the runtime would launch an empty grid", r))
    if len(gpu.threadblocks) > d.max_threadblocks:
        out.append(
            Problem(
                f"{len(gpu.threadblocks)} threadblocks: the {d.name} runtime allows {d.max_threadblocks}", r
            )
        )
    steps = sum(len(tb.ops) for tb in gpu.threadblocks)
    nodes = 1 + ir.num_ranks + len(gpu.threadblocks) + steps
    if nodes >= MAX_NODES:
        out.append(
            Problem(
                f"{nodes} XML elements to load (<algo>, {ir.num_ranks} <gpu>, {len(gpu.threadblocks)} <tb>, "
                f"{steps} <step>): the runtimes' XML reader holds fewer than {MAX_NODES}",
                r,
            )
        )
    for what, n in (
        ("i_chunks", gpu.input_chunks),
        ("o_chunks", gpu.output_chunks),
        ("s_chunks", gpu.scratch_chunks),
    ):
        if n > MAX_BUFFER_CHUNKS:
            out.append(
                Problem(
                    f"{what}={n}: the runtimes store chunk offsets in 16 bits (at most {MAX_BUFFER_CHUNKS})",
                    r,
                )
            )
    if d.checks_buffer_sizes:
        mult_in = ir.num_ranks if ir.collective == "allgather" else 1
        mult_out = ir.num_ranks if ir.collective == "reducescatter" else 1
        for what, n, mult in (
            ("i_chunks", gpu.input_chunks, mult_in),
            ("o_chunks", gpu.output_chunks, mult_out),
        ):
            if n and n * mult != ir.nchunksperloop:
                out.append(
                    Problem(f"{what}={n} is neither 0 nor the whole buffer ({ir.nchunksperloop // mult})", r)
                )
    sends: dict[int, int] = defaultdict(int)
    recvs: dict[int, int] = defaultdict(int)
    for tb in gpu.threadblocks:
        sends[tb.channel] += tb.send is not None
        recvs[tb.channel] += tb.recv is not None
    for ch in sorted(sends):
        if max(sends[ch], recvs[ch]) > d.max_tbs_per_channel:
            out.append(
                Problem(
                    f"channel {ch}: more than {d.max_tbs_per_channel} sending or receiving threadblocks", r
                )
            )
    return out


def _threadblock_problems(r: int, tb: Threadblock, d: Dialect, awaited: set) -> list[Problem]:
    out = []
    if len(tb.ops) > d.max_steps:
        out.append(
            Problem(
                f"{len(tb.ops)} steps: the {d.name} runtime allows {d.max_steps} per threadblock", r, tb.id
            )
        )
    if tb.channel >= d.max_channels:
        out.append(
            Problem(
                f"channel {tb.channel}: the {d.name} runtime allows channels below {d.max_channels}", r, tb.id
            )
        )
    if tb.id > d.max_dep_threadblock and any((tb.id, k) in awaited for k in range(len(tb.ops))):
        out.append(
            Problem(f"other threadblocks wait for it, but its id exceeds {d.max_dep_threadblock}", r, tb.id)
        )
    pending = False
    for k, op in enumerate(tb.ops):
        at = (r, tb.id, k)
        if len(op.deps) > 1:
            out.append(
                Problem(
                    f"{len(op.deps)} dependencies: the runtime reads one per step (fold them into nops)", *at
                )
            )
        if op.type is not OpType.NOP and op.count > d.max_count:
            out.append(Problem(f"count {op.count}: the runtime allows at most {d.max_count}", *at))
        if op.type is OpType.NOP:
            pending = pending or bool(op.deps)
            continue
        if pending and not op.deps:
            out.append(
                Problem("follows nops with dependencies but has none itself: the runtime rejects it", *at)
            )
        pending = False
    if pending:
        out.append(Problem("ends with a nop whose dependency no step takes", r, tb.id, len(tb.ops) - 1))
    return out


# -- rules on what a file says beyond its IR -----------------------------------------------------


def file_problems(ir: IR, facts: XmlFacts, d: Dialect | None) -> list[Problem]:
    """What the runtimes reject in an XML file beyond its IR: ``nchannels`` for both, and with a
    dialect its required ``<algo>`` attributes, its spelling of ``coll``, its byte window, its
    ``nthreads`` and its step numbers."""
    out = _channel_problems(ir, facts)
    if d is None:
        return out
    late = set(facts.algo_ignored)
    for key in d.required:
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


def _channel_problems(ir: IR, facts: XmlFacts) -> list[Problem]:
    nchannels = _int(facts.algo.get("nchannels"))
    if nchannels is None:
        return []
    if not 1 <= nchannels <= MAX_CHANNELS:
        return [Problem(f"<algo>: nchannels={nchannels}: the runtimes have 1 to {MAX_CHANNELS} channels")]
    return [
        Problem(f"<tb> chan={tb.channel} is not below the file's nchannels={nchannels}", g.rank, tb.id)
        for g in ir.gpus
        for tb in g.threadblocks
        if tb.channel >= nchannels
    ]


def _window_problems(facts: XmlFacts, d: Dialect) -> list[Problem]:
    out = []
    if d.checks_byte_window:
        low = _int(facts.algo.get("minBytes", "0"))
        high = _int(facts.algo.get("maxBytes", str(d.default_max_bytes)))
        if low is not None and high is not None and low > high:
            default = "" if "maxBytes" in facts.algo else " (its default when maxBytes is absent)"
            out.append(
                Problem(f"<algo>: minBytes={low} > maxBytes={high}{default}: the {d.name} runtime rejects it")
            )
    raw = facts.algo.get("nthreads")
    if d.nthreads_multiple and raw is not None:
        value = _int(raw)
        if value is None or value % d.nthreads_multiple:
            out.append(
                Problem(
                    f"<algo>: nthreads={raw!r}: the {d.name} runtime needs a multiple of {d.nthreads_multiple}"
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
