"""Joining a process group: which torch.distributed backend, and where this rank's buffers live.

Both ways of starting ranks end here: the processes the CLI spawns on one machine (``Pool``, which
sets ``MASTER_ADDR``/``MASTER_PORT`` to a free loopback port and ``RANK``/``WORLD_SIZE`` for each
process) and a launcher's (``torchrun``, which sets the same variables, and ``LOCAL_RANK``, on each
machine). :func:`join` calls ``init_process_group`` with ``env://`` rendezvous either way. Gloo keeps
the buffers in host memory; NCCL puts each rank on its own GPU (``LOCAL_RANK``), as NCCL requires.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING

from runtime.errors import ExecutionError

if TYPE_CHECKING:
    import torch

__all__ = ["DEFAULT_TIMEOUT_S", "DIST_BACKENDS", "LAUNCHED_ENV", "in_launched_job", "join", "resolve_dist"]

DEFAULT_TIMEOUT_S = 60.0
"""How long a rank waits for one exchange (or for its peers to join) before the run fails; the
default of ``timeout_s`` everywhere (``--timeout``)."""

DIST_BACKENDS = ("auto", "gloo", "nccl")
"""``auto``: NCCL when every rank of this machine has a GPU of its own, else Gloo."""
LAUNCHED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""What a launcher (``torchrun``) sets for each process: their presence means ranks already exist."""


def in_launched_job() -> bool:
    """Whether this process is one rank of a job a launcher started (``torchrun``)."""
    return all(os.environ.get(name) for name in LAUNCHED_ENV)


def resolve_dist(dist: str, local_ranks: int) -> str:
    """``gloo`` or ``nccl`` for ``dist`` (one of :data:`DIST_BACKENDS`) with ``local_ranks``
    processes on this machine; NCCL needs a GPU per process."""
    if dist not in DIST_BACKENDS:
        raise ExecutionError(f"torch backend {dist!r}: expected one of {', '.join(DIST_BACKENDS)}")
    if dist == "gloo":
        return dist
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if dist == "auto":
        return "nccl" if gpus >= local_ranks else "gloo"
    if gpus < local_ranks:
        raise ExecutionError(
            f"nccl needs one GPU per rank: {local_ranks} rank(s) on this machine, {gpus} GPU(s) here "
            "(use gloo, or fewer ranks per machine)"
        )
    return dist


def join(dist: str, timeout_s: float) -> torch.device:
    """Initialise the default process group from the environment (``env://``) with backend
    ``dist`` (``gloo`` or ``nccl``) and ``timeout_s`` for its collectives; the device of this
    rank's buffers."""
    import torch
    import torch.distributed as td

    torch.set_num_threads(1)
    device = torch.device("cpu")
    if dist == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    td.init_process_group(
        dist,
        init_method="env://",
        timeout=timedelta(seconds=timeout_s),
        device_id=device if dist == "nccl" else None,
    )
    return device
