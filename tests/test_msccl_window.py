"""The research runtime's (microsoft/msccl) size window as written by ``--dialect msccl``.

It reads ``maxBytes`` with ``strtoll`` into an ``int64_t`` and selects a file for a call of
``nBytes`` only when ``minBytes <= nBytes < maxBytes`` (``src/graph/topo.cc``, ``tuning.cc``); it
has no value meaning "no limit", and it allocates ``maxBytes x s_chunks / nchunksperloop`` bytes of
scratch when the communicator starts (``init.cc``). So "no limit" is written as INT64_MAX, the
largest value it parses (read back as no limit), and a schedule with scratch needs a finite window.
"""

from __future__ import annotations

import re

import pytest
from conftest import assert_one_line_error
from msccl_xml_rules import violations

from codegen.compiler import compile_algorithm, compile_program
from codegen.errors import IRCheckError
from codegen.examples import allpairs_allreduce
from codegen.formats import read_ir, write_ir
from runtime.selection import check_window
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load

INT64_MAX = (1 << 63) - 1
GIB = 1 << 30


def _selected_by_research_runtime(text: str, nbytes: int) -> bool:
    """tuning.cc: ``nBytes >= minBytes && nBytes < maxBytes``, both read by ``strtoll`` (which
    saturates at INT64_MAX) into ``int64_t``; our own model of it, independent of the reader."""
    low, high = (min(int(re.search(f'{k}="(\\d+)"', text)[1]), INT64_MAX) for k in ("minBytes", "maxBytes"))
    return low <= nbytes < high


@pytest.fixture(scope="module")
def allreduce_xml() -> str:
    """A ring allreduce on 8 ranks (no scratch), no window given."""
    topo = load("ring:8")
    ir = compile_algorithm(make_baseline("ring", topo, make_collective("allreduce", 8, 8)), topo, dialect="msccl")
    return write_ir(ir, "msccl")


def test_no_limit_is_the_largest_value_the_runtime_parses(allreduce_xml):
    assert f'maxBytes="{INT64_MAX}"' in allreduce_xml
    assert violations(allreduce_xml, "msccl") == []


@pytest.mark.parametrize("nbytes", [1, 128 << 20, GIB, 4 * GIB, 1 << 40])
def test_no_limit_selects_every_size_a_call_can_have(allreduce_xml, nbytes):
    """1 GiB was the limit written before: a 1 GiB call then silently ran NCCL's own algorithm."""
    assert _selected_by_research_runtime(allreduce_xml, nbytes)
    check_window(read_ir(allreduce_xml), nbytes, "msccl")  # our selection model agrees


def test_no_limit_round_trips(allreduce_xml):
    ir = read_ir(allreduce_xml)
    assert ir.max_bytes == 0
    assert write_ir(ir, "msccl") == allreduce_xml


@pytest.mark.parametrize("written", [str(INT64_MAX), str(1 << 64), "0x7fffffffffffffff", str(10**30)])
def test_values_strtoll_saturates_read_as_no_limit(allreduce_xml, written):
    text = allreduce_xml.replace(f'maxBytes="{INT64_MAX}"', f'maxBytes="{written}"')
    assert read_ir(text).max_bytes == 0


def test_a_finite_window_round_trips(allreduce_xml):
    ir = read_ir(allreduce_xml)
    text = write_ir(ir.__class__(**{**ir.__dict__, "min_bytes": 1 << 20, "max_bytes": 4 * GIB}), "msccl")
    assert 'minBytes="1048576" maxBytes="4294967296"' in text
    assert (read_ir(text).min_bytes, read_ir(text).max_bytes) == (1 << 20, 4 * GIB)
    assert not _selected_by_research_runtime(text, 4 * GIB)  # [min, max)


def test_the_executor_keeps_zero_for_no_limit():
    ir = compile_program(allpairs_allreduce.program(4))
    assert 'maxBytes="0"' in write_ir(ir, "azure")


def test_scratch_without_a_window_is_refused():
    """INT64_MAX x s_chunks / nchunksperloop bytes of scratch at communicator init would fail it."""
    ir = compile_program(allpairs_allreduce.program(4), dialect="msccl")
    assert any(g.scratch_chunks for g in ir.gpus)
    with pytest.raises(IRCheckError, match="no unlimited window"):
        write_ir(ir, "msccl")
    text = write_ir(ir.__class__(**{**ir.__dict__, "max_bytes": GIB}), "msccl")
    assert 'maxBytes="1073741824"' in text and violations(text, "msccl") == []
    forced = text.replace('maxBytes="1073741824"', f'maxBytes="{INT64_MAX}"')
    assert any("scratch no GPU can allocate" in v for v in violations(forced, "msccl"))


def test_compile_says_how_to_give_scratch_a_window(xccl, tmp_path):
    program = "example:allpairs_allreduce"
    proc = xccl("compile", program, "-D", "num_ranks=4", "--dialect", "msccl")
    assert_one_line_error(proc, "no unlimited window", "--max-bytes", "scratch")
    out = tmp_path / "a.xml"
    proc = xccl("compile", program, "-D", "num_ranks=4", "--dialect", "msccl", "--max-bytes", "1GiB", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert read_ir(out.read_text()).max_bytes == GIB


def test_an_allgathers_window_is_compared_with_the_whole_buffer_on_the_research_runtime():
    """NCCL's ArgsCheck multiplies an allgather's nBytes by nRanks ("count is per rank"), so the
    window [0, 1 MiB) of an 8-rank allgather holds nccl-tests' 512 KiB call and not its 1 MiB one
    (compared with a rank's 128 KiB share, 1 MiB would have been selected)."""
    from runtime.errors import SizeNotSelected

    ring8 = load("ring:8")
    ir = compile_algorithm(make_baseline("ring", ring8, make_collective("allgather", 8)), ring8)
    windowed = read_ir(write_ir(_with_window(ir, 0, 1 << 20), "msccl"))
    check_window(windowed, 1 << 19, "msccl")
    with pytest.raises(SizeNotSelected, match="maxBytes 1048576"):
        check_window(windowed, 1 << 20, "msccl")


def _with_window(ir, low: int, high: int):
    import dataclasses

    return dataclasses.replace(ir, min_bytes=low, max_bytes=high)
