"""What one rank's process does for the torch backend, job by job (the same in a spawned worker and
under ``torchrun``).

A benchmark drives every rank through the same jobs: ``prepare`` (the executor of this rank for
one call, its seeded input, and torch's own collective for the same call), then ``reset`` (inputs
back in place, untimed), ``run`` (a barrier, then the rounds, timed by this rank's clock: the
harness takes the slowest rank) and ``check`` (this rank's output against the NumPy reference of
the collective, computed here from the same seeded inputs), and the same three for the peer. A
schedule with a receive nothing sends to (``Schedule.stuck``) runs without it: its wrong output is
reported with the stuck receive, and a right one as the deadlock a real runtime would meet. A
rank checks only its own output, so nothing is gathered: under ``torchrun`` on several machines
every rank checks itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from codegen.ir import IR
from runtime.errors import BlockedStep, DeadlockError, ExecutionMismatch
from runtime.reference import Reference, check_outputs, executor_inputs, reference
from runtime.torch.errors import Failure, Fault, short
from runtime.torch.peer import Peer, peer_function, peer_refusal
from runtime.torch.rank import PeerFailure, RankExecutor
from runtime.torch.schedule import Stuck
from synth.collectives import Collective

__all__ = ["Call", "Prepared", "RankJobs"]


@dataclass(frozen=True)
class Call:
    """One call to prepare: the IR at nccl-tests' size, element type, reduction and placement; the
    seed of the inputs; ``declared`` the expected result of a custom IR; ``peer`` whether torch's
    own collective is measured too."""

    ir: IR
    size_bytes: int
    dtype: str
    op: str
    inplace: bool
    declared: Collective | None
    seed: int
    peer: bool
    fault: Fault | None = None
    """A fault to inject in our schedule's runs (``runtime.torch.errors.Fault``)."""


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` tells the caller: the levels of the schedule, and torch's call (or why
    there is none)."""

    levels: int
    peer: str | None
    peer_refused: str | None


class RankJobs:
    """Rank ``rank``'s jobs in the default process group (``device``: where its buffers live)."""

    def __init__(
        self, rank: int, device: torch.device, timeout_s: float, on_level: Callable[[int], None]
    ) -> None:
        self.rank, self.device, self.timeout_s, self.on_level = rank, device, timeout_s, on_level
        self.ex: RankExecutor | None = None
        self.peer: Peer | None = None
        self.input: np.ndarray | None = None
        self._inputs: list[np.ndarray] = []
        self._reference: Reference | None = None

    def handle(self, job: str, args: dict[str, Any]) -> Any:
        """Run job ``job``; ``args`` are its keywords."""
        return getattr(self, f"job_{job}")(**args)

    def job_prepare(self, call: Call) -> Prepared:
        self.ex = self.peer = self._reference = None
        self.ex = RankExecutor(
            call.ir,
            call.size_bytes,
            call.dtype,
            call.op,
            rank=self.rank,
            device=self.device,
            inplace=call.inplace,
            declared=call.declared,
            timeout_s=self.timeout_s,
            on_level=self.on_level,
            fault=call.fault,
        )
        self._inputs = executor_inputs(self.ex, call.seed)
        self.input = self._inputs[self.rank]
        refused = peer_refusal(self.ex.collective, self.ex.dtype, self.ex.op) if call.peer else "not asked"
        if refused is None:
            self.peer = Peer(
                self.ex.collective,
                self.rank,
                self.ex.chunk_elems,
                self.ex.dtype,
                self.ex.op,
                None,
                self.device,
            )
        name = peer_function(call.ir.collective)
        return Prepared(self.ex.levels, name if refused is None else None, refused)

    def job_reset(self) -> None:
        self._need().load(self.input)

    def job_run(self) -> float:
        return self._timed(self._need().execute)

    def job_check(self) -> bool:
        ex = self._need()
        return self._check(ex.output_numpy())

    def job_peer_reset(self) -> None:
        self._need_peer().reset(self.input)

    def job_peer_run(self) -> float:
        return self._timed(self._need_peer().run)

    def job_peer_check(self) -> bool:
        return self._check(self._need_peer().output_numpy(self._need().dtype))

    def job_release(self) -> None:
        self.ex = self.peer = self.input = self._reference = None
        self._inputs = []

    # -- helpers ------------------------------------------------------------------------------------
    def _need(self) -> RankExecutor:
        if self.ex is None:
            raise RuntimeError("no call prepared on this rank")
        return self.ex

    def _need_peer(self) -> Peer:
        if self.peer is None:
            raise RuntimeError("torch's own collective was not prepared on this rank")
        return self.peer

    def _timed(self, body: Callable[[], None]) -> float:
        """``body`` after a barrier of every rank, in microseconds of this rank's clock."""
        try:
            dist.barrier(async_op=True).wait(timeout=timedelta(seconds=self.timeout_s))
        except RuntimeError as exc:
            raise PeerFailure(
                Failure(self.rank, "peer", -1, f"the barrier before the run failed: {short(exc)}")
            ) from None
        start = time.perf_counter()
        body()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return (time.perf_counter() - start) * 1e6

    def _check(self, output: np.ndarray) -> bool:
        """This rank's output against the reference (True), or False when nothing states it."""
        ex = self._need()
        if ex.collective is None:
            return False
        if self._reference is None:
            self._reference = reference(ex.collective, self._inputs, ex.chunk_elems, ex.op)
        outputs: list[np.ndarray | None] = [None] * ex.ir.num_ranks
        outputs[self.rank] = output
        stuck = ex.schedule.stuck
        try:
            check_outputs(self._reference, outputs, ex.ir.name)
        except ExecutionMismatch as exc:
            if not stuck:
                raise
            e = exc
            raise ExecutionMismatch(
                e.ir_name, e.rank, e.buffer, e.chunk, e.index, e.expected, e.actual, _stuck_words(stuck)
            ) from None
        if stuck:
            raise DeadlockError(ex.ir.name, tuple(_blocked(s) for s in stuck))
        return True


def _stuck_words(stuck: tuple[Stuck, ...]) -> str:
    more = f" and {len(stuck) - 1} more" if len(stuck) > 1 else ""
    return f"{stuck[0]}{more}; it and what waits on it did not run"


def _blocked(stuck: Stuck) -> BlockedStep:
    rank, tb, _ = stuck.node
    reason = f"({stuck.label}) waits for a transfer never sent ({stuck.connection}); the outputs match all the same"
    return BlockedStep(rank, tb, stuck.op, 0, reason)
