"""What the synthesis commands share: solver arguments, progress lines, writing algorithm files.

Exit statuses of the synthesis commands: 0 when they answered (an algorithm, or a proof that none
exists), 1 when a time limit left the question open, 2 for bad input, 130 after Ctrl-C (what was
found before it is still written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from synth.errors import AlgorithmFormatError
from xccl.cli.output import progress

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from synth.smt.outcome import Outcome

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OPEN",
    "Progress",
    "add_save_args",
    "add_time_limit",
    "check_targets",
    "positive_float",
    "positive_int",
    "save_algorithms",
]

EXIT_OPEN = 1
EXIT_INTERRUPTED = 130


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def add_time_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--time-limit",
        type=positive_float,
        metavar="SEC",
        help="give up on an instance after SEC seconds (its answer is then 'unknown'); default: none",
    )


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


def check_targets(args: argparse.Namespace, *files: str | None) -> None:
    """Refuse before solving what :func:`save_algorithms` would refuse after: an existing ``-o``
    file (or one of ``files``, e.g. ``--plot``) without ``--force``, or a ``-d`` that is a file."""
    if not getattr(args, "no_save", False):
        files = (getattr(args, "output", None), *files)
    for name in files:
        if not name:
            continue
        if Path(name).exists() and not args.force:
            raise AlgorithmFormatError(f"{name}: file already exists; use --force to overwrite")
        folder = next(p for p in Path(name).absolute().parents if p.exists())
        if not folder.is_dir():
            raise AlgorithmFormatError(f"{name}: cannot write: {folder} is a file, not a folder")
    directory = getattr(args, "directory", None)
    if directory and Path(directory).exists() and not Path(directory).is_dir():
        raise AlgorithmFormatError(f"{directory}: --directory: expected a folder, got a file")


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
    """``Solving allgather S=2 R=3 C=2 ... sat (0.41 s)`` on stderr, one line per instance."""

    def __init__(self) -> None:
        self._open = False

    def start(self, instance: str) -> None:
        print(f"Solving {instance} ... ", end="", file=sys.stderr, flush=True)
        self._open = True

    def done(self, outcome: Outcome) -> None:
        if not self._open:
            self.start(outcome.instance)
        print(outcome.summary(), file=sys.stderr, flush=True)
        self._open = False

    def interrupted(self) -> None:
        if self._open:
            print("interrupted", file=sys.stderr, flush=True)
            self._open = False
        else:
            progress("interrupted")
