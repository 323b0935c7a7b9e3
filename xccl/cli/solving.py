"""What the synthesis commands share: solver arguments, time limits, progress lines, SIGTERM,
writing algorithm files.

Exit statuses of the synthesis commands: 0 when they answered (an algorithm, or a proof that none
exists), 1 when a time limit left the question open, 2 for bad input, 130 after Ctrl-C and 143
after SIGTERM (what was found before either is still written).
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from synth.errors import AlgorithmFormatError
from xccl.cli.choices import SMT_INSTANCE_TIME_LIMIT_S, SMT_TIME_LIMIT_S
from xccl.cli.common import positive_seconds
from xccl.cli.output import progress

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from synth.outcome import Outcome

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OPEN",
    "EXIT_TERMINATED",
    "Progress",
    "Search",
    "add_save_args",
    "add_time_limit",
    "check_targets",
    "describe_limits",
    "long_command",
    "positive_int",
    "save_algorithms",
    "start_search",
    "time_limits",
    "write_or_print",
]

EXIT_OPEN = 1
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM
"""143: what batch schedulers see when a job ends on their SIGTERM."""

_terminated = threading.Event()
"""Set while a long command is unwinding from a SIGTERM (so progress lines can say so)."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_time_limit(parser: argparse.ArgumentParser, per_instance: bool = False) -> None:
    """``--time-limit`` (the whole run) and, for searches over instances, ``--instance-time-limit``."""
    parser.add_argument(
        "--time-limit",
        type=positive_seconds,
        metavar="SEC",
        help=f"stop after SEC seconds of wall time in all, keeping what was found (default {SMT_TIME_LIMIT_S:g})",
    )
    if per_instance:
        parser.add_argument(
            "--instance-time-limit",
            type=positive_seconds,
            metavar="SEC",
            help="give up on one instance after SEC seconds (it is 'unknown') and go on "
            f"(default {SMT_INSTANCE_TIME_LIMIT_S:g})",
        )


def time_limits(args: argparse.Namespace) -> tuple[float, float | None]:
    """The whole run's limit and (for searches) each instance's, defaults filled in."""
    total = args.time_limit if args.time_limit is not None else SMT_TIME_LIMIT_S
    if not hasattr(args, "instance_time_limit"):
        return total, None
    each = args.instance_time_limit if args.instance_time_limit is not None else SMT_INSTANCE_TIME_LIMIT_S
    return total, min(each, total)


def describe_limits(total: float, each: float | None = None, unit: str = "instance") -> str:
    """``time limit 600 s in all, 60 s per instance``: what the output says applied."""
    text = f"time limit {total:g} s"
    return text if each is None else f"{text} in all, {each:g} s per {unit}"


@dataclass(frozen=True)
class Search:
    """What an SMT command hands its search: the time limits (the whole run's, each instance's)
    and the progress lines."""

    limit: float
    each: float | None
    progress: Progress

    def describe(self) -> str:
        return describe_limits(self.limit, self.each)

    def arguments(self) -> dict:
        """The keyword arguments every search takes (``least_steps``, ``pareto_front``)."""
        return {
            "time_limit_s": self.limit,
            "instance_time_limit_s": self.each,
            "on_start": self.progress.start,
            "on_outcome": self.progress.done,
        }


def start_search(args: argparse.Namespace, *files: str | None) -> Search:
    """What every SMT command does before solving: refuse targets it could not write (and
    ``files``), then set up the time limits and the progress lines."""
    check_targets(args, *files)
    limit, each = time_limits(args)
    return Search(limit, each, Progress(describe_limits(limit, each)))


@contextmanager
def _sigterm_as_interrupt() -> Iterator[threading.Event]:
    """While inside, SIGTERM raises :class:`KeyboardInterrupt` as Ctrl-C does, and stops a z3 check
    that holds the main thread (Python runs signal handlers only between its own instructions, so
    a thread woken by the signal asks z3 to stop)."""
    if threading.current_thread() is not threading.main_thread():
        yield _terminated
        return
    _terminated.clear()

    def handler(signum: int, frame: object) -> None:
        _terminated.set()
        raise KeyboardInterrupt

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.signal(signal.SIGTERM, handler)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_stop_native_solvers, args=(read_fd,), daemon=True)
    watcher.start()
    try:
        yield _terminated
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGTERM, previous)
        os.close(write_fd)  # the watcher reads end-of-file and returns
        watcher.join()
        os.close(read_fd)


def _stop_native_solvers(read_fd: int) -> None:
    while data := os.read(read_fd, 64):
        if signal.SIGTERM in data and "synth.smt.session" in sys.modules:
            from synth.smt.session import interrupt

            interrupt()


def long_command(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A solver command on which SIGTERM (what batch schedulers send) takes Ctrl-C's path: what
    finished is kept, written and printed; the exit status is 143 instead of 130."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        with _sigterm_as_interrupt() as terminated:
            try:
                status = func(args)
            except KeyboardInterrupt:
                if not terminated.is_set():
                    raise
                print("xccl: terminated (SIGTERM)", file=sys.stderr)
                return EXIT_TERMINATED
        return EXIT_TERMINATED if terminated.is_set() and status == EXIT_INTERRUPTED else status

    return run


def add_save_args(parser: argparse.ArgumentParser, single: bool) -> None:
    """``-o FILE`` (single algorithm) or ``-d DIR``, ``--force``, ``--no-save``."""
    where = parser.add_mutually_exclusive_group()
    if single:
        where.add_argument("-o", "--output", metavar="FILE", help="write the algorithm to FILE")
    where.add_argument(
        "-d",
        "--directory",
        metavar="DIR",
        help="write algorithms into DIR, named like allgather-dgx1-s3-r7-c6.json (default: .)",
    )
    where.add_argument("--no-save", action="store_true", help="print the schedule instead of writing a file")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite existing files")


def _target(algo: Algorithm, args: argparse.Namespace) -> Path:
    if getattr(args, "output", None):
        return Path(args.output)
    return Path(args.directory or ".") / f"{algo.file_stem}.json"


def write_or_print(algo: Algorithm, args: argparse.Namespace, summary: str) -> None:
    """What a single-algorithm synthesis command ends with: the file ``-o`` names written and the
    summary after ``wrote FILE:``, or the schedule printed, then the summary."""
    if args.output:
        algo.save(args.output, force=args.force)
        print(f"wrote {args.output}: {summary}")
    else:
        print(algo.describe())
        print(summary)


def check_targets(args: argparse.Namespace, *files: str | None) -> None:
    """Refuse before solving what :func:`save_algorithms` would refuse after: an ``-o`` file (or one
    of ``files``, e.g. ``--plot``) that exists without ``--force`` or cannot be written, and a
    ``-d`` folder that is a file or cannot be made."""
    from common.files import check_writable

    if not getattr(args, "no_save", False):
        files = (getattr(args, "output", None), *files)
        if not getattr(args, "output", None):
            _check_folder(Path(getattr(args, "directory", None) or "."))
    for name in files:
        if name:
            check_writable(name, args.force, AlgorithmFormatError)


def _check_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise AlgorithmFormatError(f"{folder}: --directory: expected a folder, got a file")
    existing = next(p for p in (folder, *folder.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise AlgorithmFormatError(f"{folder}: --directory: cannot make it: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise AlgorithmFormatError(f"{folder}: --directory: no permission to write in {existing}")


def save_algorithms(algorithms: Sequence[Algorithm], args: argparse.Namespace) -> list[Path]:
    """Write each algorithm (or print it with --no-save). Every target is checked before the first
    is written, so a refused overwrite leaves nothing half done."""
    if args.no_save:
        for algo in algorithms:
            print(algo.describe())
        return []
    targets = [_target(a, args) for a in algorithms]
    if not args.force:
        for path in targets:
            if path.exists():
                raise AlgorithmFormatError(f"{path}: file already exists; use --force to overwrite")
    for algo, path in zip(algorithms, targets, strict=True):
        algo.save(path, force=args.force)
        print(f"wrote {path}: {algo.name} (verified)")
    return targets


class Progress:
    """``Solving allgather S=2 R=3 C=2 ... sat (0.41 s)`` on stderr, one line per instance, after a
    line stating the time limits (printed with the first instance, so that a refusal before any
    solving stays one line)."""

    def __init__(self, limits: str = "") -> None:
        self._open = False
        self._header = limits[:1].upper() + limits[1:]

    def _announce(self) -> None:
        if self._header:
            progress(self._header)
            self._header = ""

    def start(self, instance: str) -> None:
        self._announce()
        print(f"Solving {instance} ... ", end="", file=sys.stderr, flush=True)
        self._open = True

    def done(self, outcome: Outcome) -> None:
        if not self._open:
            self.start(outcome.instance)
        print(outcome.summary(), file=sys.stderr, flush=True)
        self._open = False

    def interrupted(self) -> None:
        what = "terminated (SIGTERM)" if _terminated.is_set() else "interrupted"
        if self._open:
            print(what, file=sys.stderr, flush=True)
            self._open = False
        else:
            progress(what)
