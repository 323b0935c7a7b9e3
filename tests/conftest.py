"""Shared fixtures: small helpers for running the CLI as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``xccl ARGS`` in a subprocess, as a user runs it (exit code, stdout, stderr)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "xccl.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=env,
        timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def xccl(capsys):
    """``xccl ARGS`` in this process (no interpreter start-up), as a completed process: for the many
    error cases, where start-up would dominate."""
    from xccl.cli.main import main

    def run(*args: str) -> subprocess.CompletedProcess:
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


_PROGRESS = re.compile(r"xccl: (?!error:).*(?: \.\.\.|: \d+\.\d s)$")
"""A slow stage's progress lines (xccl.cli.output.slow_stage): on a loaded machine any stage may
pass its threshold, and the line saying so is not part of the error."""


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, one line on stderr, no traceback, and the line names what it should."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not _PROGRESS.match(ln)]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
