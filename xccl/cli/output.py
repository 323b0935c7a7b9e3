"""Printing for the command line: aligned tables for people, JSON for machines.

Standard output may fail under us: closed, a full disk, or a pipe whose reader has gone
(``xccl topo list | head -1``). :func:`stdout_guarded` turns any such failure into one
:class:`OutputError`, which the command line reports instead of exiting 0 having printed nothing.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

__all__ = [
    "OutputError",
    "discard_stdout",
    "format_table",
    "print_json",
    "print_table",
    "progress",
    "slow_stage",
    "stdout_guarded",
]

SLOW_S = 2.0
"""A stage that runs longer than this says so on stderr (:func:`slow_stage`)."""


class OutputError(Exception):
    """Standard output could not be written; ``cause`` is the error of the write.

    Not an :class:`OSError`, so that code handling its own files' errors never takes it for one.
    """

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause

    @property
    def broken_pipe(self) -> bool:
        return isinstance(self.cause, BrokenPipeError)


class _Guarded:
    """``sys.stdout`` whose write and flush failures raise :class:`OutputError`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputError(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputError(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def stdout_guarded() -> Iterator[None]:
    """Run the block with ``sys.stdout`` raising :class:`OutputError` on failure; flush it at the end
    (inside the block), so that a failure surfaces here and not at interpreter exit."""
    real = sys.stdout
    sys.stdout = _Guarded(real)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = real


def discard_stdout() -> None:
    """Point descriptor 1 at the null device, so that what is still buffered for a stdout that
    failed goes nowhere quietly when the interpreter exits (instead of an ignored exception)."""
    with suppress(OSError, ValueError, AttributeError):  # no descriptor (captured in tests): nothing to do
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        all(_is_number(r[i]) for r in cells[1:] if r[i]) and len(cells) > 1 for i in range(len(headers))
    ]
    lines = []
    for k, row in enumerate(cells):
        parts = [
            c.rjust(w) if numeric[i] and k else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("x%"))
    except ValueError:
        return False
    return True


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
    if title:
        print(title)
    print(format_table(headers, rows))


def print_json(data: Any) -> None:
    """One JSON document; a number that is not finite (the bandwidth of a transfer that takes no
    time) is written as ``null``, since NaN and Infinity are not JSON."""
    json.dump(_finite(data), sys.stdout, indent=2, default=str, allow_nan=False)
    sys.stdout.write("\n")


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(value) for value in data]
    return data


def progress(message: str) -> None:
    """A progress line on stderr (kept apart from the results on stdout)."""
    print(message, file=sys.stderr, flush=True)


@contextmanager
def slow_stage(label: str, after_s: float = SLOW_S) -> Iterator[None]:
    """Run a stage; if it is still running after ``after_s`` seconds, say so on stderr, and
    say when it ends. Quick stages print nothing."""
    start = time.perf_counter()
    timer = threading.Timer(after_s, progress, (f"xccl: {label} ...",))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        elapsed = time.perf_counter() - start
        if elapsed >= after_s:
            progress(f"xccl: {label}: {elapsed:.1f} s")
