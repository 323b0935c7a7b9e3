"""The runtimes xccl compiles for, as one table: what each reads, spells, allows and selects.

``msccl``: microsoft/msccl, the research runtime (an NCCL 2.12 fork). ``azure``: the Azure
msccl-executor-nccl, the production executor (an NCCL 2.23 fork). See reference/msccl-xml.md,
sections 3 and 8, and the parsers themselves (``src/graph/topo.cc`` and ``xml.cc`` of the first,
``src/misc/msccl/msccl_parser.cc`` of the second). Limits are the defaults of each build.
``mscclpp``: the MSCCL++ executor, which runs JSON execution plans (reference/mscclpp-plan-and-torch.md,
sections 1 and 4; ``src/core/executor/execution_plan.cc``, ``execution_common.hpp`` and
``execution_kernel.hpp`` of microsoft/mscclpp v0.8.0 to v0.10.0).

An entry holds numbers and choices only; the rules that read them live beside it
(:mod:`codegen.rules.runtime`, :mod:`codegen.rules.xml_file`), and every consumer looks the entry
up when it runs, so a new runtime (an MSCCL++ plan, a torch executor) is one more entry here, not
another module of checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.errors import CodegenError
from codegen.ir import OpType
from codegen.protocols import PROTOCOLS

__all__ = [
    "DIALECTS",
    "MAX_BUFFER_CHUNKS",
    "MAX_CHANNELS",
    "MAX_COUNT",
    "MAX_DEP_THREADBLOCK",
    "MAX_PEERS_PER_CHANNEL",
    "MAX_REDUCE_FUSION",
    "Dialect",
    "PlanSpelling",
    "XmlSpelling",
    "get_dialect",
]

# What both MSCCL runtimes fix alike (their defaults for every entry below).
MAX_CHANNELS = 32
"""NCCL's MAXCHANNELS: no runtime accepts more channels."""
MAX_COUNT = 71
"""The largest ``cnt`` of a step (``MSCCL_MAX_COUNT`` is 72, and ``cnt`` must be below it); also
the most chunks one primitive call carries (``maxAllowedCount`` is capped at it)."""
MAX_REDUCE_FUSION = 16
"""``MSCCL_MAX_REDUCE_FUSION``: ``re`` steps the parser chains into one transmission."""
MAX_DEP_THREADBLOCK = 127
"""A dependency names its threadblock in 8 signed bits."""
MAX_PEERS_PER_CHANNEL = 32
"""Sending (and receiving) threadblocks per channel: one per peer."""
MAX_BUFFER_CHUNKS = 1 << 15
"""Chunks a buffer can have: step offsets are stored as 16-bit integers."""
_BOTH_RUN = tuple((name, name) for name in ("allreduce", "allgather", "reduce", "broadcast", "alltoall"))
"""Collectives both runtimes run, under our names."""
_SMS = 132
"""Threadblocks an MSCCL++ plan may launch per GPU: every one spins on the others, so all must be
resident at once, one per SM (an H100 SXM has 132). An IR channel or a connection becomes
threadblocks of its own, so this bounds them too."""
_BOTH_REQUIRE = ("ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace")
"""``<algo>`` attributes both parsers require."""


@dataclass(frozen=True)
class XmlSpelling:
    """How a runtime's XML parser reads an ``<algo>`` (for runtimes that read MSCCL XML)."""

    required: tuple[str, ...]
    """``<algo>`` attributes the parser reads without a default ("Attribute X of node algo not found")."""
    writes_outofplace: bool
    """Whether ``<algo>`` carries ``outofplace`` (the executor requires it; the old runtime ignores it)."""
    unlimited_max_bytes: int
    """``maxBytes`` written for "no limit" (read back as 0, as are larger values where it is not 0).
    The executor reads 0 so. The research runtime has no such value: it reads ``maxBytes`` with
    ``strtoll`` into an ``int64_t`` and selects a call of ``nBytes`` (a ``size_t``) when ``nBytes <
    maxBytes``, so the largest value it can hold, INT64_MAX (``strtoll`` saturates larger ones to
    it), is written: every call a machine can make is below it."""
    preallocates_scratch: bool
    """Whether the runtime allocates ``maxBytes x s_chunks / nchunksperloop`` bytes of scratch when the
    communicator starts (the research runtime): then an IR with scratch has no unlimited window."""
    default_max_bytes: int | None
    """``maxBytes`` when absent (None: it is required), for the check that ``minBytes`` is not above it."""
    checks_byte_window: bool
    """Whether the parser rejects ``minBytes > maxBytes``."""
    nthreads_multiple: int | None
    """The research runtime reads an optional ``nthreads`` and rejects it unless a multiple of this."""
    max_listed_files: int | None = None
    """How many XMLs of a file list the runtime loads (the research runtime: MSCCL_MAX_NUM_ALGOS, the
    rest of ``MSCCL_XML_FILES`` ignored); None where a folder is loaded whole."""


@dataclass(frozen=True)
class PlanSpelling:
    """How a runtime that reads MSCCL++ execution plans (JSON) reads one, and what one may hold.

    The format is that of mscclpp PR #579 (v0.8.0); v0.9.0 and v0.10.0 parse it unchanged, and a plan
    that uses only the ops below loads on all three. Numbers are ``execution_common.hpp``'s; only the
    ops per threadblock are checked by the executor, the rest corrupt its device structures."""

    version: str
    """The mscclpp release whose plan format is written (the plan and the docs state it)."""
    loads_on: tuple[str, ...]
    """Releases whose parser reads that format unchanged."""
    max_ops: int
    """Ops per threadblock (``MAX_OPERATION``; the executor throws above it)."""
    max_channels: int
    """Channels of one type a threadblock lists (``MAX_CHANNEL``); also remote buffers per access type."""
    max_channels_per_op: int
    """Channel ids one op names (``MAX_CHANNEL_PER_OPERATION``)."""
    max_refs_per_op: int
    """Buffer references on each side of one op (2 local + ``MAX_CHANNEL_PER_OPERATION`` remote)."""
    max_semaphores_per_op: int
    """Semaphore ids one ``sem_acquire``/``sem_release`` names (``MAX_DEVICE_SEMAPHORES``)."""
    threads_per_block: int
    """``num_threads_per_block`` (the kernel's launch bounds)."""
    buffer_alignment: int
    """Bytes a chunk is a multiple of (``buffer_alignment``'s default)."""
    max_offset_bytes: int
    """Byte offsets and sizes are stored as 32-bit integers: every one must stay below this."""
    unlimited_max_bytes: int
    """``max_message_size`` for "no limit" (the parser's default)."""
    one_machine: bool = True
    """Ranks are joined by memory channels only (CUDA IPC over NVLink or PCIe), which need both GPUs
    in one machine: a schedule that moves data between machines needs port channels, not written."""


@dataclass(frozen=True)
class Dialect:
    """What one runtime accepts of an IR, how it spells it, and when it selects it."""

    name: str
    description: str
    runtime: str
    """How messages name the runtime (``the Azure executor``)."""
    collectives: tuple[tuple[str, str], ...]
    """(our collective name, the runtime's name for it) for each collective the runtime runs."""
    max_steps: int | None
    """Steps per threadblock, nops included (MSCCL_MAX_NUM_STEPS); a step's number must be below it.
    None: no limit on the IR's steps (a plan writer splits a long threadblock)."""
    max_threadblocks: int
    """Threadblocks per GPU (MSCCL_MAX_NUM_THREAD_BLOCKS)."""
    checks_buffer_sizes: bool
    """Whether the runtime rejects i_chunks/o_chunks that are neither 0 nor the whole buffer."""
    window_whole_buffer: frozenset[str]
    """Collectives whose ``minBytes``/``maxBytes`` window compares nccl-tests' size (the whole larger
    buffer); the others compare a rank's share of it."""
    max_bytes_inclusive: bool
    """Whether a call of exactly ``maxBytes`` is selected (the window is ``[min, max]``, not ``[min, max)``)."""
    xml: XmlSpelling | None
    """How its XML parser reads a file; None for a runtime that reads no MSCCL XML."""
    plan: PlanSpelling | None = None
    """How it reads an MSCCL++ execution plan; None for a runtime that reads none."""
    protocols: tuple[str, ...] = PROTOCOLS
    """The protocols an IR for it may use. MSCCL++ plans: Simple (the executor has no LL128, and
    xccl does not write its LL packet ops)."""
    reductions: frozenset[str] | None = None
    """The reductions it performs (None: every one NCCL offers: sum, prod, min, max)."""
    op_types: frozenset[OpType] = frozenset(OpType)
    """The step types the runtime executes (both MSCCL runtimes: all of the IR's)."""
    max_channels: int = MAX_CHANNELS
    max_count: int = MAX_COUNT
    max_dep_threadblock: int = MAX_DEP_THREADBLOCK
    max_tbs_per_channel: int = MAX_PEERS_PER_CHANNEL
    max_buffer_chunks: int = MAX_BUFFER_CHUNKS
    deps_per_step: int | None = 1
    """Dependencies a step carries (None: any number); the rest go into ``nop`` steps before it."""
    reduce_fusion: int = MAX_REDUCE_FUSION
    """``re`` steps chained into one transmission (see :func:`codegen.rules.fold_steps`)."""

    def performs(self, reduction: str) -> bool:
        """Whether the runtime reduces with ``reduction`` (``sum``, ``prod``, ``min``, ``max``)."""
        return self.reductions is None or reduction in self.reductions

    def xml_collective(self, collective: str) -> str | None:
        return dict(self.collectives).get(collective)

    def our_collective(self, coll: str) -> str | None:
        return {xml: ours for ours, xml in self.collectives}.get(coll)


DIALECTS: dict[str, Dialect] = {
    "msccl": Dialect(
        name="msccl",
        description="microsoft/msccl research runtime (NCCL 2.12 fork)",
        runtime="the research runtime (microsoft/msccl)",
        collectives=(*_BOTH_RUN, ("reducescatter", "reduce_scatter"), ("custom", "custom")),
        max_steps=256,
        max_threadblocks=216,
        checks_buffer_sizes=True,
        # NCCL's ArgsCheck multiplies an allgather's and a reducescatter's nBytes by nRanks ("count
        # is per rank"), so the window sees nccl-tests' size for them too (nccl.md 4, argcheck.cc)
        window_whole_buffer=frozenset(
            {"allgather", "reducescatter", "alltoall", "allreduce", "broadcast", "reduce", "custom"}
        ),
        max_bytes_inclusive=False,
        xml=XmlSpelling(
            required=("name", *_BOTH_REQUIRE),
            writes_outofplace=False,
            unlimited_max_bytes=(1 << 63) - 1,
            preallocates_scratch=True,
            default_max_bytes=1 << 27,
            checks_byte_window=True,
            nthreads_multiple=32,
            max_listed_files=4,
        ),
    ),
    "azure": Dialect(
        name="azure",
        description="Azure msccl-executor-nccl production executor (NCCL 2.23 fork)",
        runtime="the Azure executor",
        collectives=(*_BOTH_RUN, ("reducescatter", "reducescatter"), ("gather", "gather"), ("scatter", "scatter")),
        max_steps=64,
        max_threadblocks=1024,
        checks_buffer_sizes=False,
        window_whole_buffer=frozenset(
            {"allgather", "reducescatter", "alltoall", "allreduce", "broadcast", "reduce"}
        ),
        max_bytes_inclusive=True,
        xml=XmlSpelling(
            required=(*_BOTH_REQUIRE, "minBytes", "maxBytes", "outofplace"),
            writes_outofplace=True,
            unlimited_max_bytes=0,
            preallocates_scratch=False,
            default_max_bytes=None,
            checks_byte_window=False,
            nthreads_multiple=None,
        ),
    ),
    "mscclpp": Dialect(
        name="mscclpp",
        description="MSCCL++ executor (execution plan JSON, format of v0.8.0; loads on v0.8.0 to v0.10.0)",
        runtime="the MSCCL++ executor",
        collectives=tuple(
            (name, name)
            for name in ("allgather", "allreduce", "reducescatter", "alltoall", "broadcast", "reduce", "gather", "scatter")
        ),
        max_steps=None,
        max_threadblocks=_SMS,
        checks_buffer_sizes=False,
        # it compares the input's bytes, the output's for allgather: a rank's share only for gather
        window_whole_buffer=frozenset(
            {"allgather", "allreduce", "reducescatter", "alltoall", "broadcast", "reduce", "scatter"}
        ),
        max_bytes_inclusive=True,
        xml=None,
        plan=PlanSpelling(
            version="v0.8.0",
            loads_on=("v0.8.0", "v0.9.0", "v0.10.0"),
            max_ops=64,
            max_channels=16,
            max_channels_per_op=8,
            max_refs_per_op=10,
            max_semaphores_per_op=16,
            threads_per_block=1024,
            buffer_alignment=16,
            max_offset_bytes=1 << 32,
            unlimited_max_bytes=(1 << 64) - 1,
        ),
        protocols=("Simple",),
        reductions=frozenset({"sum"}),
        max_channels=_SMS,
        max_count=MAX_BUFFER_CHUNKS,
        max_dep_threadblock=_SMS,
        max_tbs_per_channel=_SMS,
        deps_per_step=None,
    ),
}


def get_dialect(dialect: str | Dialect) -> Dialect:
    """The entry of ``dialect`` (a name), looked up now: a changed table is seen at once."""
    if isinstance(dialect, Dialect):
        return dialect
    if not isinstance(dialect, str) or dialect not in DIALECTS:
        raise CodegenError(f"unknown dialect {dialect!r}: expected one of {', '.join(DIALECTS)}")
    return DIALECTS[dialect]
