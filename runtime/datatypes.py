"""The element types and reductions an execution takes, by name.

Kept apart from ``runtime.reference`` (which maps them to NumPy) so that the command line can
offer them without loading NumPy; every executor and the reference read them from here.
"""

from __future__ import annotations

__all__ = ["DTYPE_NAMES", "REDUCTIONS"]

DTYPE_NAMES: dict[str, tuple[str, ...]] = {
    "float16": ("f16", "float16", "half"),
    "float32": ("f32", "float32", "float"),
    "float64": ("f64", "float64", "double"),
    "int8": ("i8", "int8"),
    "uint8": ("u8", "uint8"),
    "int32": ("i32", "int32", "int"),
    "uint32": ("u32", "uint32"),
    "int64": ("i64", "int64"),
    "uint64": ("u64", "uint64"),
}
"""Each element type (NumPy's name) and the names it is given by, the short one first."""

REDUCTIONS: dict[str, str] = {"sum": "add", "prod": "multiply", "min": "minimum", "max": "maximum"}
"""The reductions NCCL offers MSCCL (avg is never handed to an MSCCL algorithm), each with the
NumPy ufunc that computes it."""
