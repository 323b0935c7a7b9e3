"""Expand chunk operations into instructions (chunk DAG -> instruction DAG).

A remote copy becomes a send ``s`` matched with a receive ``r``; a remote reduce a send matched
with a receive-reduce-copy ``rrc`` (its local operand in ``src``, the result in ``dst``); local ops
become ``cpy`` and ``re`` (a reduce into another slot: ``cpy`` then ``re``). Each chunk dependency
becomes an edge between the instructions that touch the slot on either side.

At 512 ranks this is half a million ops, a million instructions. The ops' fields are read in C
(``map``) into arrays, each instruction's fields are placed as columns (an op's first instruction
at its offset, a second one after it) and the instructions are made from the columns in bulk
(:func:`codegen.slotted.made_all`); equal locations share one :class:`~codegen.ir.Ref`, and only
the edges :meth:`InstrDAG.build` keeps are made (:meth:`InstrDAG.from_ends`): no Python call per op.
"""

from __future__ import annotations

from itertools import pairwise, repeat
from operator import attrgetter, eq, is_, itemgetter
from typing import TYPE_CHECKING

from codegen.chunk_dag import ChunkDAG, DepKind, Side
from codegen.columns import TYPE_CODE, instr_columns, ints, refs, set_values
from codegen.instr_dag import Instr, InstrDAG
from codegen.ir import Buffer, OpType, Ref
from codegen.slotted import made_all

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

__all__ = ["expand_instructions"]

_KIND, _SRC, _DST, _OPERAND, _COUNT, _TIME = map(
    attrgetter, ("kind", "src", "dst", "operand", "count", "time")
)
_SENDTB, _RECVTB, _CHANNEL, _INSTANCE = map(attrgetter, ("sendtb", "recvtb", "channel", "instance"))
_RANK, _PRED, _SUCC = attrgetter("rank"), attrgetter("pred"), attrgetter("succ")
_PRED_SIDE, _SUCC_SIDE, _DEP_KIND = attrgetter("pred_side"), attrgetter("succ_side"), attrgetter("kind")
_TYPES = (OpType.SEND, OpType.RECV, OpType.RECV_REDUCE_COPY, OpType.COPY, OpType.REDUCE)
_SEND, _RECV, _RRC, _CPY, _RE = range(len(_TYPES))
_TYPE_CODES = tuple(TYPE_CODE[t] for t in _TYPES)  # in codegen.columns.TYPE_CODE
_BUFFERS = tuple(Buffer)  # by code (codegen.columns.BUFFER_CODE)


def expand_instructions(dag: ChunkDAG) -> InstrDAG:
    """Expand each chunk op into ``s``/``r``/``rrc``/``cpy``/``re`` instructions."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass

    x = _Ops(dag.ops)
    first, second = x.offset, x.offset[x.two] + 1  # each op's first instruction, and second ones
    n = int(x.per_op.sum())
    sent, received = first[x.remote], second[x.remote[x.two]]  # a remote op's send and receive
    known = {  # the int columns, as the later passes read them (codegen.columns.instr_columns)
        "rank": _ints(n, 0, (first, x.src_rank), (second, x.dst_rank[x.two])),
        "type": np.asarray(_TYPE_CODES, np.int64)[_type_codes(n, x, first, second)],
        "count": _ints(n, 0, (first, x.count), (second, x.count[x.two])),
        "instance": _ints(n, 0, (first, x.instance), (second, x.instance[x.two])),
        "send_to": _ints(n, -1, (sent, x.dst_rank[x.remote])),
        "recv_from": _ints(n, -1, (received, x.src_rank[x.remote])),
        "send_match": _ints(n, -1, (sent, sent + 1)),
        "recv_match": _ints(n, -1, (received, sent)),
    }
    columns = {name: _or_none(known[name]) for name in ("send_to", "recv_from", "send_match", "recv_match")}
    columns |= {name: known[name].tolist() for name in ("rank", "count", "instance")}
    columns |= {
        "type": _column(OpType, len(OpType))[known["type"]].tolist(),
        "src": _objects(
            n, (first, np.where(x.two_local, x.operand_ref, x.src_ref)), (second, x.second_src())
        ),
        "dst": _objects(n, (first, np.where(x.remote, None, x.dst_ref)), (second, x.dst_ref[x.two])),
        "tb_hint": _objects(n, (first, x.sendtb), (second, np.where(x.remote, x.recvtb, x.sendtb)[x.two])),
        "channel_hint": _objects(n, (first, x.channel), (second, x.channel[x.two])),
        "time": x.times(n, first, second),
    }
    instrs = made_all(Instr, n, columns)
    pred, succ, kind = _edges(dag, x)
    out = InstrDAG.from_ends(dag.info, instrs, (pred, succ), kind, np.arange(n))
    instr_columns(out).given(**known, **_locations(n, x, first, second))
    return out


def _locations(n: int, x: _Ops, first: np.ndarray, second: np.ndarray) -> dict[str, tuple]:
    """The instructions' sources and destinations as :func:`codegen.columns.refs` reads them
    (whether set, buffer code, index: 0 and 0 where not), placed as the ``src`` and ``dst``
    columns place their Refs."""
    import numpy as np

    def placed(*parts: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # (places, set, buffer, index)
        has, buffer, index = np.zeros(n, bool), np.zeros(n, np.int64), np.zeros(n, np.int64)
        for at, is_set, b, i in parts:
            has[at], buffer[at], index[at] = is_set, np.where(is_set, b, 0), np.where(is_set, i, 0)
        return has, buffer, index

    (sb, si), (db, di), (ob, oi) = x.src_at, x.dst_at, x.operand_at
    two, remote = x.two, x.remote
    src = placed(
        (first, np.ones(first.size, bool), np.where(x.two_local, ob, sb), np.where(x.two_local, oi, si)),
        (second, (~remote | x.reduces)[two], np.where(remote, ob, sb)[two], np.where(remote, oi, si)[two]),
    )
    dst = placed((first, ~remote, db, di), (second, np.ones(second.size, bool), db[two], di[two]))
    return {"src": src, "dst": dst}


class _Ops:
    """The ops' fields as arrays, and what each expands into: ``remote`` (a send and its receive),
    ``two_local`` (a reduce into another slot than its operand: ``cpy`` then ``re``), ``two``
    (either: two instructions), the ``offset`` of each op's first instruction. ``src_ref``,
    ``dst_ref`` and ``operand_ref`` (the reduce's local operand: ``dst`` unless given) are object
    arrays of the shared Refs; ``src_at``, ``dst_at`` and ``operand_at`` the same locations as
    (buffer codes, indices)."""

    def __init__(self, ops: Sequence) -> None:
        import numpy as np

        n = len(ops)
        src, dst, operand = list(map(_SRC, ops)), list(map(_DST, ops)), list(map(_OPERAND, ops))
        self.src_rank, self.dst_rank = ints(map(_RANK, src), n), ints(map(_RANK, dst), n)
        self.remote = self.src_rank != self.dst_rank
        self.reduces = np.fromiter(map(eq, map(_KIND, ops), repeat("reduce")), bool, n)
        has, given = set_values(operand)
        (_, src_buffer, src_index), (_, dst_buffer, dst_index) = refs(src), refs(dst)
        _, op_buffer, op_index = refs(given)
        self.src_ref, self.dst_ref, given_ref = _shared_refs(
            (src_buffer, src_index), (dst_buffer, dst_index), (op_buffer, op_index)
        )
        self.operand_ref = self.dst_ref.copy()
        self.operand_ref[has] = given_ref
        operand_buffer, operand_index = dst_buffer.copy(), dst_index.copy()
        operand_buffer[has], operand_index[has] = op_buffer, op_index
        self.src_at, self.dst_at = (src_buffer, src_index), (dst_buffer, dst_index)
        self.operand_at = (operand_buffer, operand_index)
        other = np.zeros(n, bool)  # a given operand that is not dst
        other[has] = (
            (ints(map(_RANK, given), len(given)) != self.dst_rank[has])
            | (op_buffer != dst_buffer[has])
            | (op_index != dst_index[has])
        )
        self.two_local = ~self.remote & self.reduces & other
        self.two = self.remote | self.two_local
        self.per_op = 1 + self.two
        self.offset = np.cumsum(self.per_op) - self.per_op
        self.count, self.instance = ints(map(_COUNT, ops), n), ints(map(_INSTANCE, ops), n)
        self.sendtb, self.recvtb, self.channel = (
            _column(map(f, ops), n) for f in (_SENDTB, _RECVTB, _CHANNEL)
        )
        self._times = list(map(_TIME, ops))

    def second_src(self) -> np.ndarray:
        """The second instructions' sources: a receive's local operand where it reduces (``rrc``),
        none for ``r``; a ``re`` after its ``cpy``, the op's source."""
        import numpy as np

        src = np.where(self.remote, np.where(self.reduces, self.operand_ref, None), self.src_ref)
        return src[self.two]

    def times(self, n: int, first: np.ndarray, second: np.ndarray) -> object:
        """The ``time`` column: a send's start, any other instruction's (a receive, a local op) end."""
        import numpy as np

        times = self._times
        if times.count(None) == len(times):
            return repeat(None, n)
        if None in times:
            starts = [None if t is None else t[0] for t in times]
            ends = [None if t is None else t[1] for t in times]
        else:
            starts, ends = list(map(itemgetter(0), times)), list(map(itemgetter(1), times))
        starts, ends = _column(starts, len(starts)), _column(ends, len(ends))
        return _objects(n, (first, np.where(self.remote, starts, ends)), (second, ends[self.two]))


def _shared_refs(*locations: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """Per list of locations (buffer codes, indices), an object array of their Refs, one Ref per
    distinct location over all lists (a Ref is frozen: sharing it changes nothing)."""
    import numpy as np

    keys = np.concatenate([index * len(_BUFFERS) + buffer for buffer, index in locations])
    distinct, inverse = np.unique(keys, return_inverse=True)  # few distinct: the slots of one rank
    table = [Ref(_BUFFERS[k % len(_BUFFERS)], k // len(_BUFFERS)) for k in distinct.tolist()]
    shared = _column(table, len(table))[inverse]
    bounds = np.cumsum([0] + [index.size for _, index in locations]).tolist()
    return [shared[a:b] for a, b in pairwise(bounds)]


def _column(values, n: int) -> np.ndarray:
    """``n`` Python objects as an object array (ints and None stay as they are)."""
    import numpy as np

    return np.fromiter(values, object, n)


def _objects(n: int, *placed: tuple[np.ndarray, np.ndarray]) -> list:
    """A column of ``n`` values, None but at the places given: ``(places, values)`` each (values:
    Python objects, or ints from an int array)."""
    import numpy as np

    out = np.full(n, None, object)
    for at, values in placed:
        out[at] = values if values.dtype == object else _column(values.tolist(), values.size)
    return out.tolist()


def _ints(n: int, blank: int, *placed: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """A column of ``n`` ints, ``blank`` but at the places given: ``(places, values)`` each."""
    import numpy as np

    out = np.full(n, blank, np.int64)
    for at, values in placed:
        out[at] = values
    return out


def _or_none(column: np.ndarray) -> list[int | None]:
    """A column of :func:`_ints` made with ``blank=-1`` as a list, None where -1."""
    import numpy as np

    out = np.full(column.size, None, object)
    at = column >= 0
    out[at] = _column(column[at].tolist(), int(at.sum()))
    return out.tolist()


def _type_codes(n: int, x: _Ops, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Each instruction's type (an index into ``_TYPES``): a remote op's send and then ``r``
    (``rrc`` for a reduce); a local copy's ``cpy``; a local reduce's ``re``, after a ``cpy`` of
    its operand where that is another slot."""
    import numpy as np

    local = np.where(x.reduces & ~x.two_local, _RE, _CPY)
    code = np.empty(n, np.int64)
    code[first] = np.where(x.remote, _SEND, local)
    code[second] = np.where(x.remote, np.where(x.reduces, _RRC, _RECV), _RE)[x.two]
    return code


def _edges(dag: ChunkDAG, x: _Ops) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges' ends and kinds (an object array): each remote op's send before its receive
    (``match``), each two-instruction local reduce's ``cpy`` before its ``re`` (``raw``), and each
    chunk dependency between the instructions that touch its sides: the source side is the send,
    or the local op's (last) instruction; the destination side is entered at the receive or the
    local op's first instruction, and left at the op's last."""
    import numpy as np

    deps, m = dag.deps, len(dag.deps)
    src_side = x.offset + x.two_local
    dst_in, dst_out = x.offset + x.remote, x.offset + x.per_op - 1
    pred, succ = ints(map(_PRED, deps), m), ints(map(_SUCC, deps), m)
    pred_src = np.fromiter(map(is_, map(_PRED_SIDE, deps), repeat(Side.SRC)), bool, m)
    succ_src = np.fromiter(map(is_, map(_SUCC_SIDE, deps), repeat(Side.SRC)), bool, m)
    pred = np.where(pred_src, src_side[pred], dst_out[pred])
    succ = np.where(succ_src, src_side[succ], dst_in[succ])
    pairs = x.offset[x.two]
    kinds = _column((DepKind.RAW, DepKind.MATCH), 2)[x.remote[x.two].astype(np.int64)]
    kind = np.concatenate((kinds, _column(map(_DEP_KIND, deps), m)))
    return np.concatenate((pairs, pred)), np.concatenate((pairs + 1, succ)), kind
