"""The DSL's bulk path (a lowered step's operations recorded in one call) records what the
per-call path records, refuses what it refuses with its message, and compiles to the same IR."""

from __future__ import annotations

import re

import pytest

from codegen.dsl import ChunkProgram
from codegen.errors import DslError

# (kind, src, a, b, time): a copy of src to a, or a reduce a := a (op) src, into b where given
_ALLREDUCE_OPS = [
    ("reduce", (1, "input", 0), (0, "input", 0), (0, "output", 0), (0.0, 1.0)),  # into the output
    ("reduce", (3, "input", 0), (0, "output", 0), None, (1.0, 2.0)),  # in place
    ("copy", (2, "input", 0), (1, "scratch", 0), None, (0.0, 1.0)),
    ("reduce", (1, "scratch", 0), (1, "input", 0), (1, "scratch", 1), (1.0, 1.0)),  # local, into scratch
    ("copy", (1, "scratch", 1), (0, "scratch", 3), None, (2, 3)),  # int times: the per-call path's
    ("reduce", (0, "scratch", 3), (0, "output", 0), None, None),
    ("copy", (0, "output", 0), (0, "output", 0), None, None),  # onto itself: nothing recorded
    ("copy", (0, "output", 0), (1, "output", 0), None, (3.0, 4.0)),
]


def _one_by_one(prog: ChunkProgram, ops: list) -> None:
    for kind, src, a, b, time in ops:
        if kind == "copy":
            prog.copy_slot(src, *a, time)
        else:
            prog.reduce_slot(src, a, b, time)


def _same(one: ChunkProgram, bulk: ChunkProgram) -> None:
    assert bulk.num_ops == one.num_ops
    assert bulk.chunk_dag() == one.chunk_dag()
    assert bulk._values == one._values and bulk.check() == one.check()


@pytest.mark.parametrize("inplace", [False, True])
def test_record_slots_records_what_copy_slot_and_reduce_slot_record(inplace):
    one, bulk = (ChunkProgram("ar", "ring:4", "allreduce", inplace=inplace) for _ in range(2))
    _one_by_one(one, _ALLREDUCE_OPS)
    bulk.record_slots(_ALLREDUCE_OPS)
    _same(one, bulk)
    assert one.num_ops == 7  # all but the copy onto itself


_WRONG = [
    (("copy", (0, "input", 0), (2, "scratch", 0), None, None), "has no link 0 -> 2"),
    (("reduce", (0, "input", 0), (2, "output", 0), None, None), "has no link 0 -> 2"),
    (("reduce", (1, "scratch", 5), (0, "output", 0), None, None), re.escape("reduce source rank 1 scratch[5]")),
    (("reduce", (1, "input", 0), (0, "scratch", 4), None, None), re.escape("destination rank 0 scratch[4]")),
    (("copy", (1, "scratch", 5), (0, "output", 0), None, None), re.escape("copy source rank 1 scratch[5]")),
    (("copy", (1, "input", 0), (0, "input", 0), None, None), "the input of an out-of-place call is read-only"),
    (("reduce", (1, "input", 0), (0, "input", 0), None, None), "the input of an out-of-place call is read-only"),
    (("reduce", (1, "input", 0), (0, "input", 0), (0, "output", 0), (2.0, 1.0)), re.escape("got (2.0, 1.0)")),
    (("copy", (1, "input", 0), (0, "output", 0), None, (0.0,)), re.escape("got (0.0,)")),
]


@pytest.mark.parametrize(("op", "message"), _WRONG)
def test_record_slots_refuses_what_the_per_call_path_refuses(op, message):
    one, bulk = (ChunkProgram("ar", "ring:4", "allreduce") for _ in range(2))
    first = ("copy", (1, "input", 0), (0, "scratch", 0), None, (0.0, 1.0))
    with pytest.raises(DslError, match=message):
        _one_by_one(one, [first, op])
    with pytest.raises(DslError, match=message):
        bulk.record_slots([first, op, first])
    _same(one, bulk)  # what came before the refused op is recorded, nothing after it
