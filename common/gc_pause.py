"""Pausing Python's cyclic garbage collector while a large acyclic structure is built.

Compiling, reading, checking and simulating a 512-rank schedule allocate millions of small objects
(instructions, steps, tuples) that hold no reference cycles. Each young-generation collection the
allocations trigger walks them again, which made those stages two to three times slower at scale
(measured: ``benchmarks/RESULTS.md``, section "XML and IR tooling at scale"). Reference counting
still frees everything; only the cycle collector waits until the block ends.

At the end the objects the block built are moved to the oldest generation (``gc.freeze`` then
``gc.unfreeze``, each a list splice): else they all sit in the youngest, and the first collection
after walked them at once (1.4 s after a 128-rank allreduce compile, measured with ``gc.callbacks``).
They stay collectable: a full collection still looks at them. Where the caller froze objects of
its own (``gc.freeze`` before a fork), nothing is moved.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cycle collector off, restoring it after (nested blocks are fine:
    only the outermost one turns it back on, with what was built counted as old). Usable as a
    decorator."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not gc.get_freeze_count():  # a caller's own frozen objects stay frozen
                gc.freeze()
                gc.unfreeze()  # into the oldest generation
            gc.enable()
