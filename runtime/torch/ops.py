"""The data semantics of each step type on torch tensors: one small function per :class:`OpType`,
in ``HANDLERS`` (the same semantics as ``runtime.numpy.ops``, on whole transmissions).

A handler sees one :class:`Step` of the level schedule on one rank (:class:`Local`): its local
operands are views of the rank's buffers, the data it receives was exchanged in an earlier round,
and what it sends is set aside as a tensor of its own (a snapshot: later steps of the same round
may overwrite the source before the exchange).

Element types: torch cannot add or compare ``uint32``/``uint64`` on the CPU, so unsigned types
wider than a byte are held in the signed type of the same width (:func:`storage_dtype`): sums and
products give the same bits in two's complement, and min/max compare with the sign bit flipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from codegen.ir import Buffer, OpType, Ref

if TYPE_CHECKING:
    from runtime.program import Transmission
    from runtime.torch.schedule import Step

__all__ = ["HANDLERS", "Local", "Reducer", "reducer", "storage_dtype", "torch_dtype"]

Reducer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]
"""``reduce(a, b, out)``: ``out = a (op) b`` elementwise; ``out`` may be ``a`` or ``b``."""

_SIGNED_VIEW = {np.dtype("uint32"): np.dtype("int32"), np.dtype("uint64"): np.dtype("int64")}
_FUNCS = {"sum": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum}


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The NumPy type whose torch twin holds ``dtype``'s bits (itself, or the signed type of the same
    width for ``uint32``/``uint64``)."""
    return _SIGNED_VIEW.get(np.dtype(dtype), np.dtype(dtype))


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch type a buffer of ``dtype`` elements is held in (see :func:`storage_dtype`)."""
    return torch.from_numpy(np.empty(0, storage_dtype(dtype))).dtype


def reducer(op: str, dtype: np.dtype) -> Reducer:
    """``op`` (sum, prod, min, max) on tensors holding ``dtype`` elements in their storage type."""
    func = _FUNCS[op]
    if np.dtype(dtype) not in _SIGNED_VIEW or op in ("sum", "prod"):
        return lambda a, b, out: func(a, b, out=out)
    flip = torch.iinfo(torch_dtype(dtype)).min

    def unsigned(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        func(torch.bitwise_xor(a, flip), torch.bitwise_xor(b, flip), out=out)
        out.bitwise_xor_(flip)

    return unsigned


class Local:
    """One rank's buffers and the data in flight, as the handlers use them."""

    __slots__ = ("buffers", "chunk", "inbox", "outbox", "reduce")

    def __init__(self, buffers: dict[Buffer, torch.Tensor], chunk: int, reduce: Reducer) -> None:
        self.buffers, self.chunk, self.reduce = buffers, chunk, reduce
        self.inbox: dict[int, torch.Tensor] = {}
        self.outbox: dict[int, torch.Tensor] = {}

    def at(self, ref: Ref, count: int) -> torch.Tensor:
        """``count`` chunks from ``ref`` (a view of the rank's buffer)."""
        return self.buffers[ref.buffer].narrow(0, ref.index * self.chunk, count * self.chunk)

    def received(self, step: Step) -> torch.Tensor:
        return self.inbox.pop(step.incoming)

    def send(self, step: Step, data: torch.Tensor) -> None:
        """Set ``data`` aside for the exchange; it must not be a view of a buffer."""
        self.outbox[step.outgoing] = data


def _send(loc: Local, step: Step) -> None:
    loc.send(step, loc.at(step.tx.src, step.tx.count).clone())


def _recv(loc: Local, step: Step) -> None:
    loc.at(step.tx.dst, step.tx.count).copy_(loc.received(step))


def _recv_copy_send(loc: Local, step: Step) -> None:
    data = loc.received(step)
    loc.at(step.tx.dst, step.tx.count).copy_(data)
    loc.send(step, data)


def _recv_reduce_send(loc: Local, step: Step) -> None:
    data = loc.received(step)
    loc.reduce(data, loc.at(step.tx.src, step.tx.count), data)
    loc.send(step, data)


def _recv_reduce_copy(loc: Local, step: Step) -> None:
    tx = step.tx
    loc.reduce(loc.received(step), loc.at(tx.src, tx.count), loc.at(tx.dst, tx.count))


def _recv_reduce_copy_send(loc: Local, step: Step) -> None:
    _recv_reduce_copy(loc, step)
    loc.send(step, loc.at(step.tx.dst, step.tx.count).clone())


def _copy(loc: Local, step: Step) -> None:
    tx = step.tx
    src = loc.at(tx.src, tx.count)
    if _shares(loc, tx):
        src = src.clone()  # one buffer, or an in-place call's aliases: never copy a range onto itself
    loc.at(tx.dst, tx.count).copy_(src)


def _shares(loc: Local, tx: Transmission) -> bool:
    """Whether the source and destination buffers overlap in memory."""
    a, b = loc.buffers[tx.src.buffer], loc.buffers[tx.dst.buffer]
    a_lo, b_lo = a.data_ptr(), b.data_ptr()
    return a_lo < b_lo + b.numel() * b.element_size() and b_lo < a_lo + a.numel() * a.element_size()


def _reduce(loc: Local, step: Step) -> None:
    """A chain of ``re`` ops: ``dst = dst (op) src1 (op) src2 ...``; every operand moves the
    count of the chain's last op, as the runtime does."""
    tx = step.tx
    dst = loc.at(tx.dst, tx.count)
    for ref in tx.srcs:
        loc.reduce(dst, loc.at(ref, tx.count), dst)


def _nop(loc: Local, step: Step) -> None:
    """Never dispatched: the loader folds nops into the next step (``runtime.program``)."""


HANDLERS: dict[OpType, Callable[[Local, Step], None]] = {
    OpType.SEND: _send,
    OpType.RECV: _recv,
    OpType.RECV_COPY_SEND: _recv_copy_send,
    OpType.RECV_REDUCE_SEND: _recv_reduce_send,
    OpType.RECV_REDUCE_COPY: _recv_reduce_copy,
    OpType.RECV_REDUCE_COPY_SEND: _recv_reduce_copy_send,
    OpType.COPY: _copy,
    OpType.REDUCE: _reduce,
    OpType.NOP: _nop,
}
"""Step type -> its semantics on torch tensors; a test checks it covers every :class:`OpType`."""
