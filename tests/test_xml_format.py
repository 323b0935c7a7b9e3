"""MSCCL XML: the writer's layout in both dialects, the reader's errors and other tools' quirks,
byte-exact golden files, and the independent validator of the runtimes' rules."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from codegen_helpers import compile_and_run
from ir_interpreter import execute
from msccl_xml_rules import violations

from codegen.check import find_problems
from codegen.compiler import compile_algorithm, compile_program
from codegen.errors import IRCheckError, XmlFormatError
from codegen.examples import binomial_tree_broadcast, recursive_doubling_allgather, ring_allreduce
from codegen.formats import read_ir, write_ir
from codegen.formats.xml_reader import read_xml, strtol, xml_dialect
from codegen.formats.xml_writer import write_xml
from codegen.ir import Buffer, OpType
from codegen.passes.size_buffers import size_buffers
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load

GOLDEN = Path(__file__).parent / "golden"


def _golden_cases():
    topo = load("fully-connected:4")
    direct = make_baseline("direct", topo, make_collective("allreduce", 4, 4))
    return {
        "ring_allreduce_4.azure.xml": lambda: write_ir(compile_program(ring_allreduce.program(4)), "azure"),
        "recursive_doubling_allgather_4.msccl.xml": lambda: write_ir(
            compile_program(recursive_doubling_allgather.program(4), dialect="msccl"), "msccl"
        ),
        "direct_allreduce_fc4.json": lambda: write_ir(compile_algorithm(direct, topo), "json"),
    }


@pytest.mark.parametrize("name", sorted(_golden_cases()))
def test_golden_files_are_byte_exact(name):
    text = _golden_cases()[name]()
    path = GOLDEN / name
    if os.environ.get("XCCL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; if on purpose, rerun with XCCL_UPDATE_GOLDEN=1"
    assert read_ir(text) == read_ir(path.read_text())


def test_layout_follows_the_runtime_reader():
    text = write_xml(compile_program(ring_allreduce.program(4)), "azure")
    lines = text.splitlines()
    assert lines[0].startswith('<algo name="allreduce-ring-4" ') and not text.startswith("<?")
    assert all(line.count("<") == 1 and "\t" not in line and "'" not in line for line in lines)
    assert all(line == line.rstrip() and (len(line) - len(line.lstrip())) % 2 == 0 for line in lines)
    steps = [line for line in lines if "<step " in line]
    assert all(line.endswith("/>") for line in steps)
    numbers = [int(line.split(' s="')[1].split('"')[0]) for line in steps]
    assert numbers == list(range(7)) * 4  # one threadblock of 7 steps per rank, numbered by position


def test_dialects_differ_in_what_they_spell_and_require():
    ir = compile_algorithm(
        make_baseline("ring", load("ring:4"), make_collective("reducescatter", 4)), "ring:4"
    )
    azure, msccl = write_xml(ir, "azure"), write_xml(ir, "msccl")
    assert 'coll="reducescatter"' in azure and 'outofplace="1"' in azure and 'maxBytes="0"' in azure
    assert 'coll="reduce_scatter"' in msccl and "outofplace" not in msccl and 'maxBytes="9223372036854775807"' in msccl
    assert read_xml(azure) == read_xml(msccl) == ir
    assert xml_dialect(azure) == "azure" and xml_dialect(msccl) == "msccl"
    assert violations(azure, "azure") == [] and violations(msccl, "msccl") == []


def test_rrc_writes_its_local_operand_in_srcbuf():
    """Out of place, the first reduction into a rank reads its input and writes its output."""
    topo = load("fully-connected:4")
    ir = compile_algorithm(make_baseline("direct", topo, make_collective("allreduce", 4, 4)), topo)
    rrc = [
        op for g in ir.gpus for tb in g.threadblocks for op in tb.ops if op.type is OpType.RECV_REDUCE_COPY
    ]
    assert all(op.dst.buffer is Buffer.OUTPUT for op in rrc)
    first = [op for op in rrc if op.src.buffer is Buffer.INPUT]
    assert len(first) == 4  # rank r reduces address r: the first time from its input, then in its output
    line = next(line for line in write_xml(ir).splitlines() if 'type="rrc" srcbuf="i"' in line)
    assert 'dstbuf="o"' in line


def test_rooted_collectives_keep_their_root():
    ir = compile_program(binomial_tree_broadcast.program(4))
    text = write_xml(ir)
    assert ' root="0"' in text and read_xml(text) == ir
    assert read_xml(text.replace(' root="0"', "")).root == 0  # inferred: the rank that never receives


def test_the_writer_refuses_what_the_runtime_would():
    ir = compile_program(binomial_tree_broadcast.program(4))
    with pytest.raises(IRCheckError):
        write_xml(ir.__class__(**{**ir.__dict__, "collective": "gather"}), "msccl")


# -- reading what other tools write ------------------------------------------------------------

MSCCL_TOOLS_STYLE = """<algo name="2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1">
  <gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="3" type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <!-- rank 1 mirrors rank 0 -->
  <gpu id="1" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="s" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="3" type="r" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


def test_a_file_in_the_reference_compilers_style_is_read_as_it_meant():
    ir = read_xml(MSCCL_TOOLS_STYLE, "mt.xml")
    rrc = ir.gpu(0).threadblock(0).ops[1]
    assert rrc.type is OpType.RECV_REDUCE_COPY and rrc.src == rrc.dst  # the srcbuf="s" quirk
    assert ir.max_bytes == 1 << 27 and ir.gpu(0).output_chunks == 0 and not ir.outofplace
    assert find_problems(ir, "msccl") == []
    execute(ir, inplace=True)
    assert size_buffers(ir).gpu(0).output_chunks == 2


def test_usage_based_sizes_are_kept_and_flagged_for_the_research_runtime():
    text = write_xml(compile_program(ring_allreduce.program(4)), "msccl").replace(
        'o_chunks="4"', 'o_chunks="2"', 1
    )
    ir = read_xml(text)
    assert ir.gpu(0).output_chunks == 2
    assert [str(p) for p in find_problems(ir, "msccl")] == [
        "rank 0: o_chunks=2 is neither 0 nor the whole buffer (4)"
    ]
    assert find_problems(ir, "azure") == []
    assert any("inconsistent" in v for v in violations(text, "msccl"))


def test_a_step_reads_the_same_in_every_form_the_runtimes_accept():
    """The writer's form is read in one match per step; any other goes through the general reader."""
    text = write_xml(compile_program(ring_allreduce.program(4)), "azure")
    hexed = re.sub(r'cnt="(\d+)"', lambda m: f'cnt="0x{int(m[1]):x}"', text)
    moved = re.sub(r'(<step )(s="\d+") (.*) (hasdep="\d")/>', r"\1\4 \3 \2/>", text)
    spaced = text.replace("/>\n      <step", "/>\n\n  <step")
    assert hexed != text and moved != text and spaced != text
    ir = read_xml(text)
    assert read_xml(hexed) == ir and read_xml(moved) == ir and read_xml(spaced) == ir


def test_a_step_in_the_writers_form_is_refused_at_its_line():
    """Steps in the writer's form are read a threadblock at a time; a bad one still names its line."""
    text = write_xml(compile_program(ring_allreduce.program(4)), "azure")
    lines = text.splitlines(keepends=True)
    at = next(k for k, line in enumerate(lines) if '<step s="2" ' in line)
    lines[at] = lines[at].replace('depid="-1" deps="-1"', 'depid="1" deps="-1"')
    with pytest.raises(XmlFormatError, match=rf"^bad.xml:{at + 1}: <step>: depid 1 needs deps >= 0$"):
        read_xml("".join(lines), "bad.xml")


def test_integers_read_as_strtol_base_0():
    assert [strtol(s) for s in ("12", "0x10", "010", "-1", "0")] == [12, 16, 8, -1, 0]
    with pytest.raises(ValueError):
        strtol("1e3")


@pytest.mark.parametrize(
    ("broken", "line", "message"),
    [
        (lambda t: '<?xml version="1.0"?>\n' + t, 1, "XML declaration"),
        (lambda t: t.replace('coll="allreduce"', "coll='allreduce'"), 1, "double-quoted"),
        (lambda t: t.replace(' nchunksperloop="2"', '\n nchunksperloop="2"'), 1, "on its line"),
        (lambda t: t.replace('  <gpu id="1"', '\t<gpu id="1"'), 11, "expected '<'"),
        (lambda t: t.replace(' hasdep="0"/>', "/>", 1), 4, "attribute hasdep is missing"),
        (lambda t: t.replace('type="rrc"', 'type="ra"', 1), 5, "type 'ra'"),
        (lambda t: t.replace('srcbuf="s"', 'srcbuf="x"', 1), 5, "srcbuf 'x'"),
        (lambda t: t.replace('cnt="1"', 'cnt="one"', 1), 4, "expected an integer"),
        (lambda t: t.replace("    </tb>\n  </gpu>\n  <!--", "  </gpu>\n  <!--", 1), 8, "</gpu> closes <tb>"),
        (lambda t: t.replace("</algo>\n", ""), 19, "never closed"),
        (lambda t: t.replace('<gpu id="1"', '<gpu id="0"'), 11, "id 0"),
        (lambda t: t.replace('hasdep="0"', 'hasdep="2"', 1), 4, "hasdep must be 0 or 1"),
        (lambda t: t.replace('depid="-1" deps="-1"', 'depid="0" deps="-1"', 1), 4, "depid 0 needs deps >= 0"),
        (lambda t: t.replace('coll="allreduce"', 'coll="allsum"'), 1, "coll 'allsum'"),
        (lambda t: "<algx " + t[len("<algo ") :], 1, "first element must be <algo"),
    ],
)
def test_malformed_files_give_one_line_with_the_line_number(broken, line, message):
    with pytest.raises(XmlFormatError) as info:
        read_xml(broken(MSCCL_TOOLS_STYLE), "bad.xml")
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"bad.xml:{line}: ") and message in text, text


# -- the independent validator ---------------------------------------------------------------

FIXED_STYLE = MSCCL_TOOLS_STYLE.replace('srcbuf="s" srcoff="0"', 'srcbuf="i" srcoff="0"').replace(
    'srcbuf="s" srcoff="1"', 'srcbuf="i" srcoff="1"'
)


def test_the_validator_accepts_our_output_and_flags_the_reference_compilers_rrc():
    for dialect in ("azure", "msccl"):
        ir = compile_and_run(ring_allreduce.program(4, instances=2), dialect=dialect)
        assert violations(write_xml(ir, dialect), dialect) == []
    found = violations(MSCCL_TOOLS_STYLE, "msccl")
    assert len(found) == 2 and all("local src s[" in v for v in found)  # reads scratch that does not exist
    assert violations(write_xml(read_xml(MSCCL_TOOLS_STYLE), "msccl"), "msccl") == []


@pytest.mark.parametrize(
    ("broken", "runtime", "rule"),
    [
        (lambda t: '<?xml version="1.0"?>\n' + t, "msccl", "declaration"),
        (
            lambda t: t.replace('coll="allreduce"', 'coll="allreduce" outofplace="0"'),
            "azure",
            "minBytes not found",
        ),
        (
            lambda t: t.replace('coll="allreduce"', 'coll="custom" outofplace="0" minBytes="0" maxBytes="0"'),
            "azure",
            "coll 'custom' unsupported",
        ),
        (lambda t: t.replace('type="rrc"', 'type="ra"', 1), "msccl", "not executable"),
        (lambda t: t.replace('cnt="1"', 'cnt="72"', 1), "msccl", "cnt 72"),
        (lambda t: t.replace('srcoff="1"', 'srcoff="2"', 1), "msccl", "outside 2 chunks"),
        (lambda t: t.replace('s="3" type="r"', 's="4" type="r"', 1), "msccl", "not positional"),
        (lambda t: t.replace('<tb id="0" send="1"', '<tb id="1" send="1"', 1), "msccl", "not contiguous"),
        (lambda t: t.replace('send="1" recv="1"', 'send="-1" recv="1"', 1), "msccl", "without a send peer"),
        (
            lambda t: t.replace(
                'cnt="1" depid="-1" deps="-1" hasdep="0"/>\n      <step s="3"',
                'cnt="2" depid="-1" deps="-1" hasdep="0"/>\n      <step s="3"',
                1,
            ),
            "msccl",
            "sent counts",
        ),
        (
            lambda t: t.replace(
                's="3" type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1"',
                's="3" type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="0" deps="0"',
                1,
            ),
            "msccl",
            "hasdep=0",
        ),
        (
            lambda t: t.replace("    </tb>\n  </gpu>\n</algo>", "    </tb></gpu>\n</algo>"),
            "msccl",
            "more than one element",
        ),
    ],
)
def test_the_validator_rejects_each_broken_rule(broken, runtime, rule):
    found = violations(broken(FIXED_STYLE), runtime)
    assert any(rule in v for v in found), found
