"""Results remembered while the same objects come back.

The compiler reruns the passes from ``order_by_critical_path`` on for each channel count it tries,
on the same stage object, and checks the IR it keeps up to three times (deadlock, in full, before
writing). Frozen objects with the same identity have the same content, so what was computed from
them holds: at 512 ranks each repeat costs up to a second. Only weak references to the objects
are kept, and the results are dropped once one of them is gone: nothing here keeps a schedule
alive after its compile.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

__all__ = ["Marks", "SameObjects"]

T = TypeVar("T")


class SameObjects:
    """What was computed from the last sequence of objects seen (by identity, in order), by name."""

    def __init__(self) -> None:
        self._refs: tuple[weakref.ref, ...] = ()
        self._found: dict[Hashable, Any] = {}

    def get(self, objects: Sequence[object], what: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, or what it gave the last time for these objects and ``what`` (no objects:
        nothing to tell one call from another, computed every time)."""
        if not objects:
            return compute()
        if not self._same(objects):
            self._found = {}
            self._refs = tuple(weakref.ref(o, self._forget) for o in objects)
        if what not in self._found:
            self._found[what] = compute()
        return self._found[what]

    def _same(self, objects: Sequence[object]) -> bool:
        return len(self._refs) == len(objects) and all(
            r() is o for r, o in zip(self._refs, objects, strict=True)
        )

    def _forget(self, _gone: weakref.ref) -> None:
        self._refs, self._found = (), {}


class Marks:
    """Keys marked on objects, by identity, for any number of objects at once (where
    :class:`SameObjects` remembers the last sequence only): an object gone is forgotten, and an
    object never marked holds no key."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[weakref.ref, set[Hashable]]] = {}

    def holds(self, obj: object, key: Hashable) -> bool:
        """Whether ``key`` was marked on this very object."""
        entry = self._seen.get(id(obj))
        return entry is not None and entry[0]() is obj and key in entry[1]

    def add(self, obj: object, key: Hashable) -> None:
        """Mark ``key`` on ``obj``."""
        entry = self._seen.get(id(obj))
        if entry is None or entry[0]() is not obj:
            entry = self._seen[id(obj)] = (weakref.ref(obj, self._forget), set())
        entry[1].add(key)

    def _forget(self, gone: weakref.ref) -> None:
        for k in [k for k, (ref, _) in self._seen.items() if ref is gone]:
            del self._seen[k]
