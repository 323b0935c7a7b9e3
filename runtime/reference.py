"""The NumPy reference of every collective: test inputs, expected outputs, and the comparison.

Shared by every executor (NumPy, CuPy): an executor runs the IR on :func:`make_inputs`, then
:func:`check_outputs` compares what it produced with :func:`reference`. Integer results must match
exactly (sums and products wrap the same in any order). Float sums and products may be accumulated
in any order, so they are compared with the worst-case rounding bound of k-term accumulation in the
dtype, ``(k + 1) * eps * sum(|x_i|)`` (``|prod|`` for products), against a float64 reference; min,
max and plain copies are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runtime.datatypes import DTYPE_NAMES
from runtime.datatypes import REDUCTIONS as REDUCTION_UFUNCS
from runtime.errors import ExecutionError, ExecutionMismatch
from synth.collectives import Collective

__all__ = [
    "DTYPES",
    "REDUCTIONS",
    "Reference",
    "check_outputs",
    "dtype_name",
    "executor_inputs",
    "make_inputs",
    "parse_dtype",
    "parse_op",
    "reference",
]

REDUCTIONS: dict[str, np.ufunc] = {name: getattr(np, ufunc) for name, ufunc in REDUCTION_UFUNCS.items()}
"""The reductions of ``runtime.datatypes.REDUCTIONS``, as NumPy ufuncs."""

DTYPES: dict[str, np.dtype] = {name: np.dtype(kind) for kind, names in DTYPE_NAMES.items() for name in names}
"""Every name of ``runtime.datatypes.DTYPE_NAMES``, mapped to its NumPy dtype."""


def parse_dtype(name: str | np.dtype | type) -> np.dtype:
    """``f32`` / ``float32`` / ``np.float32`` -> ``dtype('float32')``."""
    if isinstance(name, str):
        key = name.lower()
        if key not in DTYPES:
            raise ExecutionError(f"dtype {name!r}: expected one of {', '.join(DTYPES)}")
        return DTYPES[key]
    dtype = np.dtype(name)
    if dtype not in DTYPES.values():
        raise ExecutionError(f"dtype {dtype}: expected one of {', '.join(DTYPES)}")
    return dtype


def dtype_name(dtype: np.dtype) -> str:
    return np.dtype(dtype).name


def parse_op(name: str) -> str:
    key = name.lower()
    if key not in REDUCTIONS:
        raise ExecutionError(f"reduction {name!r}: expected one of {', '.join(REDUCTIONS)}")
    return key


def make_inputs(
    collective: Collective, chunk_elems: int, dtype: np.dtype, op: str, seed: int = 0
) -> list[np.ndarray]:
    """Seeded random inputs, one 1-D array per rank: small values, so sums stay far from overflow
    and products of all ranks stay representable (float16 included)."""
    rng = np.random.default_rng(seed)
    dtype = parse_dtype(dtype)
    size = collective.input_chunks * chunk_elems
    out = []
    for _ in range(collective.num_ranks):
        if dtype.kind == "f":
            if op == "prod":
                values = rng.uniform(0.7, 1.4, size) * rng.choice((-1.0, 1.0), size)
            else:
                values = rng.uniform(-1.0, 1.0, size)
        elif op == "prod":
            values = rng.integers(0 if dtype.kind == "u" else -3, 4, size)
        else:
            values = rng.integers(0 if dtype.kind == "u" else -100, 100, size)
        out.append(values.astype(dtype))
    return out


def executor_inputs(ex, seed: int = 0) -> list[np.ndarray]:
    """Inputs for an executor (NumPy's or CuPy's) of an IR: :func:`make_inputs` of its collective, or
    seeded integers sized to each rank's input buffer for an IR that names no collective (run, not
    checked)."""
    if ex.collective is not None:
        return make_inputs(ex.collective, ex.chunk_elems, ex.dtype, ex.op, seed)
    rng = np.random.default_rng(seed)
    return [rng.integers(-100, 100, ex.input_elems(r)).astype(ex.dtype) for r in range(ex.ir.num_ranks)]


@dataclass(frozen=True, eq=False)
class Reference:
    """Expected outputs: ``values[address]`` (one row per address) and, per rank, the output slots
    to check with the address each must hold; ``tolerance`` is per address (None: exact)."""

    collective: Collective
    chunk_elems: int
    dtype: np.dtype
    op: str
    values: np.ndarray
    slots: tuple[np.ndarray, ...]
    addresses: tuple[np.ndarray, ...]
    tolerance: np.ndarray | None


def _locations(coll: Collective) -> dict[int, tuple[int, int]]:
    loc: dict[int, tuple[int, int]] = {}
    for rank, row in enumerate(coll.inputs):
        for slot, cid in enumerate(row):
            if cid is not None and rank in coll.chunks[cid].pre:
                loc[cid] = (rank, slot)
    return loc


def reference(collective: Collective, inputs: Sequence[np.ndarray], chunk_elems: int, op: str) -> Reference:
    """What every rank's output must hold after ``collective`` runs on ``inputs`` with ``op``."""
    n, s = collective.num_ranks, chunk_elems
    dtype = inputs[0].dtype
    loc = _locations(collective)
    stacked = np.stack([np.asarray(x).reshape(collective.input_chunks, s) for x in inputs])
    contrib = [sorted(collective.contributions[a]) for a in range(collective.num_addresses)]
    ranks = np.array([[loc[c][0] for c in cs] for cs in contrib])
    slots_in = np.array([[loc[c][1] for c in cs] for cs in contrib])
    terms = stacked[ranks, slots_in]  # (addresses, k, S): a copy
    del stacked  # the executor's memory check counts the terms and their float64 copy, no more
    k = terms.shape[1]
    ufunc = REDUCTIONS[op]
    tolerance = None
    if k == 1:
        values = terms[:, 0]
    elif dtype.kind != "f" or op in ("min", "max"):
        values = ufunc.reduce(terms, axis=1, dtype=dtype)
    else:
        wide = terms.astype(np.float64)
        del terms
        values = ufunc.reduce(wide, axis=1)
        eps = float(np.finfo(dtype).eps)
        scale = np.abs(wide, out=wide).sum(axis=1) if op == "sum" else np.abs(values)
        tolerance = (k + 1) * eps * scale + float(np.finfo(dtype).tiny)
    out_slots, out_addr = [], []
    for rank in range(n):
        pairs = [(slot, a) for slot, a in enumerate(collective.outputs[rank]) if a is not None]
        out_slots.append(np.array([p[0] for p in pairs], dtype=np.int64))
        out_addr.append(np.array([p[1] for p in pairs], dtype=np.int64))
    return Reference(collective, s, dtype, op, values, tuple(out_slots), tuple(out_addr), tolerance)


def check_outputs(ref: Reference, outputs: Sequence[np.ndarray | None], ir_name: str) -> None:
    """Raise :class:`ExecutionMismatch` at the first output element (rank, chunk, index order) that
    differs from ``ref``; ``outputs[rank]`` None skips a rank checked elsewhere (an executor with a
    process per rank checks each rank's output in its own process)."""
    s = ref.chunk_elems
    for rank, out in enumerate(outputs):
        slots, addrs = ref.slots[rank], ref.addresses[rank]
        if out is None or not len(slots):
            continue
        got = np.asarray(out).reshape(-1, s)[slots]
        want = ref.values[addrs]
        if ref.tolerance is None:
            bad = got != want
        else:
            bad = ~(np.abs(got.astype(np.float64) - want) <= ref.tolerance[addrs])
        if bad.any():
            row, index = divmod(int(np.argmax(bad.ravel())), s)
            expected = want[row, index]
            detail = ""
            if ref.tolerance is not None:
                detail = f"within {ref.tolerance[addrs[row], index]:.3g}"
                expected = float(expected)
            raise ExecutionMismatch(
                ir_name, rank, "output", int(slots[row]), index, expected, got[row, index], detail
            )
