"""A custom collective for a DSL program: its buffers and the result it must produce.

The named collectives (allgather, ...) carry their postcondition; a schedule that moves data some
other way needs one too, or nothing could say whether it ran right. ``custom_collective`` states it
as "after the call, rank r's output slot j holds rank s's input chunk i": the DSL checks the
program against it symbolically when it compiles, and ``xccl run`` / ``xccl bench`` compare the
executed outputs with it. An output slot the statement leaves out is not checked.

>>> from codegen.dsl import ChunkProgram, chunk
>>> swap = custom_collective(2, 1, 1, {(0, 0): (1, 0), (1, 0): (0, 0)})  # ranks trade their chunk
>>> with ChunkProgram("swap", None, swap) as prog:
...     _ = chunk(0, "input", 0).copy(1, "output", 0)
...     _ = chunk(1, "input", 0).copy(0, "output", 0)
>>> prog.check()
()
"""

from __future__ import annotations

from collections.abc import Mapping

from codegen.errors import DslError
from common.fields import is_integer
from synth.collectives import Chunk, Collective

__all__ = ["custom_collective"]

Slot = tuple[int, int]
"""(rank, chunk index) in a buffer."""


def _slot(value: object, n: int, chunks: int, what: str) -> Slot:
    ok = isinstance(value, tuple) and len(value) == 2
    ok = ok and all(is_integer(v) for v in value)
    if not ok or not (0 <= value[0] < n and 0 <= value[1] < chunks):
        raise DslError(
            f"custom collective: {what} {value!r}: expected (rank, index) with rank in 0..{n - 1} "
            f"and index in 0..{chunks - 1}"
        )
    return value


def custom_collective(
    num_ranks: int, input_chunks: int, output_chunks: int, expect: Mapping[Slot, Slot]
) -> Collective:
    """A ``custom`` collective on ``num_ranks`` ranks whose buffers hold ``input_chunks`` and
    ``output_chunks`` chunks; ``expect[(r, j)] = (s, i)``: rank r's output slot j must end up holding
    rank s's input chunk i (copies; slots not named are not checked)."""
    for value, name in (
        (num_ranks, "ranks"),
        (input_chunks, "input chunks"),
        (output_chunks, "output chunks"),
    ):
        if not is_integer(value) or value < 1:
            raise DslError(f"custom collective: {name}: expected an integer >= 1, got {value!r}")
    if not isinstance(expect, Mapping):
        raise DslError(
            f"custom collective: expect: expected a dict {{(rank, slot): (rank, chunk)}}, got {expect!r}"
        )
    n, c = num_ranks, input_chunks
    wanted: dict[Slot, Slot] = {
        _slot(dst, n, output_chunks, "output slot"): _slot(src, n, c, "input chunk")
        for dst, src in expect.items()
    }
    holders: dict[int, set[int]] = {}
    outputs = [[None] * output_chunks for _ in range(n)]
    for (rank, slot), (src, index) in wanted.items():
        cid = src * c + index
        outputs[rank][slot] = cid
        holders.setdefault(cid, set()).add(rank)
    chunks = tuple(Chunk(frozenset({cid // c}), frozenset(holders.get(cid, ())), cid) for cid in range(n * c))
    inputs = tuple(tuple(r * c + i for i in range(c)) for r in range(n))
    return Collective("custom", n, c, None, chunks, inputs, tuple(tuple(row) for row in outputs))
