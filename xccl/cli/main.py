"""The ``xccl`` command: one subcommand module per area, errors as one line and exit status 2."""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from collections.abc import Sequence
from contextlib import suppress
from typing import NoReturn

from common.errors import XcclError
from xccl.cli import algorithms, bench, compiler, demo, nccl, pareto, sketch, synth, topo, tune
from xccl.cli.output import OutputError, discard_stdout, stdout_guarded

__all__ = ["COMMAND_MODULES", "build_parser", "entry", "main"]

COMMAND_MODULES = (topo, algorithms, nccl, synth, pareto, sketch, compiler, bench, demo, tune)
"""Each module's ``register(subparsers)`` adds its commands; a test checks every command has a test."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2, as for every other bad input
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="xccl", description="Synthesize, verify, compile and run collective-communication algorithms."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


SIGPIPE_STATUS = 141
"""128 + SIGPIPE: what a shell reports for a tool whose output pipe closed (``xccl ... | head -1``)."""


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stderr is None:  # started with descriptor 2 closed: print(file=None) would write to stdout
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - held until the process exits
    if sys.stdout is None:  # started with descriptor 1 closed (``xccl topo list >&-``)
        print("xccl: error: cannot write to standard output: it is closed", file=sys.stderr)
        return 2
    try:
        with stdout_guarded():
            return _run(argv)
    except OutputError as exc:
        discard_stdout()
        if exc.broken_pipe:  # the reader has gone: stop quietly, as tools killed by SIGPIPE do
            return SIGPIPE_STATUS
        print(f"xccl: error: cannot write to standard output: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # standard error's reader has gone (``xccl ... 2>&1 | head``)
        discard_stdout()
        return SIGPIPE_STATUS


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except XcclError as exc:
        print(f"xccl: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:  # an allocation over what the process may have (``ulimit -v``, cgroups)
        print(
            f"xccl: error: {args.command}: out of memory: this process could not allocate what the "
            "work needs; give it a smaller size or more memory",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("xccl: interrupted", file=sys.stderr)
        return 130


def entry(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``xccl`` executable: :func:`main`, then the process ends without the interpreter's
    teardown, which frees every object one by one: after a 512-rank allreduce compile that took 13 s
    once the XML was written (millions of IR objects, some held by the memos of the last IR). The
    exit handlers still run (they end ``common.forked``'s children) and both streams are flushed,
    so nothing a command printed is lost; its files are closed by ``with`` before it returns. A
    ``SystemExit`` (``--help``, a usage error) leaves the usual way: nothing large is built then."""
    status = main(argv)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: started with that descriptor closed
            with suppress(OSError, ValueError):  # a reader gone or a stream closed: nothing left to say
                stream.flush()
    os._exit(status)


if __name__ == "__main__":
    entry()
