"""The shared file handling: readers that name the file for every way it can be wrong, writers that
never leave a half-written file, and native output kept off stdout."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from conftest import assert_one_line_error

from common.errors import XcclError
from common.files import check_writable, named_file, parse_json, read_json_file, read_text, save_text
from common.native_output import native_stdout_silenced


class Bad(XcclError):
    pass


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\xff\xfe{}", "not UTF-8 text (byte 0 is 0xff)"),
        (b'{"a": NaN}', "NaN is not a JSON value"),
        (b'{"a": -Infinity}', "-Infinity is not a JSON value"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a": 1,}', ":1:9: invalid JSON"),
    ],
)
def test_a_bad_json_file_is_one_error_naming_it(tmp_path, content, fragment):
    path = tmp_path / "in.json"
    path.write_bytes(content)
    with pytest.raises(Bad, match=r"in\.json") as info:
        read_json_file(path, Bad)
    assert fragment in str(info.value)


def test_devices_folders_and_missing_files_are_refused_without_reading(tmp_path):
    with pytest.raises(Bad, match="/dev/zero: is a device"):
        read_text("/dev/zero", Bad)
    with pytest.raises(Bad, match="cannot read: Is a directory"):
        read_text(tmp_path, Bad)
    with pytest.raises(Bad, match="cannot read: No such file"):
        read_text(tmp_path / "nope.json", Bad)


def test_an_input_over_the_limit_names_the_limit_and_how_to_raise_it(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text("[" + "0," * 100 + "0]")
    monkeypatch.setenv("XCCL_MAX_INPUT_BYTES", "64")
    with pytest.raises(Bad, match=r"larger than 64 bytes.*XCCL_MAX_INPUT_BYTES"):
        read_json_file(path, Bad)
    monkeypatch.setenv("XCCL_MAX_INPUT_BYTES", "4096")
    assert len(read_json_file(path, Bad)) == 101


def test_parse_json_is_strict_and_names_where():
    assert parse_json('{"x": [1, 2.5]}', "w") == {"x": [1, 2.5]}
    with pytest.raises(XcclError, match=r"^somewhere: invalid JSON: Infinity"):
        parse_json("Infinity", "somewhere")


def test_save_keeps_an_existing_file_unless_forced_and_keeps_its_mode(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("mine")
    path.chmod(0o640)
    with pytest.raises(Bad, match="already exists; use --force"):
        save_text(path, "new", error=Bad)
    assert path.read_text() == "mine"
    save_text(path, "new", force=True, error=Bad)
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary file left


def test_a_write_that_fails_half_way_leaves_nothing_behind(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "out.txt"

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(Bad, match="cannot write: No space left on device"):
        save_text(path, "x" * 10_000, error=Bad)
    monkeypatch.undo()
    assert not path.exists() and list(path.parent.iterdir()) == []
    save_text(path, "complete", error=Bad)  # the rerun is not refused by a truncated leftover
    assert path.read_text() == "complete"


def test_check_writable_refuses_before_any_work(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(Bad, match="already exists"):
        check_writable(notes, error=Bad)
    with pytest.raises(Bad, match="is not a folder"):
        check_writable(notes / "out.json", error=Bad)
    with pytest.raises(Bad, match="is a folder"):
        check_writable(tmp_path, force=True, error=Bad)
    assert check_writable(tmp_path / "new" / "deeper" / "out.json", error=Bad).name == "out.json"
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_native_writes_to_stdout_are_discarded_and_python_prints_kept(capfd):
    print("before", end=" ")
    with native_stdout_silenced():
        os.write(1, b"native noise\n")
    print("after")
    assert capfd.readouterr().out == "before after\n"


def test_highs_prints_nothing_on_stdout(capfd):
    from synth.milp.solvers.highs import new_highs

    h = new_highs()
    h.passModel(_tiny_lp())
    h.run()
    assert capfd.readouterr().out == ""


def _tiny_lp():
    import highspy
    import numpy as np

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = 1, 0
    lp.col_cost_ = np.array([1.0])
    lp.col_lower_ = np.array([0.0])
    lp.col_upper_ = np.array([1.0])
    return lp


def test_a_name_means_a_file_by_its_ending_a_folder_in_it_or_existing(tmp_path, monkeypatch):
    """One rule for topology and sketch names: ``x.json``, ``sub/x`` or an existing ``x`` is a file
    (a missing one refused at once); anything else is a name to look up."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").write_text("{}")
    (tmp_path / "folder").mkdir()
    assert str(named_file("mine", "topology")) == "mine" and str(named_file("folder", "sketch")) == "folder"
    assert named_file("dgx1", "topology") is None and named_file("ring:" + "9" * 5000, "topology") is None
    for missing in ("gone.json", "sub/gone", f"{tmp_path}/gone"):
        with pytest.raises(Bad, match=f"^{missing}: no such sketch file$"):
            named_file(missing, "sketch", Bad)


def test_a_missing_sketch_named_by_a_path_says_no_such_file(xccl):
    """Before: ``sub/gone`` was looked up among the shipped sketches ("unknown sketch")."""
    assert_one_line_error(
        xccl("sketch", "check", "sub/gone", "-t", "ndv2x2"), "sub/gone: no such sketch file"
    )
