"""Fields of many instructions or steps read into arrays, for passes that work on them in bulk.

At 512 ranks a stage holds a million instructions (``codegen.instr_dag.Instr``) or steps
(``codegen.ir.Op``). Reading one field of each through ``map`` and an ``attrgetter`` runs in C,
with no Python call per object; a location (:class:`~codegen.ir.Ref`, or None) becomes whether
it is set, its buffer's code (:data:`BUFFER_CODE`) and its index, and an optional int whether it
is set and its value, so that NumPy can compare, sort and group them.

>>> from codegen.ir import Buffer, Ref
>>> has, buffer, index = refs([Ref(Buffer.SCRATCH, 3), None, Ref(Buffer.INPUT, 1)])
>>> has.tolist(), buffer.tolist(), index.tolist()
([True, False, True], [2, 0, 0], [3, 0, 1])
>>> optional([4, None, 0])[1].tolist()
[4, 0, 0]
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress, repeat
from operator import attrgetter, is_not
from typing import TYPE_CHECKING

from codegen.ir import Buffer, OpType, Ref

if TYPE_CHECKING:
    import numpy as np

    from codegen.instr_dag import Instr, InstrDAG

__all__ = ["BUFFER_CODE", "TYPE_CODE", "InstrColumns", "instr_columns", "ints", "optional", "refs", "set_values"]

BUFFER_CODE = {b: k for k, b in enumerate(Buffer)}
"""Each buffer's code in :func:`refs` (its place in :class:`~codegen.ir.Buffer`)."""

_BUFFER, _INDEX = attrgetter("buffer"), attrgetter("index")


def ints(values: Iterable[int], n: int) -> np.ndarray:
    """``n`` ints as an array."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass

    return np.fromiter(values, np.int64, n)


def set_values(values: Sequence) -> tuple[np.ndarray, list]:
    """Whether each of ``values`` is not None, and those that are not, in order."""
    import numpy as np

    has = np.fromiter(map(is_not, values, repeat(None)), bool, len(values))
    return has, list(compress(values, has.tolist()))


def refs(values: Sequence[Ref | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per location: whether it is set, its buffer's code and its index (0 and 0 where not set)."""
    import numpy as np

    has, set_ = set_values(values)
    buffer, index = np.zeros(len(values), np.int64), np.zeros(len(values), np.int64)
    buffer[has] = ints(map(BUFFER_CODE.__getitem__, map(_BUFFER, set_)), len(set_))
    index[has] = ints(map(_INDEX, set_), len(set_))
    return has, buffer, index


def optional(values: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """Per value: whether it is set, and it (0 where not)."""
    import numpy as np

    has, set_ = set_values(values)
    out = np.zeros(len(values), np.int64)
    out[has] = ints(set_, len(set_))
    return has, out


TYPE_CODE = {t: k for k, t in enumerate(OpType)}
"""Each op type's code in :attr:`InstrColumns.type` (its place in :class:`~codegen.ir.OpType`)."""


class InstrColumns:
    """The fields of a DAG's instructions as arrays, each read when first asked and then kept for
    every DAG holding the same instructions (:func:`instr_columns`): at 512 ranks each field of a
    million instructions takes 50-90 ms to read, and the passes from ``aggregate_chunks`` to
    ``insert_dependencies`` read the rank alone six times. Not to be written to (each array is
    read-only). A peer or a match is -1 where the instruction has none."""

    def __init__(self, instrs: Sequence[Instr]) -> None:
        self.instrs = instrs

    def given(self, **columns: np.ndarray) -> None:
        """Columns known where the instructions were made (``expand_instructions``: from the
        arrays it made them of), by the names of the properties they stand for."""
        unknown = set(columns) - {"rank", "type", "count", "instance", "src", "dst", *_PEERS}
        if unknown:
            raise TypeError(f"InstrColumns.given: no column {sorted(unknown)}")
        for name, column in columns.items():
            self.__dict__[name] = tuple(map(_frozen, column)) if isinstance(column, tuple) else _frozen(column)

    def _ints(self, name: str) -> np.ndarray:
        return _frozen(ints(map(attrgetter(name), self.instrs), len(self.instrs)))

    def _or_minus_one(self, name: str) -> np.ndarray:
        has, value = optional(list(map(attrgetter(name), self.instrs)))
        value[~has] = -1
        return _frozen(value)

    @cached_property
    def rank(self) -> np.ndarray:
        return self._ints("rank")

    @cached_property
    def type(self) -> np.ndarray:
        """Each instruction's :data:`TYPE_CODE`."""
        return _frozen(ints(map(TYPE_CODE.__getitem__, map(attrgetter("type"), self.instrs)), len(self.instrs)))

    @cached_property
    def count(self) -> np.ndarray:
        return self._ints("count")

    @cached_property
    def instance(self) -> np.ndarray:
        return self._ints("instance")

    @cached_property
    def send_to(self) -> np.ndarray:
        return self._or_minus_one("send_to")

    @cached_property
    def recv_from(self) -> np.ndarray:
        return self._or_minus_one("recv_from")

    @cached_property
    def send_match(self) -> np.ndarray:
        return self._or_minus_one("send_match")

    @cached_property
    def recv_match(self) -> np.ndarray:
        return self._or_minus_one("recv_match")

    @cached_property
    def src(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`refs` of the sources."""
        return tuple(map(_frozen, refs(list(map(attrgetter("src"), self.instrs)))))

    @cached_property
    def dst(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`refs` of the destinations."""
        return tuple(map(_frozen, refs(list(map(attrgetter("dst"), self.instrs)))))

    @cached_property
    def tb_hint(self) -> tuple[np.ndarray, np.ndarray]:
        """:func:`optional` of the threadblock hints."""
        return tuple(map(_frozen, optional(list(map(attrgetter("tb_hint"), self.instrs)))))

    @cached_property
    def channel_hint(self) -> tuple[np.ndarray, np.ndarray]:
        """:func:`optional` of the channel hints."""
        return tuple(map(_frozen, optional(list(map(attrgetter("channel_hint"), self.instrs)))))

    @cached_property
    def plain(self) -> bool:
        """Whether no instruction has a hint or an instance but the first (a lowered Algorithm's)."""
        return set(map(attrgetter("tb_hint", "channel_hint", "instance"), self.instrs)) <= {(None, None, 0)}


def instr_columns(dag: InstrDAG) -> InstrColumns:
    """The :class:`InstrColumns` of ``dag``'s instructions, shared by every DAG that holds the very
    same tuple of them (``order_by_critical_path`` and the channel passes keep it). Only weak
    references to the DAGs are kept: the columns go when the last DAG holding them goes."""
    instrs = dag.instrs
    entry = _HELD.get(id(instrs))
    if entry is None or entry.columns.instrs is not instrs:
        entry = _HELD[id(instrs)] = _Held(InstrColumns(instrs))
    if not any(ref() is dag for ref in entry.dags):
        entry.dags.append(weakref.ref(dag, entry.forget))
    return entry.columns


@dataclass(eq=False)
class _Held:
    """Columns held for the DAGs (weakly) that share their instructions."""

    columns: InstrColumns
    dags: list[weakref.ref] = field(default_factory=list)

    def forget(self, gone: weakref.ref) -> None:
        self.dags.remove(gone)
        if not self.dags and _HELD.get(id(self.columns.instrs)) is self:
            del _HELD[id(self.columns.instrs)]


_PEERS = ("send_to", "recv_from", "send_match", "recv_match")

_HELD: dict[int, _Held] = {}
"""By the id of the instructions' tuple (held alive by the columns while a DAG holds it)."""


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
