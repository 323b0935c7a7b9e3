"""Printing for the command line: aligned tables for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["format_table", "print_json", "print_table", "progress"]


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
    """One JSON document on stdout. NaN and infinities are not JSON: a caller that passes one has a
    bug, and ``allow_nan=False`` makes it raise instead of printing what no parser reads."""
    json.dump(data, sys.stdout, indent=2, default=str, allow_nan=False)
    sys.stdout.write("\n")


def progress(message: str) -> None:
    """A progress line on stderr (kept apart from the results on stdout)."""
    print(message, file=sys.stderr, flush=True)
