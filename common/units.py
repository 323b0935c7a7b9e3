"""Sizes as users write them: ``1KiB``, ``256MiB``, ``1GiB``, ``4096B`` or a plain byte count.

Parsing is strict, because a size that is silently rounded or misread wastes a run: a size is a
whole number of bytes from 1 to 2^63 - 1 (what the runtimes' int64 fields hold), written as an
integer or as a string with an optional unit; fractions of a unit are exact (``1.5KiB`` is 1536)
and must come out whole.

Units follow DESIGN.md: time in microseconds, bandwidth in GB/s (1e9 bytes per second), sizes in
bytes; :data:`BYTES_PER_US_PER_GBPS` converts between them.
"""

from __future__ import annotations

import re
from fractions import Fraction

from common.errors import XcclError, quoted

__all__ = ["BYTES_PER_US_PER_GBPS", "MAX_SIZE", "SizeError", "format_size", "parse_size", "parse_size_range"]

BYTES_PER_US_PER_GBPS = 1e3
"""1 GB/s (1e9 bytes per second) moves 1e3 bytes per microsecond."""

_UNITS = {
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 1000,
    "mb": 10**6,
    "gb": 10**9,
}
_SIZE = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*([a-zA-Z]*)\s*$")
_FACTOR = re.compile(r"^\s*\d{1,6}\s*$")
MAX_SIZE = (1 << 63) - 1
"""The largest size: the runtimes hold sizes (``minBytes``, ``maxBytes``, byte counts) in int64."""
_EXPECTED = "expected a whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB (like 1MiB)"


class SizeError(XcclError):
    """A size that cannot be parsed."""


def _shown(text: object) -> str:
    """``text`` as an error message quotes it: at most 40 characters."""
    return quoted(text, 40)


def parse_size(text: str | int) -> int:
    """Bytes in ``text`` (``1MiB`` -> 1048576, ``4096`` -> 4096); binary units are KiB, MiB, GiB, TiB.
    Anything that is not a whole number of bytes in ``1 .. MAX_SIZE`` raises :class:`SizeError`."""
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise SizeError(f"size {_shown(text)} ({type(text).__name__}): {_EXPECTED}")
    if isinstance(text, int):
        value: Fraction | int = text
    else:
        match = _SIZE.match(text)
        unit = match[2].lower() if match else ""
        if not match or (unit and unit not in _UNITS):
            raise SizeError(f"size {_shown(text)}: {_EXPECTED}")
        value = Fraction(match[1]) * _UNITS[unit or "b"]
    if value != int(value):
        raise SizeError(f"size {_shown(text)}: {_EXPECTED}; it is not a whole number of bytes")
    if not 1 <= value <= MAX_SIZE:
        raise SizeError(f"size {_shown(text)}: expected at least 1 byte and at most {MAX_SIZE} (2^63 - 1)")
    return int(value)


def parse_size_range(text: str) -> list[int]:
    """``1KiB:1GiB`` -> every power-of-two multiple from 1 KiB to 1 GiB (``LOW:HIGH:FACTOR`` another
    factor); ``a,b,c`` -> those sizes. At least one size, or :class:`SizeError`."""
    if not isinstance(text, str):
        raise SizeError(
            f"sizes {_shown(text)} ({type(text).__name__}): expected a string like 1KiB:1MiB or 1KiB,4KiB"
        )
    if ":" in text:
        parts = text.split(":")
        if len(parts) > 3:
            raise SizeError(f"sizes {_shown(text)}: expected LOW:HIGH[:FACTOR], got {len(parts)} fields")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        if len(parts) == 3 and not _FACTOR.match(parts[2]):
            raise SizeError(f"sizes {_shown(text)}: FACTOR {_shown(parts[2])}: expected a whole number >= 2")
        factor = int(parts[2]) if len(parts) == 3 else 2
        if lo > hi or factor < 2:
            raise SizeError(
                f"sizes {_shown(text)}: expected LOW:HIGH[:FACTOR] with LOW <= HIGH and FACTOR >= 2"
            )
        sizes = []
        size = lo
        while size <= hi:
            sizes.append(size)
            size *= factor
        return sizes
    items = text.split(",")
    for k, item in enumerate(items, 1):
        if not item.strip():
            what = "no size" if len(items) == 1 else f"item {k} of {len(items)} is empty"
            raise SizeError(
                f"sizes {_shown(text)}: {what}; expected LOW:HIGH[:FACTOR] or a list like 1KiB,4KiB"
            )
    return [parse_size(item) for item in items]


def format_size(nbytes: float) -> str:
    """``1048576`` -> ``1MiB``; sizes that are not whole units keep two decimals."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.2f}{unit}"
    return f"{int(nbytes)}B"
