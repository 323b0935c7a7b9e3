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

from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import attrgetter, is_not
from typing import TYPE_CHECKING

from codegen.ir import Buffer, Ref

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BUFFER_CODE", "ints", "optional", "refs", "set_values"]

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
