"""Pausing Python's cyclic garbage collector while a large acyclic structure is built.

Compiling, reading, checking and simulating a 512-rank schedule allocate millions of small objects
(instructions, steps, tuples) that hold no reference cycles. Each young-generation collection the
allocations trigger walks them again, which made those stages two to three times slower at scale
(measured: ``benchmarks/RESULTS.md``, section "XML and IR tooling at scale"). Reference counting
still frees everything; only the cycle collector waits until the block ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cycle collector off, restoring it after (nested blocks are fine:
    only the outermost one turns it back on). Usable as a decorator."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
