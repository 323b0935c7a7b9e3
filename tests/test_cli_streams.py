"""Standard output that cannot be written is never a silent success.

A closed or full stdout is an error (one line on stderr, exit 2); a pipe whose reader has gone
(``xccl ... | head -1``) stops the command quietly with status 141, as for tools killed by SIGPIPE.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, assert_one_line_error

XCCL = [sys.executable, "-m", "xccl.cli.main"]


def _bash(script: str) -> subprocess.CompletedProcess:
    """``script`` in bash, where ``$XCCL`` runs the command line as a user would."""
    env = dict(os.environ, XCCL=" ".join(XCCL))
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )


def test_a_closed_stdout_is_an_error():
    proc = _bash("$XCCL topo list >&-")  # before: exit 0, nothing printed anywhere
    assert_one_line_error(proc, "xccl: error: cannot write to standard output")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_stdout_is_an_error():
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*XCCL, "topo", "list"], stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60
        )
    assert_one_line_error(proc, "xccl: error: cannot write to standard output: No space left on device")


def test_a_pipe_closed_before_writing_stops_quietly_with_141():
    proc = subprocess.Popen([*XCCL, "topo", "list", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the command writes
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141  # before: 0
    assert err == b""  # no "Exception ignored ... BrokenPipeError" at exit


def test_a_pipe_closed_midway_stops_quietly_with_141():
    """``| head -1`` on an output larger than the pipe holds: the write after head exits fails."""
    proc = _bash('$XCCL topo show hypercube:9 | head -1; echo "status ${PIPESTATUS[0]}" >&2')
    assert proc.stdout == "hypercube:9: 512 ranks on 1 machine(s), 0 switch(es)\n"
    assert proc.stderr == "status 141\n"


def test_a_closed_stderr_keeps_messages_off_stdout():
    proc = _bash("$XCCL topo show ring:0 --json 2>&-")  # before: the error line came out on stdout
    assert (proc.returncode, proc.stdout) == (2, "")
