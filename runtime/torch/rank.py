"""One rank's part of an IR on torch.distributed: its buffers, and the rounds of the level schedule.

A :class:`RankExecutor` runs in the process of its rank, in a process group whose ranks are the
IR's ranks (the default group, or the one given). Each round runs this rank's steps of that level
(``runtime.torch.ops``), then posts every transfer of the round with one ``batch_isend_irecv``
(sends, then receives, each sorted by peer, channel and sequence, the order both ends compute;
Gloo matches by peer and tag in that order, and the tag is the channel) and waits for each of
them. A wait that fails, or takes longer than ``timeout_s``, ends the run with a
:class:`PeerFailure` naming the level and the peer (Gloo answers per transfer; NCCL for the batch,
and its own watchdog ends a rank whose peer never comes).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist

from codegen.ir import Buffer
from runtime.errors import ExecutionError
from runtime.executor import Executor
from runtime.numpy.memory import garbage
from runtime.program import buffer_layout, call_aliases
from runtime.torch.errors import Failure, Fault, short
from runtime.torch.launch import DEFAULT_TIMEOUT_S
from runtime.torch.ops import HANDLERS, Local, reducer, storage_dtype, torch_dtype
from runtime.torch.schedule import Schedule, build_schedule

if TYPE_CHECKING:
    from codegen.ir import IR
    from synth.collectives import Collective

__all__ = ["DIED_EXIT", "PeerFailure", "RankExecutor", "wait_all"]

DIED_EXIT = 70
"""The exit status of a rank an injected ``die`` fault ends."""


class PeerFailure(ExecutionError):
    """A transfer of this rank failed or timed out; ``failure`` says where and with whom."""

    def __init__(self, failure: Failure) -> None:
        at = f" at level {failure.level}" if failure.level >= 0 else ""
        super().__init__(f"rank {failure.rank}{at}: {failure.message}")
        self.failure = failure

    def __reduce__(self):
        return (PeerFailure, (self.failure,))


def wait_all(works: list, what: list[tuple[str, int]], timeout_s: float, rank: int, level: int) -> None:
    """Wait for every work of a batch within ``timeout_s`` in all; ``what[i]`` is (verb, peer) of
    op ``i``. Raise :class:`PeerFailure` for the first that fails."""
    deadline = time.monotonic() + timeout_s
    per_op = len(works) == len(what)
    for i, work in enumerate(works):
        left = max(deadline - time.monotonic(), 0.001)
        try:
            work.wait(timeout=timedelta(seconds=left))
        except RuntimeError as exc:
            verb, peer = what[i] if per_op else ("the exchange with", what[0][1])
            message = f"{verb} rank {peer} failed: {short(exc)}"
            raise PeerFailure(Failure(rank, "peer", level, message, peer if per_op else None)) from None


class RankExecutor(Executor):
    """Rank ``rank`` of ``ir`` at one size, element type, reduction and placement: :meth:`load` its
    input, :meth:`execute` the rounds (every rank of the group at once), read :meth:`output`.
    ``device`` holds the buffers (``cpu`` for Gloo, this rank's GPU for NCCL); ``on_level`` hears
    each level as it starts (and the number of levels once done). ``fault``, if it names this rank,
    is injected when the rank reaches its level (``runtime.torch.errors.Fault``)."""

    def __init__(
        self,
        ir: IR,
        size_bytes: int,
        dtype: str | np.dtype,
        op: str,
        *,
        rank: int,
        group: object | None = None,
        device: str | torch.device = "cpu",
        inplace: bool = False,
        declared: Collective | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        schedule: Schedule | None = None,
        on_level: Callable[[int], None] | None = None,
        fault: Fault | None = None,
    ) -> None:
        super().__init__(ir, size_bytes, dtype, op, inplace, declared)
        self.fault = fault if fault is not None and fault.rank == rank else None
        if not 0 <= rank < ir.num_ranks:
            raise ExecutionError(f"{ir.name}: rank {rank}: expected 0 to {ir.num_ranks - 1}")
        self.rank, self.group, self.device = rank, group, torch.device(device)
        self.timeout_s = timeout_s
        self.schedule = schedule or build_schedule(self.program)
        self.on_level = on_level or (lambda level: None)
        self.storage = storage_dtype(self.dtype)
        alias = call_aliases(self.program, inplace)[rank]
        where, base_chunks = buffer_layout(self.program.chunks[rank], alias)
        self.kind = torch_dtype(self.dtype)
        self._bases = {
            b: torch.empty(c * self.chunk_elems, dtype=self.kind, device=self.device)
            for b, c in base_chunks.items()
        }
        self.buffers = {
            b: self._bases[base].narrow(
                0, off * self.chunk_elems, self.program.chunks[rank][b] * self.chunk_elems
            )
            for b, (base, off) in where.items()
        }
        self.local = Local(self.buffers, self.chunk_elems, reducer(self.op, self.dtype))

    @property
    def levels(self) -> int:
        return self.schedule.levels

    def load(self, data: np.ndarray | torch.Tensor) -> None:
        """Start of a call: the input holds ``data`` (this rank's, 1-D), everything else garbage."""
        want = self.buffers[Buffer.INPUT].numel()
        if int(data.numel() if isinstance(data, torch.Tensor) else np.size(data)) != want:
            raise ExecutionError(f"{self.ir.name}: input of rank {self.rank}: expected {want} elements")
        for base in self._bases.values():
            base.fill_(garbage(self.storage))
        if not isinstance(data, torch.Tensor):
            data = torch.from_numpy(np.ascontiguousarray(data).reshape(-1).view(self.storage))
        self.buffers[Buffer.INPUT].copy_(data.reshape(-1))
        self.local.inbox.clear()
        self.local.outbox.clear()

    def output(self) -> torch.Tensor:
        """This rank's output buffer (a view, valid until the next :meth:`load`)."""
        return self.buffers[Buffer.OUTPUT]

    def output_numpy(self) -> np.ndarray:
        """The output as NumPy holds it, in the call's element type (a copy)."""
        return self.output().cpu().numpy().view(self.dtype).copy()

    def execute(self) -> None:
        """Run every round; raises :class:`PeerFailure` when an exchange fails or times out."""
        for level in range(self.levels):
            self.on_level(level)
            grow = self._strike(level)
            for step in self.schedule.steps[self.rank][level]:
                HANDLERS[step.tx.type](self.local, step)
            self._exchange(level, grow)
        self.on_level(self.levels)

    def _strike(self, level: int) -> int:
        """Inject the fault due at ``level``: end the process, stop forever, or (the number
        returned) grow this level's transfers by one element."""
        if self.fault is None or self.fault.level != level:
            return 0
        if self.fault.kind == "die":
            os._exit(DIED_EXIT)
        if self.fault.kind == "hang":
            while True:
                time.sleep(3600)
        return 1

    def _exchange(self, level: int, grow: int = 0) -> None:
        sends = self.schedule.sends[self.rank][level]
        receives = self.schedule.receives[self.rank][level]
        if not sends and not receives:
            return
        ops, what = [], []
        for t in sends:
            data = self.local.outbox.pop(t.id)
            if grow:
                data = torch.cat([data, data[:grow]])
            ops.append(self._p2p(dist.isend, data, t.dst, t.channel))
            what.append(("send to", t.dst))
        for t in receives:
            buf = torch.empty(t.count * self.chunk_elems + grow, dtype=self.kind, device=self.device)
            self.local.inbox[t.id] = buf[: t.count * self.chunk_elems]
            ops.append(self._p2p(dist.irecv, buf, t.src, t.channel))
            what.append(("receive from", t.src))
        wait_all(dist.batch_isend_irecv(ops), what, self.timeout_s, self.rank, level)

    def _p2p(self, op: Callable, tensor: torch.Tensor, peer: int, channel: int) -> dist.P2POp:
        if self.group is None:
            return dist.P2POp(op, tensor, peer, tag=channel)
        return dist.P2POp(op, tensor, group=self.group, tag=channel, group_peer=peer)
