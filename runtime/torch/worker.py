"""The process of one rank in a :class:`~runtime.torch.pool.Pool`: join the group, then run jobs.

Started by the pool as ``python -m runtime.torch.worker FD PROGRESS_FD RANK`` with the rendezvous
variables in its environment (a plain subprocess, so the caller's main module is never imported
again, as multiprocessing's spawn would). The parent sends ``(job, keywords)`` on the socket ``FD``
and reads one reply per job: ``("ok", value)``, ``("error", exc)`` for an error the parent
re-raises as it is (the same on every rank: a malformed IR, a size the runtime would not select, a
wrong result), or ``("fault", Failure)`` when this rank could not finish (a transfer failed or
timed out). While a job runs, the rank writes the level it is at into its slot of the file
``PROGRESS_FD`` (one int32 per rank, mapped by every rank and the parent), which the parent reads
to say where a rank that died or hung stopped. ``None``, or the parent's end of the socket closing, ends the process.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from typing import Any

__all__ = ["IDLE", "STARTING", "main", "read_progress"]

STARTING = -2
"""Progress of a rank still joining the process group."""
IDLE = -1
"""Progress of a rank between jobs, or before level 0 of a job."""
_SLOT = struct.Struct("<i")


def read_progress(view: Any, rank: int) -> int:
    """The level ``rank`` last wrote into the progress map ``view``."""
    return _SLOT.unpack_from(view, rank * _SLOT.size)[0]


def _serve(conn: Any, progress: mmap.mmap, rank: int) -> None:
    from common.errors import XcclError
    from runtime.torch.errors import Failure, short

    def at(level: int) -> None:
        _SLOT.pack_into(progress, rank * _SLOT.size, level)

    try:
        from runtime.torch.launch import join

        device = join(os.environ["XCCL_TORCH_DIST"], float(os.environ["XCCL_TORCH_TIMEOUT_S"]))
    except Exception as exc:
        conn.send(
            ("fault", Failure(rank, "error", STARTING, f"could not join the process group: {short(exc)}"))
        )
        return

    from runtime.torch.jobs import RankJobs
    from runtime.torch.rank import PeerFailure

    conn.send(("ok", None))
    jobs = RankJobs(rank, device, float(os.environ["XCCL_TORCH_TIMEOUT_S"]), at)
    while True:
        at(IDLE)
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        job, args = message
        try:
            reply = ("ok", jobs.handle(job, args))
        except PeerFailure as exc:
            reply = ("fault", exc.failure)
        except XcclError as exc:
            reply = ("error", exc)
        except Exception as exc:
            failure = Failure(
                rank, "error", read_progress(progress, rank), f"{type(exc).__name__}: {short(exc)}"
            )
            reply = ("fault", failure)
        conn.send(reply)
    os._exit(0)  # no destroy_process_group: it waits for every peer (seconds), and the group ends with us


def main(argv: list[str]) -> None:
    from multiprocessing.connection import Connection

    fd, progress_fd, rank = int(argv[0]), int(argv[1]), int(argv[2])
    conn = Connection(fd)
    with mmap.mmap(progress_fd, 0) as progress:
        _serve(conn, progress, rank)
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
