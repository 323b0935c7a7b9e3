"""This process as one rank of a job a launcher started (``torchrun``, on one machine or several).

Nothing is spawned: the process joins the group the launcher's variables describe (``env://``),
runs every job for its own rank (``runtime.torch.jobs``), and then every rank tells every other
what came of it (``runtime.torch.status.exchange``), so all ranks return the same values, or raise
the same error naming the rank at fault and the level. Only rank 0 reports (``reports``).
"""

from __future__ import annotations

import os
from typing import Any

from common.errors import XcclError
from runtime.errors import ExecutionError
from runtime.torch.errors import Failure, settle
from runtime.torch.jobs import RankJobs
from runtime.torch.launch import join, resolve_dist
from runtime.torch.rank import PeerFailure
from runtime.torch.status import exchange

__all__ = ["Joined"]


class Joined:
    """The launched job's group, from this rank (same interface as ``Pool``: :meth:`call`,
    :meth:`prepared`, :meth:`close`)."""

    def __init__(self, dist: str, timeout_s: float) -> None:
        import torch.distributed as td

        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))
        self.dist = resolve_dist(dist, local)
        self.timeout_s = timeout_s
        self.name, self.levels, self._level = "the launched job", 0, -1
        try:
            device = join(self.dist, timeout_s)
        except Exception as exc:
            raise ExecutionError(
                f"rank {self.rank}: could not join the launched job's process group: {exc}"
            ) from None
        self.control = td.new_group(backend="gloo") if self.dist != "gloo" else None
        self.jobs = RankJobs(self.rank, device, timeout_s, self._at)

    @property
    def reports(self) -> bool:
        """Whether this rank prints the report (rank 0 does)."""
        return self.rank == 0

    def _at(self, level: int) -> None:
        self._level = level

    def prepared(self, name: str, levels: int) -> None:
        self.name, self.levels = name, levels

    def call(self, job: str, **args: Any) -> list[Any]:
        """Run ``job`` on this rank; every rank's value, agreed by all."""
        self._level = -1
        try:
            reply: tuple[str, Any] = ("ok", self.jobs.handle(job, args))
        except PeerFailure as exc:
            reply = ("fault", exc.failure)
        except XcclError as exc:
            reply = ("error", exc)
        statuses = exchange(
            reply,
            rank=self.rank,
            world=self.world,
            group=self.control,
            timeout_s=self.timeout_s,
            level=self._level,
        )
        replies = [("fault", s) if isinstance(s, Failure) else s for s in statuses]
        return settle(self.name, self.levels, replies)

    def close(self) -> None:
        import torch.distributed as td

        if td.is_initialized():
            td.destroy_process_group()
