"""The data semantics of each step type: one small function per :class:`OpType`, in ``HANDLERS``.

A handler sees one primitive call (:class:`Call`): ``cnt`` chunks' worth of one tile, already cleared
to run (its dependencies met, data waiting if it receives, room in the FIFO if it sends). The local
operands are always the op's own rank's (``rrc``/``rrs``/``rrcs`` reduce with a LOCAL ``src``), and
every reduction is ``received (op) local`` or, for ``re``, ``dst (op) src1 (op) src2 ...``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from codegen.ir import Buffer, OpType, Ref
from runtime.errors import ExecutionError, UninitializedRead
from runtime.numpy.memory import Message, RankMemory
from runtime.program import Transmission

__all__ = ["HANDLERS", "Call"]


class Call:
    """One primitive call: ``tc`` chunks from chunk offset ``c`` of the transmission, in tile ``tile``
    (elements ``[g, g + nelem)`` of each chunk; with ``tc`` > 1 the chunks fill one tile whole)."""

    __slots__ = (
        "c",
        "g",
        "incoming",
        "ir_name",
        "mem",
        "nelem",
        "outgoing",
        "rank",
        "tb",
        "tc",
        "tile",
        "tx",
        "ufunc",
        "written",
    )

    def __init__(
        self,
        ir_name: str,
        rank: int,
        tb: int,
        mem: RankMemory,
        tx: Transmission,
        c: int,
        tc: int,
        tile: int,
        g: int,
        nelem: int,
        ufunc: np.ufunc,
        incoming: deque[Message] | None,
        outgoing: deque[Message] | None,
    ) -> None:
        self.ir_name, self.rank, self.tb, self.mem, self.tx = ir_name, rank, tb, mem, tx
        self.c, self.tc, self.tile, self.g, self.nelem = c, tc, tile, g, nelem
        self.ufunc, self.incoming, self.outgoing = ufunc, incoming, outgoing
        self.written = 0

    # -- locations -------------------------------------------------------------------------------
    def _span(self, ref: Ref) -> tuple[Buffer, int, int, int]:
        base, chunk = self.mem.locate(ref.buffer, ref.index + self.c)
        lo = chunk * self.mem.chunk_elems + self.g
        return base, chunk, lo, lo + self.nelem * self.tc

    def _read(self, ref: Ref) -> np.ndarray:
        base, chunk, lo, hi = self._span(ref)
        bad = self.mem.first_unwritten(base, chunk, self.tc, self.tile)
        if bad is not None:
            raise UninitializedRead(
                self.ir_name,
                self.rank,
                self.tb,
                self.tx.op,
                self.tile,
                ref.buffer.value,
                ref.index + self.c + bad - chunk,
                self.tx.label(),
            )
        return self.mem.bases[base][lo:hi]

    # -- what handlers use -------------------------------------------------------------------------
    def src(self) -> np.ndarray:
        return self._read(self.tx.src)

    def srcs(self) -> list[np.ndarray]:
        return [self._read(ref) for ref in self.tx.srcs]

    def dst(self) -> np.ndarray:
        """The destination as read (``re`` reduces into what it holds)."""
        return self._read(self.tx.dst)

    def write_dst(self) -> np.ndarray:
        """The destination to write: in-flight messages viewing it are copied out first."""
        base, chunk, lo, hi = self._span(self.tx.dst)
        self.mem.before_write(base, lo, hi)
        self.mem.mark_written(base, chunk, self.tc, self.tile)
        self.written += hi - lo
        return self.mem.bases[base][lo:hi]

    def receive(self) -> np.ndarray:
        msg = self.incoming.popleft()
        want = self.nelem * self.tc
        if msg.data.size != want:
            s_rank, s_tb, s_op = msg.sender
            raise ExecutionError(
                f"{self.ir_name}: rank {self.rank} tb {self.tb} op {self.tx.op} ({self.tx.label()}) "
                f"receives {want} elements in tile {self.tile}, but rank {s_rank} tb {s_tb} op {s_op} "
                f"sent {msg.data.size}: send and receive counts differ on this connection"
            )
        msg.base = None  # consumed: the sender may overwrite its memory from now on
        return msg.data

    def send(self, data: np.ndarray) -> None:
        """Send data this call computed (it owns it)."""
        self.outgoing.append(Message(data, (self.rank, self.tb, self.tx.op)))

    def send_view(self, ref: Ref, check: bool = True) -> None:
        """Send a location's current data without copying it (see ``memory`` on why that is safe);
        ``check=False`` for a destination this call has just written."""
        base, _, lo, hi = self._span(ref)
        data = self._read(ref) if check else self.mem.bases[base][lo:hi]
        msg = Message(data, (self.rank, self.tb, self.tx.op), base, lo, hi)
        self.mem.add_pending(msg)
        self.outgoing.append(msg)


# -- one function per step type --------------------------------------------------------------------
def _send(call: Call) -> None:
    call.send_view(call.tx.src)


def _recv(call: Call) -> None:
    np.copyto(call.write_dst(), call.receive())


def _recv_copy_send(call: Call) -> None:
    np.copyto(call.write_dst(), call.receive())
    call.send_view(call.tx.dst, check=False)


def _recv_reduce_send(call: Call) -> None:
    call.send(call.ufunc(call.receive(), call.src()))


def _recv_reduce_copy(call: Call) -> None:
    received, local = call.receive(), call.src()
    call.ufunc(received, local, out=call.write_dst())


def _recv_reduce_copy_send(call: Call) -> None:
    _recv_reduce_copy(call)
    call.send_view(call.tx.dst, check=False)


def _copy(call: Call) -> None:
    np.copyto(call.write_dst(), call.src())


def _reduce(call: Call) -> None:
    acc, sources = call.dst(), call.srcs()
    out = call.write_dst()
    for source in sources:
        call.ufunc(acc, source, out=out)
        acc = out


def _nop(call: Call) -> None:
    """Never dispatched: the loader folds nops into the next step (``runtime.program``)."""


HANDLERS: dict[OpType, Callable[[Call], None]] = {
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
"""Step type -> its data semantics; a test checks it covers every :class:`OpType`."""
