"""Sizes as users write them: ``1KiB``, ``256MiB``, ``1GiB``, ``4096B`` or a plain byte count."""

from __future__ import annotations

import re

from common.errors import XcclError

__all__ = ["SizeError", "format_size", "parse_size", "parse_size_range"]

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
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class SizeError(XcclError):
    """A size that cannot be parsed."""


def parse_size(text: str | int) -> int:
    """Bytes in ``text`` (``1MiB`` -> 1048576); binary units are KiB, MiB, GiB."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    unit = match[2].lower() if match else ""
    if not match or (unit not in _UNITS and unit != ""):
        raise SizeError(f"size {text!r}: expected a number with B, KiB, MiB or GiB (like 1MiB)")
    value = float(match[1]) * _UNITS.get(unit or "b")
    if value < 1 or value != int(value):
        raise SizeError(f"size {text!r}: expected a whole number of bytes >= 1")
    return int(value)


def parse_size_range(text: str) -> list[int]:
    """``1KiB:1GiB`` -> every power-of-two multiple from 1 KiB to 1 GiB; ``a,b,c`` -> a list."""
    if ":" in text:
        lo_text, _, rest = text.partition(":")
        hi_text, _, factor_text = rest.partition(":")
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        factor = int(factor_text) if factor_text else 2
        if lo > hi or factor < 2:
            raise SizeError(f"sizes {text!r}: expected LOW:HIGH[:FACTOR] with LOW <= HIGH and FACTOR >= 2")
        sizes = []
        size = lo
        while size <= hi:
            sizes.append(size)
            size *= factor
        return sizes
    return [parse_size(part) for part in text.split(",") if part.strip()]


def format_size(nbytes: float) -> str:
    """``1048576`` -> ``1MiB``; sizes that are not whole units keep two decimals."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.2f}{unit}"
    return f"{int(nbytes)}B"
