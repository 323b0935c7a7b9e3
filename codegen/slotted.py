"""The compiler's slotted frozen dataclasses (the chunk DAG's and the instruction DAG's nodes and
edges) made in bulk.

A 512-rank allreduce makes a million instructions and as many edges. Slots keep each object a
quarter of the size of one with a ``__dict__``; but a frozen dataclass's ``__init__`` sets each
field through ``object.__setattr__`` (a Python call and a lookup per field). Here each field is set
for all objects at once through its slot's descriptor, mapped in C over the objects and a column of
values: no Python frame per object, and the frozen class's ``__setattr__`` is not involved, as it
is not in ``__init__``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import attrgetter
from typing import TypeVar

_T = TypeVar("_T")

__all__ = ["copies", "made_all"]

_new = object.__new__


def made_all(cls: type[_T], n: int, columns: dict[str, Iterable[object]]) -> list[_T]:
    """``n`` instances of ``cls`` (a slotted dataclass), the ``k``-th holding the ``k``-th value of
    each column (``columns``: every field's, by name; ``itertools.repeat(value)`` for a constant).
    Equal to ``[cls(*values) for values in zip(*columns.values())]``, several times faster."""
    if set(columns) != set(cls.__slots__):
        raise TypeError(f"{cls.__name__}: made_all needs each of {cls.__slots__}, got {tuple(columns)}")
    objs = list(map(_new, repeat(cls, n)))
    for name, column in columns.items():
        deque(map(getattr(cls, name).__set__, objs, column), 0)  # the slot itself, not __setattr__
    return objs


def copies(objs: Sequence[_T], **changes: Iterable[object]) -> list[_T]:
    """A copy of each of ``objs`` (instances of one slotted dataclass) with the fields named in
    ``changes`` taken from those columns (a value per object): ``evolve`` of each, in bulk."""
    if not objs:
        return []
    cls = type(objs[0])
    unknown = set(changes) - set(cls.__slots__)
    if unknown:
        raise TypeError(f"{cls.__name__}: no field {', '.join(sorted(unknown))}")
    columns = {
        name: changes[name] if name in changes else map(attrgetter(name), objs) for name in cls.__slots__
    }
    return made_all(cls, len(objs), columns)
