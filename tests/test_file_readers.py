"""Every command that reads a user's file answers each way the file can be wrong with one line
naming it: not UTF-8, JSON nested too deeply to read, a device, a folder (issue 13's campaign)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_one_line_error

READERS = {
    "verify": lambda f, out: ("verify", f),
    "cost": lambda f, out: ("cost", f),
    "compile": lambda f, out: ("compile", f, "-o", out),
    "run": lambda f, out: ("run", f),
    "bench": lambda f, out: ("bench", f, "--backend", "sim", "--topology", "ring:4"),
    "check": lambda f, out: ("check", f),
    "sketch check": lambda f, out: ("sketch", "check", f),
    "synth milp --sketch": lambda f, out: ("synth", "milp", "-t", "ndv2x2", "-C", "allgather", "--sketch", f, "-o", out),
    "topo check": lambda f, out: ("topo", "check", f),
    "baseline -t": lambda f, out: ("baseline", "ring", "-t", f, "-C", "allgather", "-o", out),
}


@pytest.fixture
def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """kind -> (a .json path, what the error must say)."""
    (tmp_path / "latin1.json").write_bytes(b'{"name": "caf\xe9"}')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "folder.json").mkdir()
    return {
        "not UTF-8": (tmp_path / "latin1.json", "not UTF-8 text"),
        "nested": (tmp_path / "deep.json", "nested too deeply"),
        "device": (tmp_path / "zero.json", "is a device"),
        "folder": (tmp_path / "folder.json", "Is a directory"),
    }


@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_every_bad_file_in_one_line(tmp_path, xccl, bad_files, reader):
    out = tmp_path / "out.json"
    for kind, (path, fragment) in bad_files.items():
        proc = xccl(*READERS[reader](str(path), str(out)))
        assert_one_line_error(proc, str(path))
        if not (kind == "nested" and reader in ("check", "run", "bench")):  # read as XML: "expected '<'"
            assert fragment in proc.stderr, (kind, proc.stderr)
        assert not out.exists()
