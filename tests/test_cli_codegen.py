"""``xccl compile`` and ``xccl check``, run as a user runs them."""

from __future__ import annotations

import textwrap

from conftest import assert_one_line_error
from test_xml_format import MSCCL_TOOLS_STYLE

from codegen.formats import load_ir


def test_compile_an_example_and_check_it(tmp_path, cli):
    out = tmp_path / "ring.xml"
    proc = cli("compile", "example:ring_allreduce", "-D", "num_ranks=4", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "checked for the azure runtime" in proc.stdout
    assert out.read_text().startswith('<algo name="allreduce-ring-4"')
    proc = cli("check", str(out))
    assert proc.returncode == 0 and "ok: passes the static checks of the azure runtime" in proc.stdout


def test_compile_an_algorithm_for_both_runtimes_and_json(tmp_path, cli):
    algo = tmp_path / "ar.json"
    assert cli("baseline", "ring", "-t", "dgx1", "-C", "allreduce", "-o", str(algo)).returncode == 0
    for dialect, suffix in (("msccl", "xml"), ("azure", "xml"), ("json", "json")):
        out = tmp_path / f"ar.{dialect}.{suffix}"
        proc = cli(
            "compile", str(algo), "-o", str(out), "--dialect", dialect, "--instances", "2", "--protocol", "LL"
        )
        assert proc.returncode == 0, proc.stderr
        ir = load_ir(out)
        assert (ir.protocol, ir.nchunksperloop, ir.collective) == ("LL", 16, "allreduce")
        assert cli("check", str(out)).returncode == 0
    assert 'coll="allreduce"' in (tmp_path / "ar.msccl.xml").read_text()


def test_standard_output_timings_and_stage_dumps(cli):
    proc = cli(
        "compile",
        "example:binomial_tree_broadcast",
        "-D",
        "num_ranks=4",
        "--time-passes",
        "--print-after",
        "assign_threadblocks",
        "--verify-each",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("<algo ") and 'coll="broadcast"' in proc.stdout
    assert "--- after assign_threadblocks ---" in proc.stderr and "fuse_recv_send" in proc.stderr
    assert "total" in proc.stderr


def test_a_program_file_with_a_function_or_a_with_block(tmp_path, xccl):
    func = tmp_path / "mine.py"
    func.write_text(
        textwrap.dedent("""
        from codegen import ChunkProgram, chunk

        def program(n=3):
            with ChunkProgram("mine", f"fully-connected:{n}", "allgather", inplace=True) as prog:
                for r in range(n):
                    for peer in range(n):
                        if peer != r:
                            chunk(r, "output", r).copy(peer)
            return prog
    """)
    )
    proc = xccl("compile", str(func), "-D", "n=4", "--dialect", "json")
    assert proc.returncode == 0, proc.stderr
    assert '"num_ranks": 4' in proc.stdout
    block = tmp_path / "block.py"
    block.write_text(
        textwrap.dedent("""
        from codegen import ChunkProgram, chunk

        with ChunkProgram("block", "ring:3", "allgather", inplace=True) as prog:
            for r in range(3):
                chunk(r, "output", r).copy((r + 1) % 3).copy((r + 2) % 3)
    """)
    )
    out = tmp_path / "block.xml"
    assert xccl("compile", str(block), "-o", str(out), "--dialect", "msccl").returncode == 0
    assert load_ir(out).name == "block"


def test_mistakes_in_a_program_file_point_at_the_line(tmp_path, xccl):
    bad = tmp_path / "bad.py"
    bad.write_text(
        textwrap.dedent("""
        from codegen import ChunkProgram, chunk

        def program():
            with ChunkProgram("bad", "ring:4", "allgather") as prog:
                chunk(0, "input", 0).copy(2, "output", 0)
            return prog
    """)
    )
    assert_one_line_error(xccl("compile", str(bad)), f"{bad}:6", "no link 0 -> 2")
    wrong = tmp_path / "wrong.py"
    wrong.write_text("from codegen import ChunkProgram\nprog = ChunkProgram('w', 'ring:4', 'allgather')\n")
    assert_one_line_error(xccl("compile", str(wrong)), "w: 16 wrong output slot(s)", "rank 0 output[0]")
    assert_one_line_error(xccl("compile", str(bad), "-D", "n=2"), "takes no parameter 'n'")
    assert_one_line_error(xccl("compile", "example:nope"), "unknown example 'nope'")


def test_outputs_are_not_overwritten_without_force(tmp_path, xccl):
    out = tmp_path / "keep.xml"
    out.write_text("mine")
    assert_one_line_error(xccl("compile", "example:ring_allreduce", "-o", str(out)), "--force")
    assert out.read_text() == "mine"
    assert xccl("compile", "example:ring_allreduce", "-o", str(out), "--force").returncode == 0


def test_check_reports_problems_and_compile_fixes_sizes(tmp_path, xccl):
    other = tmp_path / "other.xml"
    other.write_text(MSCCL_TOOLS_STYLE.replace('o_chunks="0"', 'o_chunks="1"'))
    proc = xccl("check", str(other))
    assert proc.returncode == 1
    assert (
        "problem(s) for the msccl runtime" in proc.stdout and "rank 0: o_chunks=1 is neither 0" in proc.stdout
    )
    fixed = tmp_path / "fixed.xml"
    assert xccl("compile", str(other), "--dialect", "msccl", "-o", str(fixed)).returncode == 0
    assert xccl("check", str(fixed)).returncode == 0
    deadlock = tmp_path / "deadlock.xml"
    deadlock.write_text(
        MSCCL_TOOLS_STYLE.replace('s="3" type="r"', 's="3" type="r"').replace(
            '<step s="0" type="s" srcbuf="i" srcoff="1"', '<step s="0" type="r" srcbuf="i" srcoff="1"'
        )
    )
    proc = xccl("check", str(deadlock), "--dialect", "none")
    assert proc.returncode == 1 and "rank 0, threadblock 0, step" in proc.stdout


def test_bad_files_and_flags_give_one_line(tmp_path, xccl):
    broken = tmp_path / "broken.xml"
    broken.write_text(MSCCL_TOOLS_STYLE.replace('cnt="1"', "cnt=1", 1))
    assert_one_line_error(xccl("check", str(broken)), "broken.xml:4:", "double-quoted")
    assert_one_line_error(xccl("check", str(tmp_path / "missing.xml")), "missing.xml")
    assert_one_line_error(xccl("compile", "notes.txt"), "expected an algorithm")
    ok = tmp_path / "ok.xml"
    ok.write_text(MSCCL_TOOLS_STYLE.replace('srcbuf="s"', 'srcbuf="i"'))
    assert_one_line_error(xccl("compile", str(ok), "--instances", "2"), "--instances applies to programs")
    assert_one_line_error(
        xccl("compile", "example:ring_allreduce", "--max-bytes", "12 parsecs"), "12 parsecs"
    )
