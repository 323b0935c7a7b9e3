"""``xccl check --dialect X`` is as strict as X's parser: one test per rule of each runtime's XML
parser (Azure msccl-executor-nccl ``msccl_parser.cc``; microsoft/msccl ``topo.cc`` and ``xml.cc``;
both read through NCCL's tiny XML reader), each with a small file that parser rejects, made by
editing a valid compiled file, and the rule or field named in what ``check`` says. The independent
model of the parsers in ``msccl_xml_rules`` rejects each file too."""

from __future__ import annotations

from functools import cache

import pytest
from codegen_helpers import writable
from conftest import assert_one_line_error
from msccl_xml_rules import violations

from codegen.compiler import compile_program
from codegen.examples import allpairs_allreduce
from codegen.formats import write_ir


@cache
def _valid(dialect: str) -> str:
    """A 4-rank all-pairs allreduce (three threadblocks per rank, dependencies, scratch; so a 1 GiB
    window where scratch is allocated for ``maxBytes``)."""
    return write_ir(writable(compile_program(allpairs_allreduce.program(4), dialect=dialect), dialect), dialect)


def _once(old: str, new: str):
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def _drop_attr(key: str, element: str = "<algo "):
    """Remove attribute ``key`` from the first ``element``."""

    def edit(text: str) -> str:
        start = text.index(element)
        end = text.index(">", start)
        tag = text[start:end]
        at = tag.index(f' {key}="')
        close = tag.index('"', at + len(key) + 3)
        return text[:start] + tag[:at] + tag[close + 1 :] + text[end:]

    return edit


def _set_attr(key: str, value: str, element: str = "<algo "):
    """Set attribute ``key`` of the first ``element`` (added at the end when absent)."""

    def edit(text: str) -> str:
        start = text.index(element)
        end = text.index(">", start)
        tag = text[start:end].removesuffix("/")
        slash = "/" if text[end - 1] == "/" else ""
        if f' {key}="' in tag:
            at = tag.index(f' {key}="') + len(key) + 3
            tag = tag[:at] + value + tag[tag.index('"', at) :]
        else:
            tag += f' {key}="{value}"'
        return text[:start] + tag + slash + text[end:]

    return edit


def _many_threadblocks(count: int):
    """Gpu 0 gets empty threadblocks up to ``count`` in all."""

    def edit(text: str) -> str:
        extra = "".join(
            f'    <tb id="{t}" send="-1" recv="-1" chan="0">\n    </tb>\n' for t in range(3, count)
        )
        return _once('  </gpu>\n  <gpu id="1"', f'{extra}  </gpu>\n  <gpu id="1"')(text)

    return edit


def _many_steps(count: int):
    """Threadblock 0 of gpu 0 gets ``count`` more steps (nops, numbered on)."""

    def edit(text: str) -> str:
        nops = "".join(f"      {_nop(7 + k)}\n" for k in range(count))
        return _once('    </tb>\n    <tb id="1" send="2"', f'{nops}    </tb>\n    <tb id="1" send="2"')(text)

    return edit


def _many_nop_threadblocks(count: int, steps: int):
    """Gpu 0 gets ``count`` more threadblocks of ``steps`` nops each."""

    def edit(text: str) -> str:
        body = "".join(f"      {_nop(k)}\n" for k in range(steps))
        extra = "".join(
            f'    <tb id="{3 + t}" send="-1" recv="-1" chan="0">\n{body}    </tb>\n' for t in range(count)
        )
        return _once('  </gpu>\n  <gpu id="1"', f'{extra}  </gpu>\n  <gpu id="1"')(text)

    return edit


def _nop(s: int, depid: int = -1, deps: int = -1) -> str:
    return (
        f'<step s="{s}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="{depid}" '
        f'deps="{deps}" hasdep="0"/>'
    )


def _waiting_nop_before_last(text: str) -> str:
    """A nop carrying a dependency before the last step of gpu 0's first threadblock (which has
    none), numbers kept positional."""
    end = text.index("    </tb>")
    start = text.rindex("<step ", 0, end)
    last = text[start:end]
    s = int(last.split('"')[1])
    assert 'depid="-1"' in last
    moved = last.replace(f'<step s="{s}"', f'<step s="{s + 1}"', 1)
    return text[:start] + _nop(s, depid=1, deps=1) + "\n      " + moved + text[end:]


def _wide(ranks: int, senders: int = 0) -> str:
    """An algo of ``ranks`` ranks, one empty threadblock each, and ``senders`` threadblocks of rank
    0 with a send peer each on channel 0 (made, not edited: no small file has so many)."""
    head = (
        f'<algo name="wide" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="{ranks}" coll="allreduce" '
        'inplace="0" outofplace="1" minBytes="0" maxBytes="1073741824">\n'
    )
    gpus = []
    for r in range(ranks):
        tbs = (
            [f'    <tb id="{t}" send="{t + 1}" recv="-1" chan="0">\n    </tb>\n' for t in range(senders)]
            if r == 0
            else []
        )
        tbs = tbs or ['    <tb id="0" send="-1" recv="-1" chan="0">\n    </tb>\n']
        gpus.append(f'  <gpu id="{r}" i_chunks="1" o_chunks="1" s_chunks="0">\n{"".join(tbs)}  </gpu>\n')
    return head + "".join(gpus) + "</algo>\n"


STEP = '<step s="1" type="r" srcbuf="s" srcoff="1" dstbuf="s" dstoff="1"'
"""The second step of gpu 0's first threadblock (a receive into scratch)."""

REDIRECTED = STEP.replace('dstoff="1"', 'dstoff="4"')

BOTH = ("azure", "msccl")
RULES = [
    # NCCL's XML reader, shared by both runtimes
    ("no XML declaration", BOTH, lambda t: '<?xml version="1.0"?>\n' + t, "XML declaration"),
    ("values double-quoted", BOTH, lambda t: t.replace('proto="Simple"', "proto='Simple'"), "double-quoted"),
    (
        "only space or newline between elements",
        BOTH,
        _once('\n  <gpu id="1"', '\n\t<gpu id="1"'),
        "expected '<'",
    ),
    ("attributes on the element's line", BOTH, _once(' ngpus="4"', '\n ngpus="4"'), "on its line"),
    ("element names fit", BOTH, _once("  <gpu id=", f"  <{'x' * 300}/>\n  <gpu id="), "longer than 253"),
    ("attribute values fit", BOTH, _set_attr("name", "n" * 300), "longer than 255"),
    ("comments end", BOTH, _once("</algo>", "<!-- no end\n</algo>"), "unterminated comment"),
    ("closing tags match", BOTH, _once("    </tb>\n", "    </gpu>\n"), "</gpu> closes <tb>"),
    ("elements are closed", BOTH, lambda t: t.replace("</algo>\n", ""), "never closed"),
    (
        "only the first 16 attributes are read",
        BOTH,
        _once('<step s="0" type="s"', '<step a="0" b="0" c="0" d="0" e="0" f="0" g="0" s="0" type="s"'),
        "attribute hasdep is missing (it comes after the first 16",
    ),
    ("at most 1024 children", BOTH, lambda t: _wide(1025), "holds at most 1024 <gpu>"),
    (
        "fewer than 4096 elements per load",
        BOTH,
        _many_nop_threadblocks(70, 60),
        "XML elements to load (<algo>, 4 <gpu>, 73 <tb>,",
    ),
    # <algo>
    *(
        (f"<algo> {key} required", BOTH, _drop_attr(key), f"attribute {key} is missing")
        for key in ("ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace")
    ),
    *(
        (
            f"<algo> {key} required",
            ("azure",),
            _drop_attr(key),
            f"attribute {key} is missing: the azure runtime",
        )
        for key in ("outofplace", "minBytes", "maxBytes")
    ),
    ("<algo> name required", ("msccl",), _drop_attr("name"), "attribute name is missing: the msccl runtime"),
    ("proto is Simple, LL or LL128", BOTH, _set_attr("proto", "LL64"), "protocol 'LL64'"),
    ("coll spelled reducescatter", ("azure",), _set_attr("coll", "reduce_scatter"), "coll 'reduce_scatter'"),
    ("no custom collective", ("azure",), _set_attr("coll", "custom"), "coll 'custom'"),
    ("coll spelled reduce_scatter", ("msccl",), _set_attr("coll", "reducescatter"), "coll 'reducescatter'"),
    ("no gather", ("msccl",), _set_attr("coll", "gather"), "coll 'gather'"),
    ("coll known at all", BOTH, _set_attr("coll", "allsum"), "coll 'allsum'"),
    (
        "minBytes <= maxBytes",
        ("msccl",),
        _set_attr("minBytes", "1073741825"),
        "minBytes=1073741825 > maxBytes",
    ),
    (
        "minBytes <= the default maxBytes",
        ("msccl",),
        lambda t: _drop_attr("maxBytes")(_set_attr("minBytes", "200000000")(t)),
        "(its default when maxBytes is absent)",
    ),
    ("minBytes not negative", BOTH, _set_attr("minBytes", "-1"), "minBytes: expected >= 0"),
    ("nthreads a multiple of 32", ("msccl",), _set_attr("nthreads", "100"), "nthreads='100'"),
    ("nchannels within 1..32", BOTH, _set_attr("nchannels", "40"), "nchannels=40"),
    # <gpu>
    *(
        (f"<gpu> {key} required", BOTH, _drop_attr(key, "<gpu "), f"attribute {key} is missing")
        for key in (
            "id",
            "i_chunks",
            "o_chunks",
            "s_chunks",
        )
    ),
    ("s_chunks not negative", BOTH, _set_attr("s_chunks", "-1", "<gpu "), "s_chunks: expected >= 0"),
    (
        "i_chunks 0 or the whole buffer",
        ("msccl",),
        _set_attr("o_chunks", "2", "<gpu "),
        "neither 0 nor the whole",
    ),
    # <tb>
    *(
        (f"<tb> {key} required", BOTH, _drop_attr(key, "<tb "), f"attribute {key} is missing")
        for key in (
            "id",
            "send",
            "recv",
            "chan",
        )
    ),
    ("tb id not negative", BOTH, _set_attr("id", "-1", "<tb "), "id: expected >= 0"),
    ("tb ids unique", BOTH, _once('<tb id="1"', '<tb id="0"'), "threadblock ids must be 0..2"),
    ("tb ids contiguous", BOTH, _once('<tb id="2"', '<tb id="5"'), "missing [2]"),
    (
        "threadblocks per gpu (azure)",
        ("azure",),
        _many_threadblocks(1025),
        "1025 threadblocks: the azure runtime",
    ),
    (
        "threadblocks per gpu (msccl)",
        ("msccl",),
        _many_threadblocks(217),
        "217 threadblocks: the msccl runtime",
    ),
    ("peers are other ranks", BOTH, _set_attr("send", "0", "<tb "), "send peer 0: expected another rank"),
    ("peers >= -1", BOTH, _set_attr("recv", "-2", "<tb "), "recv: expected >= -1"),
    (
        "peers < ngpus",
        ("msccl",),
        _set_attr("send", "4", "<tb "),
        "send peer 4: expected another rank in 0..3",
    ),
    ("chan not negative", BOTH, _set_attr("chan", "-1", "<tb "), "chan: expected >= 0"),
    ("chan below 32", BOTH, _set_attr("chan", "33", "<tb "), "channel 33: the"),
    ("at most 32 sending threadblocks per channel", BOTH, lambda t: _wide(34, 33), "more than 32 sending"),
    # <step>
    *(
        (f"<step> {key} required", BOTH, _drop_attr(key, "<step "), f"attribute {key} is missing")
        for key in ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
    ),
    ("s below 64", ("azure",), _set_attr("s", "64", "<step "), "s=64: the azure runtime needs 0 <= s < 64"),
    (
        "s below 256",
        ("msccl",),
        _set_attr("s", "256", "<step "),
        "s=256: the msccl runtime needs 0 <= s < 256",
    ),
    ("s not negative", BOTH, _set_attr("s", "-1", "<step "), "s=-1: the"),
    ("steps per threadblock (azure)", ("azure",), _many_steps(60), "67 steps: the azure runtime allows 64"),
    (
        "steps per threadblock (msccl)",
        ("msccl",),
        _many_steps(250),
        "257 steps: the msccl runtime allows 256",
    ),
    ("known step types", BOTH, _set_attr("type", "ra", "<step "), "type 'ra'"),
    ("buffers i, o or s", BOTH, _set_attr("srcbuf", "x", "<step "), "srcbuf 'x'"),
    ("cnt below 72", BOTH, _set_attr("cnt", "72", "<step "), "count 72: the runtime allows at most 71"),
    ("cnt not negative", BOTH, _set_attr("cnt", "-1", "<step "), "cnt: expected >= 0"),
    (
        "sends need a send peer",
        BOTH,
        _set_attr("send", "-1", "<tb "),
        "sends but the threadblock has no send peer",
    ),
    (
        "receives need a recv peer",
        BOTH,
        _set_attr("recv", "-1", "<tb "),
        "receives but the threadblock has no receive",
    ),
    ("offsets inside the buffer", BOTH, _once(STEP, REDIRECTED), "dst s[4..4] is outside"),
    ("offsets not below -1", BOTH, _set_attr("srcoff", "-2", "<step "), "srcoff: expected >= -1"),
    (
        "nop dependencies taken by the next step",
        BOTH,
        _waiting_nop_before_last,
        "follows nops with dependencies but has none itself",
    ),
    ("hasdep 0 or 1", BOTH, _set_attr("hasdep", "2", "<step "), "hasdep must be 0 or 1"),
]


def _cases():
    for rule, dialects, edit, fragment in RULES:
        for dialect in dialects:
            yield pytest.param(dialect, edit, fragment, id=f"{dialect}: {rule}")


def test_the_valid_files_pass(tmp_path, xccl):
    for dialect in ("azure", "msccl"):
        path = tmp_path / f"{dialect}.xml"
        path.write_text(_valid(dialect))
        proc = xccl("check", str(path), "--dialect", dialect)
        assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize(("dialect", "edit", "fragment"), list(_cases()))
def test_check_rejects_what_the_parser_rejects(tmp_path, xccl, dialect, edit, fragment):
    path = tmp_path / "broken.xml"
    path.write_text(edit(_valid(dialect)))
    assert violations(path.read_text(), dialect), "the runtime's parser (as modelled) accepts it"
    proc = xccl("check", str(path), "--dialect", dialect)
    if proc.returncode == 2:  # the reader refuses the file: one line naming file, line and field
        assert_one_line_error(proc, f"{path}:", fragment)
    else:
        assert proc.returncode == 1, proc.stdout
        assert f"problem(s) for the {dialect} runtime" in proc.stdout
        assert fragment in proc.stdout, proc.stdout


def test_what_a_parser_does_not_read_it_does_not_require(tmp_path, xccl):
    """The executor never reads name; the research runtime never reads outofplace and defaults
    minBytes and maxBytes."""
    azure = tmp_path / "azure.xml"
    azure.write_text(_drop_attr("name")(_valid("azure")))
    assert xccl("check", str(azure), "--dialect", "azure").returncode == 0
    msccl = tmp_path / "msccl.xml"
    msccl.write_text(_drop_attr("maxBytes")(_drop_attr("minBytes")(_valid("msccl"))))
    assert 'outofplace="' not in msccl.read_text()
    proc = xccl("check", str(msccl), "--dialect", "msccl")
    assert proc.returncode == 0, proc.stdout
