"""Work done in a forked child process while the parent does other work: a second CPU for a
command that would use one.

``xccl compile`` of a schedule with a recorded size times it in models that do not wait for one
another (``runtime.choice``): the Algorithm in the calibrated model while the parent lowers it, and
each compiled IR in the ideal model while the parent times it in its protocol's. :func:`forked`
starts ``fn()`` in a child made by ``os.fork``, so the child reads the parent's objects as they are
(nothing is pickled on the way in: a 512-rank IR is gigabytes of objects), and only what ``fn``
returns comes back, pickled through a pipe. Where a child cannot help or cannot be had (fewer than
two usable CPUs, no ``os.fork``, inside a child already, ``XCCL_FORK=0``) ``fn`` runs inline, when
its result is asked for.

What a caller can rely on:

- :meth:`Forked.result` is what ``fn()`` gives inline: its value, or the error it raises (the same
  type and message; an error that does not survive pickling so, a child that dies (killed, out of
  memory) or fails, and a value that does not pickle, all mean the parent runs ``fn`` itself);
- a child never writes to standard output or error (both are /dev/null in it) and ignores Ctrl-C;
  it is killed when its :class:`Forked` closes (``with``, or the parent unwinding from an error or
  Ctrl-C), when the parent exits, and on Linux when the thread that forked it dies, whatever kills
  it (``PR_SET_PDEATHSIG``; so a SIGTERM's default action leaves none either);
- a child that stops making progress while the parent waits for it (no CPU time spent and nothing
  written for :data:`STALL_S`: blocked for good, say on a lock another thread held at the fork) is
  killed, and the parent runs ``fn`` itself.

A child shares the parent's memory until one of them writes a page: CPython's reference counts
write to every object the child reads, so the pages it reads are copied. Measured at the end of
its work (``/proc/self/smaps_rollup``, private dirty memory) in the 512-rank trees allreduce: the
Algorithm's child 0.63 GB, the IR simulator's 1.05 GB (resident 3.4 GB, 2.35 GB of it shared),
beside a parent of 3.56 GB peak. A child forked while another thread runs has none of its threads:
it only computes (the timing engines), and its standard streams are new objects, so it takes no
lock another thread may have held at the fork.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import sys
import time
import warnings
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, NoReturn, TypeVar

__all__ = ["ENV", "Forked", "Results", "forked", "together", "usable"]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

ENV = "XCCL_FORK"
"""``XCCL_FORK=0`` (or ``off``, ``no``, ``false``) runs all such work inline: the same results on
one CPU, as with fewer than two CPUs."""

STALL_S = 30.0
"""Seconds a child may spend neither computing nor writing while its parent waits for it, before
it counts as stuck (the timing engines it runs compute without pause)."""

_OFF = frozenset({"0", "off", "no", "false"})
_INLINE = object()
"""A child's answer meaning: run it in the parent."""

_in_child = False
_running: dict[int, Forked[Any]] = {}
"""Each child still running, by its process id: killed when the parent exits."""


def usable() -> bool:
    """Whether :func:`forked` starts a child: ``os.fork`` exists, at least two CPUs are ours
    (``os.sched_getaffinity``), this is not a child already, and ``XCCL_FORK`` does not turn it off."""
    if _in_child or not hasattr(os, "fork") or os.environ.get(ENV, "").strip().lower() in _OFF:
        return False
    return _cpus() >= 2


def _cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks (macOS): every CPU
        return os.cpu_count() or 1


class Forked(Generic[T]):
    """``fn()`` running in a child (``pid``) or, where none was started, run on :meth:`result`."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn: Callable[[], T] | None = fn
        self.pid: int | None = None
        self._pipe: int | None = None
        self._answer: tuple[bool, Any] | None = None  # (returned, value or error), once known

    def __enter__(self) -> Forked[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def result(self) -> T:
        """``fn()``'s value (raising its error), waiting for the child where one runs."""
        if self._answer is None:
            try:
                answer = self._collect() if self.pid is not None else _INLINE
            except BaseException:  # Ctrl-C while waiting: the child goes too
                self.close()
                raise
            if answer is _INLINE:
                try:
                    answer = (True, self._fn())  # type: ignore[misc]
                except Exception as exc:  # kept, as a child's is: asked again, raised again, not rerun
                    answer = (False, exc)
            self._answer, self._fn = answer, None
        returned, value = self._answer
        if not returned:
            raise value
        return value

    def close(self) -> None:
        """Kill the child where it still runs, and reap it (what it would have given is lost)."""
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self._reap()

    def _start(self) -> None:
        prctl = _prctl()  # looked up here: the child does as little as it can before its work
        parent = os.getpid()
        read, write = os.pipe()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+ warns of threads
                pid = os.fork()
        except OSError:  # no memory or processes left for a child: inline
            os.close(read)
            os.close(write)
            return
        if pid == 0:
            _child(self._fn, write, parent, prctl)  # type: ignore[arg-type]
        os.close(write)
        self.pid, self._pipe = pid, read
        _running[pid] = self

    def _collect(self) -> tuple[bool, Any] | object:
        """The child's answer, or :data:`_INLINE` where it gave none to use."""
        data = _read_watching(self._pipe, self.pid)  # type: ignore[arg-type]
        if data is None:  # stuck: it gives nothing
            self.close()
            return _INLINE
        status = self._reap()
        if not data or status != 0:
            return _INLINE
        try:
            answer = pickle.loads(data)
        except Exception:
            return _INLINE
        return answer if isinstance(answer, tuple) else _INLINE

    def _reap(self) -> int:
        """Wait for the child to end and forget it; its exit code (negative: the signal)."""
        pid, pipe = self.pid, self._pipe
        self.pid, self._pipe = None, None
        _running.pop(pid, None)  # type: ignore[arg-type]
        if pipe is not None:
            os.close(pipe)
        try:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])  # type: ignore[arg-type]
        except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler of the caller's)
            return -1


def forked(fn: Callable[[], T]) -> Forked[T]:
    """``fn()`` started in a child where :func:`usable`, else kept to run inline on ``result()``."""
    job = Forked(fn)
    if usable():
        job._start()
    return job


def together(first: Callable[[], T], *others: Callable[[], T]) -> list[T]:
    """Each function's value in order: ``others`` in children while the parent runs ``first``
    (an error is the first one raised in that order, as inline; the children are killed then)."""
    jobs = [forked(fn) for fn in others]
    try:
        return [first(), *(job.result() for job in jobs)]
    finally:
        for job in jobs:
            job.close()


class Results(Generic[K, T]):
    """``compute(key)`` for each key asked, once; a key :meth:`start`\\ ed early is computed in a
    child of its own, while the parent goes on (``with``: the children left are killed at the end)."""

    def __init__(self, compute: Callable[[K], T]) -> None:
        self.compute = compute
        self._known: dict[K, T] = {}
        self._started: dict[K, Forked[T]] = {}

    def __enter__(self) -> Results[K, T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self, keys: Iterable[K]) -> None:
        """Compute ``keys`` not yet known or started, each in a child (none where not :func:`usable`)."""
        for key in keys:
            if usable() and key not in self._known and key not in self._started:
                self._started[key] = forked(lambda key=key: self.compute(key))

    def __call__(self, key: K) -> T:
        if key not in self._known:
            job = self._started.pop(key, None)
            self._known[key] = job.result() if job is not None else self.compute(key)
        return self._known[key]

    def close(self) -> None:
        """Kill the children still computing keys not asked for."""
        while self._started:
            self._started.popitem()[1].close()


def _child(fn: Callable[[], object], write: int, parent: int, prctl: Callable[..., int] | None) -> NoReturn:
    """The child's whole life: ``fn()``'s answer pickled to ``write``; never returns to the caller."""
    global _in_child
    code = 1
    try:
        _in_child = True
        _running.clear()  # the parent's other children are not this one's to kill
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above took effect
            return  # type: ignore[misc]  # the finally exits
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)  # a wakeup pipe of the parent's is not this one's to write
        _quiet()
        _write_all(write, _answer_of(fn))
        code = 0
    finally:
        os._exit(code)


def _answer_of(fn: Callable[[], object]) -> bytes:
    """``(True, value)`` or ``(False, error)`` pickled, or :data:`_INLINE`'s mark where the parent
    must run ``fn`` itself: an error that does not come back as the same type and message, running
    out of memory (the parent may have more), a value that does not pickle."""
    inline = pickle.dumps("inline")
    try:
        value = fn()
    except MemoryError:
        return inline
    except Exception as exc:
        try:
            data = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
            back = pickle.loads(data)[1]
        except Exception:
            return inline
        return data if type(back) is type(exc) and str(back) == str(exc) else inline
    try:
        return pickle.dumps((True, value), pickle.HIGHEST_PROTOCOL)
    except Exception:
        return inline


def _quiet() -> None:
    """Standard input, output and error on /dev/null (a library may print; the child must not),
    Python's too, through new file objects: another thread of the parent's (``xccl``'s progress
    timer) may have held the old ones' locks at the fork, and warnings are not shown."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - held until the child exits
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    warnings.simplefilter("ignore")


_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """Linux's ``prctl``, through which a child asks to be killed when its parent dies (else None)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _read_watching(fd: int, pid: int) -> bytes | None:
    """All the child writes to ``fd`` until it closes it, or None where the child spends no CPU
    time and writes nothing for :data:`STALL_S` (where its CPU time cannot be read, it is waited
    for as long as it takes)."""
    parts: list[bytes] = []
    spent, since = _cpu_ticks(pid), time.monotonic()
    while True:
        if select.select([fd], [], [], 1.0)[0]:
            part = os.read(fd, 1 << 20)
            if not part:
                return b"".join(parts)
            parts.append(part)
            since = time.monotonic()
            continue
        now, ticks = time.monotonic(), _cpu_ticks(pid)
        if ticks is None or ticks != spent:
            spent, since = ticks, now
        elif now - since > STALL_S:
            return None


def _cpu_ticks(pid: int) -> int | None:
    """The CPU time process ``pid`` has spent, in clock ticks (``/proc/PID/stat``: user + system);
    None where it cannot be read (no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@atexit.register
def _kill_children() -> None:
    """At the parent's exit, the children it did not wait for."""
    for job in list(_running.values()):
        job.close()
