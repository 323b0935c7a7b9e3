"""Every file the ``topo`` commands read, however wrong, is one line naming it (never a traceback,
a hang on /dev/zero, or a misleading "unknown topology")."""

from __future__ import annotations

import os

import pytest
from conftest import assert_one_line_error

EXAMPLE = "docs/examples/nvidia-smi-topo-dgx1.txt"


def _bad_inputs(tmp_path):
    """``{what: (path, fragment of the error)}``; each path ends in .json, as a user's would."""
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"name": "caf\xe9", "ranks": 2, "links": []}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    folder = tmp_path / "folder.json"
    folder.mkdir()
    return {
        "not UTF-8": (str(latin1), "not UTF-8 text"),
        "nested too deeply": (str(deep), "nested too deeply"),
        "a device": ("/dev/zero", "is a device"),
        "a folder": (str(folder), "cannot read"),
        "a folder named as a path": (f"{tmp_path}/", "cannot read"),
    }


WHAT = ["not UTF-8", "nested too deeply", "a device", "a folder", "a folder named as a path"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("what", WHAT)
@pytest.mark.parametrize("command", [("topo", "check"), ("topo", "show"), ("topo", "show", "--json")])
def test_topology_readers_refuse_a_bad_file_in_one_line(tmp_path, xccl, command, what):
    path, fragment = _bad_inputs(tmp_path)[what]
    proc = xccl(*command[:2], path, *command[2:])
    assert_one_line_error(proc, path.rstrip("/"), fragment)
    assert proc.stdout == ""


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("what", WHAT)
def test_detect_refuses_a_bad_file_in_one_line(tmp_path, xccl, what):
    path, fragment = _bad_inputs(tmp_path)[what]
    if what == "nested too deeply":  # detect reads text, not JSON: it is not a matrix
        fragment = "expected the matrix of `nvidia-smi topo -m`"
    assert_one_line_error(xccl("topo", "detect", path), path.rstrip("/"), fragment)


def _matrix_with(cell: str) -> str:
    with open(EXAMPLE) as handle:
        lines = handle.read().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("GPU0"))
    cells = lines[row].split("\t")
    cells[2] = cell  # GPU0 -> GPU1
    lines[row] = "\t".join(cells)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("cell", "fragment"), [("NV" + "9" * 5000, "expected NV1 .. NV1024"), ("NV0", "expected NV1 .. NV1024")]
)
def test_detect_refuses_a_bond_of_no_or_countless_links(tmp_path, xccl, cell, fragment):
    path = tmp_path / "topo.txt"
    path.write_text(_matrix_with(cell))
    assert_one_line_error(xccl("topo", "detect", str(path)), "row GPU0 column GPU1", fragment)
