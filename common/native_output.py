"""Keeping native libraries off our standard output.

Some solver libraries print from C/C++ straight to file descriptor 1, below Python's ``sys.stdout``
(highspy 1.16 prints its banner while a ``Highs`` object is constructed, before any option can turn
it off). Our stdout carries tables and JSON documents, so such calls run with descriptor 1 pointed
at the null device.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

__all__ = ["native_stdout_silenced"]


@contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """Discard what native code writes to descriptor 1 while the block runs (Python's own prints
    made before are flushed first, so none is lost)."""
    with suppress(OSError, ValueError):  # a closed or broken stdout has nothing to flush
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # descriptor 1 is closed: nothing can reach it anyway
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
