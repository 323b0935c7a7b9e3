"""Agreeing on an outcome: every rank tells every other what it saw, and notices who is missing.

A collective (``all_gather``) in a group that has lost a rank fails or hangs without saying which
rank is gone. :func:`exchange` instead sends this rank's status to every other rank and receives
theirs point to point, waiting for each one separately (Gloo answers per transfer), so a rank that
died, hung or is running something else is named: its status is a :class:`Failure` of kind
``absent``. Statuses are small Python objects (pickled into a fixed-size message, on the CPU: the
control group must be Gloo). The tag keeps these messages apart from the schedule's (whose tags are
channels, below 32).
"""

from __future__ import annotations

import pickle
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from runtime.torch.errors import Failure, short

__all__ = ["MESSAGE_BYTES", "STATUS_TAG", "exchange"]

MESSAGE_BYTES = 16384
"""The size of one status message (a larger status is replaced by a failure saying so)."""
STATUS_TAG = 1 << 16


def _pack(status: Any, rank: int, level: int) -> torch.Tensor:
    data = pickle.dumps(status)
    if len(data) + 8 > MESSAGE_BYTES:
        data = pickle.dumps(
            Failure(rank, "error", level, f"its status took {len(data)} bytes (limit {MESSAGE_BYTES})")
        )
    buf = torch.zeros(MESSAGE_BYTES, dtype=torch.uint8)
    buf[:8] = torch.tensor(list(len(data).to_bytes(8, "little")), dtype=torch.uint8)
    buf[8 : 8 + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return buf


def _unpack(buf: torch.Tensor) -> Any:
    raw = bytes(buf.numpy())
    size = int.from_bytes(raw[:8], "little")
    return pickle.loads(raw[8 : 8 + size])


def exchange(
    status: Any, *, rank: int, world: int, group: object | None, timeout_s: float, level: int
) -> list[Any]:
    """Every rank's status (this rank's is ``status``), in rank order; a rank whose status did not
    arrive within ``timeout_s`` (or whose connection failed) gets a :class:`Failure` of kind
    ``absent`` at ``level``, the level this rank is at. Every rank of ``group`` must call it (with
    the same ``level`` for a meaningful report)."""
    out: list[Any] = [None] * world
    out[rank] = status
    if world == 1:
        return out
    mine = _pack(status, rank, level)
    peers = [p for p in range(world) if p != rank]
    inbox = {p: torch.empty(MESSAGE_BYTES, dtype=torch.uint8) for p in peers}
    ops = [_op(dist.isend, mine, p, group) for p in peers] + [
        _op(dist.irecv, inbox[p], p, group) for p in peers
    ]
    works = dist.batch_isend_irecv(ops)
    receives = works[len(peers) :] if len(works) == len(ops) else [works[-1]] * len(peers)
    deadline = time.monotonic() + timeout_s
    for p, work in zip(peers, receives, strict=True):
        try:
            work.wait(timeout=timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
            out[p] = _unpack(inbox[p])
        except RuntimeError as exc:
            out[p] = Failure(p, "absent", level, _absent(timeout_s, exc))
    if len(works) == len(ops):  # Gloo: a send whose Work is dropped unfinished is cancelled
        for p, work in zip(peers, works[: len(peers)], strict=True):
            try:
                work.wait(timeout=timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
            except RuntimeError as exc:
                if not isinstance(out[p], Failure):
                    out[p] = Failure(p, "absent", level, _absent(timeout_s, exc))
    return out


def _absent(timeout_s: float, exc: Exception) -> str:
    text = short(exc)
    if "Timed out" in text or "timed out" in text:
        return f"did not take part within {timeout_s:g} s (it died, hung or is running something else)"
    return f"is gone ({text})"


def _op(op: Any, tensor: torch.Tensor, peer: int, group: object | None) -> dist.P2POp:
    if group is None:
        return dist.P2POp(op, tensor, peer, tag=STATUS_TAG)
    return dist.P2POp(op, tensor, group=group, tag=STATUS_TAG, group_peer=peer)
