"""N processes on this machine, one per rank, in one torch.distributed group, kept alive across runs.

Starting ranks is the slow part (each process imports torch and joins the group), so a
:class:`Pool` starts them once and feeds them jobs (``runtime.torch.jobs``): a benchmark prepares
each size, runs it as often as it likes and checks it in the same processes, and the tests keep a
pool per world size. The processes are plain subprocesses (``python -m runtime.torch.worker``:
never forked, as torch and CUDA do not survive a fork, and the caller's main module is not run
again, as multiprocessing's spawn would), in a session of their own (Ctrl-C reaches the caller,
which ends them), rendezvous by ``env://`` on a free loopback port.

Faults end a call within a bounded time and name the rank: a process that dies is seen at once
(its socket closes), a rank's transfer that fails or waits longer than ``timeout_s`` is reported by
that rank, and a rank that neither answers nor moves to another level for ``timeout_s`` plus a
grace period, or that its peers timed out waiting for, is hung. What a rank writes to stderr is
kept in a file of its own and quoted when it dies (Gloo aborts a rank that receives a message of
the wrong size, and says so there). Whatever happened, every process of the pool is then killed (the group is
broken), so nothing is left behind; the next call starts a new pool. An error that every rank
raises alike before any transfer (a malformed IR, a size the runtime would not select) or a wrong
result leaves the pool running.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref
from multiprocessing.connection import Connection, wait
from typing import IO, Any

from runtime.errors import ExecutionError
from runtime.torch.errors import Failure, settle, short
from runtime.torch.worker import STARTING, read_progress

__all__ = ["GRACE_S", "START_S", "Pool", "free_port"]

GRACE_S = 5.0
"""How much longer than ``timeout_s`` the pool waits for a rank that neither answers nor moves."""
START_S = 120.0
"""How long the ranks may take to start (import torch) and join the group."""
_POLL_S = 0.1
_TAIL_BYTES = 4096


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the first rank binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exit_text(code: int | None) -> str:
    if code is None:
        return "its process ended"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _last_words(err: IO[bytes]) -> str:
    """The reason a process gave on stderr before it ended: a C++ ``what():`` line if there is one,
    else its last line, shortened (``short``)."""
    err.seek(0, os.SEEK_END)
    err.seek(max(err.tell() - _TAIL_BYTES, 0))
    lines = [line.strip() for line in err.read().decode(errors="replace").splitlines() if line.strip()]
    said = [line.removeprefix("what():").strip() for line in lines if line.startswith("what():")]
    return short(said[-1] if said else lines[-1]) if lines else ""


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


def _worker_env(rank: int, world: int, port: int, dist: str, timeout_s: float) -> dict[str, str]:
    return dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
        OMP_NUM_THREADS="1",
        XCCL_TORCH_DIST=dist,
        XCCL_TORCH_TIMEOUT_S=repr(timeout_s),
    )


class Pool:
    """``world`` ranks in processes of their own (``dist``: ``gloo`` or ``nccl``). Use as a context
    manager, or call :meth:`close`; :meth:`call` starts the processes if they are not running."""

    def __init__(self, world: int, *, dist: str = "gloo", timeout_s: float = 60.0) -> None:
        if world < 1:
            raise ExecutionError(f"a pool needs at least 1 rank, got {world}")
        self.world, self.dist, self.timeout_s = world, dist, timeout_s
        self.name, self.levels = "the pool", 0
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Connection] = []
        self._errs: list[IO[bytes]] = []
        self._progress: mmap.mmap | None = None
        self._finalizer: weakref.finalize | None = None

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return bool(self._procs)

    def pids(self) -> list[int]:
        """The process ids of the ranks, in rank order (empty when not running)."""
        return [p.pid for p in self._procs]

    def start(self) -> None:
        """Start the ranks and wait until every one has joined the group."""
        if self.running:
            return
        fd, path = tempfile.mkstemp(prefix="xccl-torch-progress-")
        os.unlink(path)
        os.write(fd, struct.pack(f"<{self.world}i", *[STARTING] * self.world))
        self._progress = mmap.mmap(fd, 0)
        port = free_port()
        try:
            for rank in range(self.world):
                self._spawn(rank, port, fd)
        finally:
            os.close(fd)
        self._finalizer = weakref.finalize(self, _kill, list(self._procs))
        self.name, self.levels = f"starting {self.world} torch ranks", 0
        self._gather(start=True)

    def _spawn(self, rank: int, port: int, progress_fd: int) -> None:
        ours, theirs = socket.socketpair()
        err = tempfile.TemporaryFile(prefix=f"xccl-torch-rank{rank}-")  # noqa: SIM115 - closed in _stop
        self._errs.append(err)
        with theirs:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "runtime.torch.worker",
                    str(theirs.fileno()),
                    str(progress_fd),
                    str(rank),
                ],
                pass_fds=(theirs.fileno(), progress_fd),
                env=_worker_env(rank, self.world, port, self.dist, self.timeout_s),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        self._procs.append(proc)
        self._conns.append(Connection(ours.detach()))

    def _level(self, rank: int) -> int:
        return read_progress(self._progress, rank)

    def call(self, job: str, **args: Any) -> list[Any]:
        """Run ``job`` on every rank; each rank's value, in rank order."""
        self.start()
        for conn in self._conns:
            conn.send((job, args))
        return self._gather()

    def prepared(self, name: str, levels: int) -> None:
        """Name the call now prepared, for the errors of later calls (the IR, its levels)."""
        self.name, self.levels = name, levels

    def close(self) -> None:
        """Ask every rank to leave the group and end; kill those that do not within seconds."""
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        deadline = time.monotonic() + 5
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        self._stop()

    def _stop(self) -> None:
        """Kill what is left of the ranks (the finalizer) and let go of their sockets."""
        if self._finalizer is not None:
            self._finalizer()
        for conn in self._conns:
            conn.close()
        for err in self._errs:
            err.close()
        self._procs, self._conns, self._errs, self._finalizer = [], [], [], None

    # -- collecting replies -----------------------------------------------------------------------
    def _gather(self, start: bool = False) -> list[Any]:
        replies, died, hung = self._collect(start)
        failures = [Failure(r, "died", self._level(r), self._death(r, code)) for r, code in died.items()]
        blamed = {f.peer for kind, f in replies.values() if kind == "fault" and f.kind == "peer"}
        failures += [Failure(r, "hung", self._level(r), self._hang(r in blamed)) for r in hung]
        ordered = [replies.get(r) for r in range(self.world)]
        if failures or any(reply is None or reply[0] == "fault" for reply in ordered):
            self._stop()
        return settle(self.name, self.levels, ordered, failures)

    def _collect(self, start: bool) -> tuple[dict[int, tuple], dict[int, int | None], list[int]]:
        """Replies by rank, ranks that died (with their exit codes), ranks that hung."""
        pending = set(range(self.world))
        replies: dict[int, tuple] = {}
        died: dict[int, int | None] = {}
        idle = START_S if start else self.timeout_s + GRACE_S
        last, quiet_since = self._levels(), time.monotonic()
        while pending and not died:
            for conn in wait([self._conns[r] for r in pending], _POLL_S):
                r = self._conns.index(conn)
                try:
                    replies[r] = conn.recv()
                except (EOFError, OSError):
                    died[r] = self._exit_code(r)
                pending.discard(r)
                quiet_since = time.monotonic()
            for r in pending:
                if self._procs[r].poll() is not None and not self._conns[r].poll():
                    died[r] = self._procs[r].returncode
            now = self._levels()
            if now != last:
                last, quiet_since = now, time.monotonic()
            blamed = {f.peer for kind, f in replies.values() if kind == "fault" and f.kind == "peer"}
            if pending and not died and (pending <= blamed or time.monotonic() - quiet_since > idle):
                return replies, died, sorted(pending)
        return replies, died, []

    def _hang(self, blamed: bool) -> str:
        if blamed:
            return f"hung (its peers waited {self.timeout_s:g} s for it)"
        return f"hung (no progress for {self.timeout_s + GRACE_S:g} s)"

    def _death(self, rank: int, code: int | None) -> str:
        """How ``rank`` ended, with the last thing it wrote to stderr (a library's abort says why)."""
        said = _last_words(self._errs[rank]) if rank < len(self._errs) else ""
        return _exit_text(code) + (f": {said}" if said else "")

    def _levels(self) -> list[int]:
        return [self._level(r) for r in range(self.world)]

    def _exit_code(self, rank: int) -> int | None:
        try:
            return self._procs[rank].wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None
