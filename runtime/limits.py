"""The host-memory limit of one execution, checked before anything is allocated.

The NumPy executor holds every rank's buffers in this process, so ``xccl run --size 256GiB`` on
eight ranks asks for terabytes. Rather than let the allocation fail (or the machine swap), the
executor estimates what it needs and refuses a size above the limit: half of this machine's
physical memory by default, ``XCCL_MAX_MEMORY`` (a size such as ``64GiB``) to set another, or
``max_memory=`` / ``--max-memory`` for one call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from common.units import SizeError, format_size, parse_size
from runtime.errors import MemoryLimitError

__all__ = ["FALLBACK_LIMIT", "MEMORY_ENV", "MemoryLimit", "check_memory", "memory_limit"]

MEMORY_ENV = "XCCL_MAX_MEMORY"
FALLBACK_LIMIT = 8 << 30
"""The default where the physical memory cannot be read (8 GiB)."""


@dataclass(frozen=True)
class MemoryLimit:
    bytes: int
    source: str
    """Where it comes from, for the message (``half of this machine's 32GiB``, ``XCCL_MAX_MEMORY``)."""


def _physical_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def memory_limit(given: int | str | None = None) -> MemoryLimit:
    """``given`` (bytes or a size), else ``XCCL_MAX_MEMORY``, else half the physical memory."""
    if given is not None:
        return MemoryLimit(parse_size(given), "the limit given")
    text = os.environ.get(MEMORY_ENV)
    if text:
        try:
            return MemoryLimit(parse_size(text), MEMORY_ENV)
        except SizeError as exc:
            raise MemoryLimitError(f"{MEMORY_ENV}: {exc}") from None
    physical = _physical_bytes()
    if physical is None:
        return MemoryLimit(FALLBACK_LIMIT, "the default where physical memory is unknown")
    return MemoryLimit(physical // 2, f"half of this machine's {format_size(physical)}")


def check_memory(what: str, need: int, limit: MemoryLimit) -> None:
    """Raise :class:`MemoryLimitError` if ``need`` bytes exceed ``limit``."""
    if need > limit.bytes:
        raise MemoryLimitError(
            f"{what} needs about {format_size(need)} of host memory, above the limit of "
            f"{format_size(limit.bytes)} ({limit.source}); raise it with {MEMORY_ENV}=SIZE "
            "(xccl run/bench: --max-memory SIZE)"
        )
