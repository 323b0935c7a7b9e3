"""The two MSCCL XML dialects as options: what each runtime reads, spells and allows.

``msccl``: microsoft/msccl, the research runtime (an NCCL 2.12 fork). ``azure``: the Azure
msccl-executor-nccl, the production executor (an NCCL 2.23 fork). See reference/msccl-xml.md,
sections 3 and 8. Limits are the defaults of each build.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.errors import CodegenError

__all__ = ["DIALECTS", "Dialect", "get_dialect"]


@dataclass(frozen=True)
class Dialect:
    name: str
    description: str
    collectives: tuple[tuple[str, str], ...]
    """(our collective name, the XML ``coll`` value) for each collective the runtime runs."""
    max_steps: int
    """Steps per threadblock, nops included (MSCCL_MAX_NUM_STEPS)."""
    max_threadblocks: int
    """Threadblocks per GPU (MSCCL_MAX_NUM_THREAD_BLOCKS)."""
    writes_outofplace: bool
    """Whether ``<algo>`` carries ``outofplace`` (the executor requires it; the old runtime ignores it)."""
    unlimited_max_bytes: int
    """``maxBytes`` written for "no limit". The executor reads 0 so; the research runtime has no such
    value and preallocates scratch for ``maxBytes``, so a finite large size is written."""
    checks_buffer_sizes: bool
    """Whether the runtime rejects i_chunks/o_chunks that are neither 0 nor the whole buffer."""
    max_channels: int = 32
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
    ),
}


def get_dialect(dialect: str | Dialect) -> Dialect:
    if isinstance(dialect, Dialect):
        return dialect
    if dialect not in DIALECTS:
        raise CodegenError(f"unknown dialect {dialect!r}: expected one of {', '.join(DIALECTS)}")
    return DIALECTS[dialect]
