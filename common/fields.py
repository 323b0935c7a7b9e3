"""Reading a parsed JSON document field by field, every mistake one error naming where it is.

Each of our formats (topology, sketch, algorithm, JSON IR) reads its document through a
:class:`Fields`, so a wrong value is reported the same way everywhere:
``WHERE: FIELD: expected WHAT, got VALUE`` (``topo.json: links[0].count: expected an integer from 1
to 1024, got 0``). A format adds its own compound fields by subclassing :class:`Fields`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

from common.errors import XcclError

__all__ = ["Fields", "is_integer", "is_number", "shown"]

_NOTHING: Any = object()
_SHOWN_MAX = 200


def is_integer(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (JSON's ``true`` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite ``int`` or ``float`` that is not a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def shown(value: Any) -> str:
    """``value`` as an error message quotes it: as JSON writes it (``"25"``, ``true``, ``1e+300``, and
    ``Infinity`` for what a file's ``1e400`` reads as), cut to 200 characters. NaN, which no file can
    hold (the JSON reader refuses it) and only Python passes, reads as Python writes it: ``nan``."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):  # no JSON form (a set, an object), or an int too long to print
        try:
            text = repr(value)
        except ValueError:
            text = f"an {type(value).__name__} too long to print"
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


def _at_least(minimum: float | None) -> str:
    return "" if minimum is None else f" >= {minimum}"


class Fields:
    """Typed access to the fields of one document; every check returns the value it accepted or
    raises ``error("WHERE: FIELD: expected ...")``. ``FIELD`` is a path (``links[0].src``); the
    empty path is the document itself."""

    def __init__(self, where: str, error: type[XcclError] = XcclError) -> None:
        self.where = where
        self.error = error

    def fail(self, field: str, expected: str, got: Any = _NOTHING) -> XcclError:
        """The error for ``field`` (``got``: the value found, where one is worth showing)."""
        tail = "" if got is _NOTHING else f", got {shown(got)}"
        return self.error(f"{self.where}: {field or '(top level)'}: expected {expected}{tail}")

    def keys(
        self, value: Any, field: str, allowed: Iterable[str], required: Iterable[str] = ()
    ) -> dict[str, Any]:
        """An object whose keys are among ``allowed`` and include ``required``; the first key
        wrong or missing is named."""
        if not isinstance(value, dict):
            raise self.fail(field, "an object", value)
        allowed = tuple(allowed)
        for key in value:
            if key not in allowed:
                raise self.fail(_member(field, key), f"one of the known keys ({', '.join(allowed)})", key)
        for key in required:
            if key not in value:
                raise self.fail(_member(field, key), "a value (required)")
        return value

    def record(self, value: Any, field: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """An object with exactly ``keys`` (a format we write whole, like the JSON IR)."""
        if isinstance(value, dict) and set(value) == set(keys):
            return value
        expected = f"an object with keys {', '.join(keys)}"
        if isinstance(value, dict):
            missing = [k for k in keys if k not in value]
            extra = [k for k in value if k not in keys]
            expected += f" ({'missing ' + missing[0] if missing else 'unknown key ' + shown(extra[0])})"
        raise self.fail(field, expected)

    def integer(self, value: Any, field: str, minimum: int | None = None, null: bool = False) -> Any:
        """An integer >= ``minimum`` (where given); ``None`` too where ``null``."""
        if value is None and null:
            return None
        if is_integer(value) and (minimum is None or value >= minimum):
            return value
        raise self.fail(field, f"an integer{_at_least(minimum)}{' or null' if null else ''}", value)

    def number(self, value: Any, field: str, minimum: float | None = None, unit: str = "") -> float:
        """A finite number (of ``unit``) >= ``minimum``, as a float: NaN and infinities are refused."""
        if is_number(value) and (minimum is None or value >= minimum):
            return float(value)
        raise self.fail(field, f"a finite number{f' of {unit}' if unit else ''}{_at_least(minimum)}", value)

    def string(self, value: Any, field: str, empty: bool = False) -> str:
        """A string, non-empty unless ``empty``."""
        if isinstance(value, str) and (empty or value):
            return value
        raise self.fail(field, "a string" if empty else "a non-empty string", value)

    def boolean(self, value: Any, field: str, null: bool = False) -> Any:
        """``true`` or ``false`` (or ``null`` where ``null``)."""
        if isinstance(value, bool) or (null and value is None):
            return value
        raise self.fail(field, "true, false or null" if null else "true or false", value)

    def array(self, value: Any, field: str, of: str = "", nonempty: bool = False) -> list[Any]:
        """A list (``of``: what its items are, as the message says it), non-empty where asked."""
        if isinstance(value, list) and (value or not nonempty):
            return value
        raise self.fail(field, f"a {'non-empty ' if nonempty else ''}list{f' of {of}' if of else ''}", value)

    def choice(self, value: Any, field: str, choices: Iterable[Any]) -> Any:
        """One of ``choices``."""
        choices = tuple(choices)
        if not isinstance(value, bool) and value in choices:
            return value
        raise self.fail(field, f"one of {', '.join(map(str, choices))}", value)

    def check(self, value: Any, field: str, problem: Callable[[Any], str | None]) -> Any:
        """``value`` where ``problem(value)`` finds nothing wrong, else the error naming what
        ``problem`` expected (for ranges a package states once, like a link's bandwidth)."""
        expected = problem(value)
        if expected:
            raise self.fail(field, expected, value)
        return value


def _member(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key
