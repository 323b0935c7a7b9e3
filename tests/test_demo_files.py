"""The demo never replaces a file it did not write (unless --force), and writes each one atomically;
running it again replaces its own earlier files."""

from __future__ import annotations

import time

import pytest
from conftest import assert_one_line_error

from xccl.cli.demo import FRONT_PNG, MANIFEST, DemoError, DemoFolder

XML = "allgather-dgx1-s2-r3-c2.xml"


@pytest.mark.serial  # times itself: run alone (see Makefile)
def test_a_users_file_with_a_demo_name_is_refused_before_any_work(tmp_path, xccl):
    out = tmp_path / "out"
    out.mkdir()
    (out / FRONT_PNG).write_text("my plot")
    (out / "notes.txt").write_text("mine")
    start = time.perf_counter()
    proc = xccl("demo", "--out", str(out))  # before: 20 s of work, then the plot replaced
    assert time.perf_counter() - start < 5
    assert_one_line_error(proc, FRONT_PNG, "was not written by the demo", "--force")
    assert (out / FRONT_PNG).read_text() == "my plot"
    assert sorted(p.name for p in out.iterdir()) == [FRONT_PNG, "notes.txt"]


def test_the_demo_replaces_only_what_it_wrote(tmp_path):
    first = DemoFolder.open(tmp_path, force=False)
    first.save(XML, b"<algo first/>")
    first.finish()
    assert (tmp_path / MANIFEST).is_file()

    again = DemoFolder.open(tmp_path, force=False)  # the next run: its own file, unchanged
    again.save(XML, b"<algo second/>")
    again.finish()
    assert (tmp_path / XML).read_bytes() == b"<algo second/>"

    (tmp_path / XML).write_text("edited by hand")  # no longer what the demo wrote
    with pytest.raises(DemoError, match="was not written by the demo"):
        DemoFolder.open(tmp_path, force=False)
    forced = DemoFolder.open(tmp_path, force=True)
    forced.save(XML, b"<algo third/>")
    forced.finish()
    assert (tmp_path / XML).read_bytes() == b"<algo third/>"
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, XML]  # no temporary file left


def test_a_file_named_like_the_manifest_is_not_taken_for_it(tmp_path):
    (tmp_path / MANIFEST).write_text('{"mine": true}')
    with pytest.raises(DemoError, match="was not written by the demo"):
        DemoFolder.open(tmp_path, force=False)
    assert (tmp_path / MANIFEST).read_text() == '{"mine": true}'
