"""Our JSON IR: lossless (several dependencies per step too), deterministic, and strict on input."""

from __future__ import annotations

import json

import pytest
from codegen_helpers import stage_after, unfolded

from codegen.errors import IRFormatError
from codegen.examples import two_step_alltoall
from codegen.formats import read_ir, write_ir
from codegen.formats.json_ir import read_ir_json, write_ir_json


def test_round_trip_keeps_several_dependencies_per_step():
    ir = unfolded(stage_after(two_step_alltoall.program("dgx-a100x2"), "insert_dependencies"))
    assert any(len(op.deps) > 1 for g in ir.gpus for tb in g.threadblocks for op in tb.ops)
    text = write_ir_json(ir)
    assert read_ir_json(text) == ir == read_ir(text)
    assert write_ir_json(read_ir_json(text)) == text
    assert json.loads(text)["format"] == "xccl-ir/1"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.update(format="xccl-ir/0"), "format"),
        (lambda d: d.pop("nchunksperloop"), "(top level)"),
        (lambda d: d["gpus"][0].update(rank="zero"), "gpus[0].rank"),
        (
            lambda d: d["gpus"][1]["threadblocks"][0]["ops"][0].update(type="ra"),
            "gpus[1].threadblocks[0].ops[0].type",
        ),
        (lambda d: d["gpus"][0]["threadblocks"][0]["ops"][0].update(src=["x", 1]), "ops[0].src"),
        (lambda d: d["gpus"][0]["threadblocks"][0].update(send=-1), "threadblocks[0].send"),
    ],
)
def test_malformed_json_names_the_field(edit, field):
    ir = stage_after(two_step_alltoall.program("dgx-a100x2"), "size_buffers")
    doc = json.loads(write_ir(ir, "json"))
    edit(doc)
    with pytest.raises(
        IRFormatError,
        match=field.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)"),
    ):
        read_ir_json(json.dumps(doc), "ir.json")


def test_invalid_json_gives_the_position():
    with pytest.raises(IRFormatError, match=r"ir.json:1:2: invalid JSON"):
        read_ir_json("{x", "ir.json")
