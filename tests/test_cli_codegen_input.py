"""``xccl check`` and ``xccl compile`` on IR files that are wrong, huge or not XML at all: what the
schedule computes is checked before it is re-emitted, counts are refused before anything is
allocated for them, and every unreadable file gives one line."""

from __future__ import annotations

import os
import time
from functools import cache

import pytest
from conftest import assert_one_line_error

from codegen.compiler import compile_algorithm, compile_program
from codegen.examples import ring_allreduce
from codegen.formats import write_ir
from codegen.ir import OpType
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load


@cache
def _ring_allreduce() -> str:
    """Azure XML of a 4-rank ring allreduce, in place: 4 chunks per loop."""
    return write_ir(compile_program(ring_allreduce.program(4)), "azure")


@cache
def _ring_allgather() -> str:
    """Azure XML of the 4-rank ring allgather baseline, out of place: each rank's threadblock
    sends its input, copies it, forwards two chunks (rcs) and receives the last (r)."""
    topo = load("ring:4")
    ir = compile_algorithm(make_baseline("ring", topo, make_collective("allgather", 4)), topo)
    for g in ir.gpus:
        assert [op.type for op in g.threadblocks[0].ops][-2:] == [OpType.RECV_COPY_SEND, OpType.RECV]
    return write_ir(ir, "azure")


def _write(tmp_path, text: str, name: str = "in.xml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _steps(text: str, rank: int) -> list[str]:
    gpu = text.index(f'<gpu id="{rank}"')
    return [line for line in text[gpu : text.index("</gpu>", gpu)].splitlines() if "<step " in line]


# -- what the schedule computes ------------------------------------------------------------------


def test_compile_refuses_a_dropped_transfer_and_writes_nothing(tmp_path, xccl):
    """Rank 3 no longer forwards its last chunk (rcs -> r), rank 0 no longer receives it: every
    count still matches, so only executing it shows rank 0's output chunk 1 is never written."""
    text = _ring_allgather()
    forward = _steps(text, 3)[-2]
    receive = _steps(text, 0)[-1]
    assert 'type="rcs"' in forward and 'type="r"' in receive and 'dstoff="1"' in receive
    broken = text.replace(forward, forward.replace('type="rcs"', 'type="r"')).replace(receive + "\n", "")
    path = _write(tmp_path, broken)
    out = tmp_path / "out.xml"
    proc = xccl("compile", str(path), "-o", str(out))
    assert_one_line_error(
        proc,
        f"{path}: ",
        "computes a wrong result: rank 0: output chunk 1 (out-of-place call)",
        "nothing wrote it",
    )
    assert not out.exists()
    proc = xccl("check", str(path))
    assert (
        proc.returncode == 1
        and "passes the static checks of the azure runtime, but computes a wrong" in proc.stdout
    )
    assert "rank 0: output chunk 1 (out-of-place call)" in proc.stdout


def test_compile_refuses_a_redirected_receive_and_writes_nothing(tmp_path, xccl):
    text = _ring_allreduce()
    receive = _steps(text, 2)[-1]
    assert 'type="r"' in receive
    index = int(receive.split('dstoff="')[1].split('"')[0])
    elsewhere = receive.replace(f'dstoff="{index}"', f'dstoff="{(index + 1) % 4}"')
    path = _write(tmp_path, text.replace(receive, elsewhere))
    out = tmp_path / "out.xml"
    proc = xccl("compile", str(path), "-o", str(out), "--dialect", "msccl")
    wrong = min(index, (index + 1) % 4)
    assert_one_line_error(
        proc, f"rank 2: output chunk {wrong} (in-place call) must hold chunk {wrong} reduced over all 4"
    )
    assert not out.exists()
    assert xccl("compile", str(_write(tmp_path, text, "ok.xml")), "-o", str(out)).returncode == 0


# -- nchunksperloop and the buffers --------------------------------------------------------------


def test_nchunksperloop_that_disagrees_with_the_buffers_fails_check(tmp_path, xccl):
    text = _ring_allreduce()
    assert 'nchunksperloop="4"' in text and 'i_chunks="4"' in text
    few = xccl(
        "check", str(_write(tmp_path, text.replace('nchunksperloop="4"', 'nchunksperloop="3"'), "few.xml"))
    )
    assert few.returncode == 1
    assert "rank 0: i_chunks=4, but nchunksperloop=3 makes allreduce's input 3 chunk(s)" in few.stdout
    many = xccl(
        "check", str(_write(tmp_path, text.replace('nchunksperloop="4"', 'nchunksperloop="12"'), "many.xml"))
    )
    assert many.returncode == 1 and "rank 0: output chunk 4 (in-place call) must hold chunk 4" in many.stdout
    ag = _ring_allgather().replace('nchunksperloop="4"', 'nchunksperloop="6"')
    odd = xccl("check", str(_write(tmp_path, ag, "odd.xml")))
    assert (
        odd.returncode == 1 and "nchunksperloop=6: allgather on 4 ranks needs a multiple of 4" in odd.stdout
    )


# -- limits --------------------------------------------------------------------------------------


@pytest.mark.serial  # times itself: run alone (see Makefile)
@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        (
            'ngpus="4"',
            'ngpus="1000000000"',
            "<algo>: ngpus: 1000000000 ranks, more than the limit of 1048576 (set XCCL_MAX_RANKS",
        ),
        (
            'nchunksperloop="4"',
            'nchunksperloop="4000000000"',
            "nchunksperloop: 4000000000 chunks, more than the limit of 32768 (set XCCL_MAX_BUFFER_CHUNKS",
        ),
        ('i_chunks="4"', 'i_chunks="99999999999"', "<gpu>: i_chunks: 99999999999 chunks, more than"),
        ('s_chunks="0"', 's_chunks="0x7fffffff"', "<gpu>: s_chunks: 2147483647 chunks, more than"),
    ],
)
def test_huge_counts_are_refused_at_once_naming_the_limit(tmp_path, xccl, old, new, fragment):
    path = _write(tmp_path, _ring_allreduce().replace(old, new, 1))
    for command in ("check", "compile"):
        start = time.perf_counter()
        proc = xccl(command, str(path))
        assert time.perf_counter() - start < 5
        assert_one_line_error(proc, f"{path}:", fragment)


def test_the_limits_are_raised_by_their_variables(tmp_path, xccl, monkeypatch):
    path = _write(tmp_path, _ring_allreduce())
    for var, fragment in (
        ("XCCL_MAX_BUFFER_CHUNKS", "nchunksperloop: 4 chunks, more than the limit of 3"),
        ("XCCL_MAX_RANKS", "ngpus: 4 ranks, more than the limit of 3"),
        ("XCCL_MAX_SLOTS", "16 buffer chunks over all ranks, more than the limit of 3"),
        ("XCCL_MAX_TRANSFERS", "chunk transfers, more than the limit of 3"),
    ):
        monkeypatch.setenv(var, "3")
        assert_one_line_error(xccl("check", str(path)), fragment, f"set {var} to raise it")
        monkeypatch.setenv(var, "100000")
        assert xccl("check", str(path)).returncode == 0


def test_a_json_ir_with_huge_counts_is_refused(tmp_path, xccl):
    text = write_ir(compile_program(ring_allreduce.program(4)), "json")
    path = _write(tmp_path, text.replace('"num_ranks": 4', '"num_ranks": 123456789'), "big.json")
    assert_one_line_error(xccl("check", str(path)), "num_ranks: 123456789 ranks, more than", "XCCL_MAX_RANKS")
    path = _write(tmp_path, text.replace('"nchunksperloop": 4', '"nchunksperloop": 123456789'), "big2.json")
    assert_one_line_error(
        xccl("compile", str(path)), "nchunksperloop: 123456789 chunks, more than", "XCCL_MAX_BUFFER_CHUNKS"
    )


def _chain_broadcast(n: int) -> str:
    """A broadcast from rank 0 along a chain of ``n`` ranks, one chunk, out of place."""
    step = '<step s="{s}" type="{t}" srcbuf="{b}" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>'
    lines = [
        f'<algo name="chain" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="{n}" coll="broadcast" '
        'inplace="0" outofplace="1" minBytes="0" maxBytes="0" root="0">'
    ]
    for r in range(n):
        send, recv = (r + 1 if r < n - 1 else -1), (r - 1 if r else -1)
        lines.append(f'  <gpu id="{r}" i_chunks="1" o_chunks="1" s_chunks="0">')
        lines.append(f'    <tb id="0" send="{send}" recv="{recv}" chan="0">')
        if r == 0:
            lines += [step.format(s=0, t="cpy", b="i"), step.format(s=1, t="s", b="i")]
        else:
            lines.append(step.format(s=0, t="rcs" if send >= 0 else "r", b="o"))
        lines += ["    </tb>", "  </gpu>"]
    return "\n".join([*lines, "</algo>"]) + "\n"


def test_a_512_rank_schedule_loads_checks_and_compiles(tmp_path, xccl):
    path = _write(tmp_path, _chain_broadcast(512))
    proc = xccl("check", str(path))
    assert proc.returncode == 0, proc.stdout
    assert (
        "broadcast on 512 ranks" in proc.stdout and "computes broadcast for out-of-place calls" in proc.stdout
    )
    assert xccl("compile", str(path), "-o", str(tmp_path / "out.xml")).returncode == 0


# -- files that are not XML ----------------------------------------------------------------------


def _unreadable(tmp_path) -> list[tuple[str, str]]:
    (tmp_path / "latin1.xml").write_bytes('<algo name="caf\xe9">'.encode("latin-1"))
    os.symlink("/dev/zero", tmp_path / "zero.xml")
    (tmp_path / "folder.xml").mkdir()
    head = '<algo name="n" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" coll="allreduce" inplace="0">'
    (tmp_path / "nested.xml").write_text(head + "<x>" * 100000 + "</x>" * 100000 + "</algo>\n")
    (tmp_path / "unclosed.xml").write_text(head + "<x>" * 100000)
    (tmp_path / "garbage.xml").write_text("<" * 50000 + "\x00\x01 junk >>> \n" * 1000)
    (tmp_path / "prose.xml").write_text("Dear reader,\nthis is not XML.\n" * 1000)
    return [
        ("latin1.xml", "not UTF-8 text"),
        ("zero.xml", "is a device"),
        ("folder.xml", "cannot read"),
        ("nested.xml", "there is no <gpu> with id 0"),
        ("unclosed.xml", "<x> (line 1) is never closed"),
        ("garbage.xml", "element name <<<<<<<<<<<<<<<<<<<<... is longer than 253 characters"),
        ("prose.xml", "expected '<', got 'D'"),
    ]


@pytest.mark.serial  # times itself: run alone (see Makefile)
def test_unreadable_files_give_one_line(tmp_path, xccl):
    for name, fragment in _unreadable(tmp_path):
        path = tmp_path / name
        for command in ("check", "compile"):
            start = time.perf_counter()
            proc = xccl(command, str(path))
            assert time.perf_counter() - start < 30, (command, name)  # refused, not read to the end
            assert_one_line_error(proc, str(path), fragment)


def test_the_writer_never_writes_what_its_runtime_rejects(tmp_path, xccl):
    """msccl's parser rejects minBytes above maxBytes; "no limit" is INT64_MAX there, above any
    minBytes (1 GiB stood for it before, so a 2 GiB minBytes was refused)."""
    out = tmp_path / "ring.xml"
    proc = xccl(
        "compile", "example:ring_allreduce", "--dialect", "msccl", "--min-bytes", "2GiB", "--max-bytes", "1GiB",
        "-o", str(out),
    )  # fmt: skip
    assert_one_line_error(proc, "minBytes 2147483648 > maxBytes 1073741824")
    assert not out.exists()
    proc = xccl("compile", "example:ring_allreduce", "--dialect", "msccl", "--min-bytes", "2GiB", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert 'minBytes="2147483648" maxBytes="9223372036854775807"' in out.read_text()
    assert xccl("check", str(out)).returncode == 0


@pytest.mark.serial  # times itself: run alone (see Makefile)
@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (("--instances", "1000000"), "1000000 instance(s) x 1 channel(s) exceed the 32 channels"),
        (("--channels", "1000000"), "1 instance(s) x 1000000 channel(s) exceed the 32 channels"),
        (("--instances", "4", "--channels", "9"), "4 instance(s) x 9 channel(s) exceed the 32 channels"),
    ],
)
def test_more_channels_than_the_runtime_has_are_refused_before_replicating(tmp_path, xccl, flags, fragment):
    algo = tmp_path / "ag.json"
    assert xccl("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(algo)).returncode == 0
    start = time.perf_counter()
    proc = xccl("compile", str(algo), "-o", str(tmp_path / "ag.xml"), *flags)
    assert time.perf_counter() - start < 5
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "ag.xml").exists()


def test_compile_parses_an_algorithm_file_once(tmp_path, xccl, monkeypatch):
    # the JSON read to tell an algorithm from an IR is the one compiled: the 512-rank allreduce's
    # 13 MB were parsed twice (0.4 s)
    import common.files

    topo = load("ring:4")
    source = make_baseline("ring", topo, make_collective("allgather", 4)).save(tmp_path / "ag.json")
    parsed: list[str] = []
    parse = common.files.parse_json

    def counted(text: str, where: str, error: type) -> object:
        parsed.append(where)
        return parse(text, where, error)

    monkeypatch.setattr(common.files, "parse_json", counted)
    proc = xccl("compile", str(source), "-o", str(tmp_path / "ag.xml"))
    assert proc.returncode == 0, proc.stderr
    assert parsed.count(str(source)) == 1
    assert (tmp_path / "ag.xml").read_text().startswith("<algo ")
