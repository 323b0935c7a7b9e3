"""The one JSON field reader: every format reports a wrong field as ``WHERE: FIELD: expected WHAT, got
VALUE``, and each accepts only what its check says."""

from __future__ import annotations

import json
import math

import pytest
from conftest import assert_one_line_error

from codegen.errors import IRFormatError
from common.errors import XcclError
from common.fields import Fields, is_integer, is_number, shown
from sketches import SketchError, sketch_from_dict
from synth.algorithm import Algorithm
from synth.errors import AlgorithmFormatError
from topologies import TopologyError, topology_from_dict


class Odd(XcclError):
    pass


F = Fields("doc.json", Odd)


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (lambda: F.integer("3", "n", 1), 'doc.json: n: expected an integer >= 1, got "3"'),
        (lambda: F.integer(True, "n"), "doc.json: n: expected an integer, got true"),
        (
            lambda: F.integer(-1, "a.b", 0, null=True),
            "doc.json: a.b: expected an integer >= 0 or null, got -1",
        ),
        (
            lambda: F.number(-0.5, "t", 0, "seconds"),
            "doc.json: t: expected a finite number of seconds >= 0, got -0.5",
        ),
        (lambda: F.number(math.inf, "t"), "doc.json: t: expected a finite number, got Infinity"),
        (lambda: F.number(math.nan, "t"), "doc.json: t: expected a finite number, got nan"),
        (lambda: F.string("", "name"), 'doc.json: name: expected a non-empty string, got ""'),
        (lambda: F.string(None, "c", empty=True), "doc.json: c: expected a string, got null"),
        (lambda: F.boolean("yes", "b"), 'doc.json: b: expected true or false, got "yes"'),
        (lambda: F.boolean(0, "b", null=True), "doc.json: b: expected true, false or null, got 0"),
        (lambda: F.array({}, "xs", of="GPUs"), "doc.json: xs: expected a list of GPUs, got {}"),
        (lambda: F.array([], "xs", nonempty=True), "doc.json: xs: expected a non-empty list, got []"),
        (lambda: F.choice(True, "k", ("a", 1)), "doc.json: k: expected one of a, 1, got true"),
        (lambda: F.keys([], "", ("a",)), "doc.json: (top level): expected an object, got []"),
        (lambda: F.keys({"b": 1}, "x", ("a",)), 'doc.json: x.b: expected one of the known keys (a), got "b"'),
        (lambda: F.keys({}, "", ("a",), ("a",)), "doc.json: a: expected a value (required)"),
        (
            lambda: F.record({"a": 1}, "r", ("a", "b")),
            "doc.json: r: expected an object with keys a, b (missing b)",
        ),
        (
            lambda: F.record({"a": 1, "b": 2, "c": 3}, "r", ("a", "b")),
            'doc.json: r: expected an object with keys a, b (unknown key "c")',
        ),
        (
            lambda: F.check(5, "v", lambda v: "an even number" if v % 2 else None),
            "doc.json: v: expected an even number, got 5",
        ),
    ],
)
def test_each_check_names_the_document_the_field_what_was_expected_and_what_came(check, message):
    with pytest.raises(Odd) as err:
        check()
    assert str(err.value) == message


def test_accepted_values_come_back_as_they_are():
    assert F.integer(0, "n", 0) == 0 and F.integer(None, "n", 0, null=True) is None
    assert F.number(2, "t", 0) == 2.0 and isinstance(F.number(2, "t"), float)
    assert F.keys({"a": 1}, "", ("a", "b"), ("a",)) == {"a": 1}
    assert F.record({"b": 1, "a": 2}, "", ("a", "b")) == {"b": 1, "a": 2}
    assert F.choice("a", "k", ("a", "b")) == "a" and F.array([1], "xs", nonempty=True) == [1]


def test_booleans_are_neither_integers_nor_numbers():
    assert not is_integer(True) and not is_number(False) and is_integer(3) and is_number(2.5)
    assert not is_number(math.inf) and not is_number(math.nan) and not is_number("1")


def test_a_shown_value_is_one_short_line_whatever_it_is():
    assert shown({1, 2}) == "{1, 2}"  # no JSON form: Python's
    assert shown(10**5000) == "an int too long to print"  # neither JSON nor repr prints it
    assert len(shown(list(range(1000)))) == 200 and shown(list(range(1000))).endswith("...")


@pytest.mark.parametrize(
    ("read", "error"),
    [
        (lambda doc: topology_from_dict(doc, "doc.json"), TopologyError),
        (lambda doc: sketch_from_dict(doc, "doc.json"), SketchError),
        (lambda doc: Algorithm.from_dict(doc, "doc.json"), AlgorithmFormatError),
    ],
    ids=["topology", "sketch", "algorithm"],
)
def test_every_format_refuses_a_document_that_is_no_object_in_the_same_words(read, error):
    with pytest.raises(error, match=r"^doc\.json: \(top level\): expected an object"):
        read([1])


def test_the_json_ir_names_the_missing_key():
    from codegen.formats.json_ir import read_ir_json

    with pytest.raises(
        IRFormatError, match=r"ir\.json: \(top level\): expected an object with keys .* \(missing name\)"
    ):
        read_ir_json(json.dumps({"format": "xccl-ir/1"}), "ir.json")


# -- sketches: sizes as everywhere else, GPU indices in ASCII -------------------------------------
def _sketch(**fields) -> dict:
    return {"format": "xccl-sketch/1", "name": "s", **fields}


@pytest.mark.parametrize(
    ("size", "nbytes"), [("1TiB", 1 << 40), ("1.5KiB", 1536), ("4 mib", 4 << 20), (4096, 4096)]
)
def test_a_sketch_target_size_is_read_as_every_other_size(size, nbytes):
    """Before: the sketch had a size parser of its own that refused 1TiB and 1.5KiB."""
    assert sketch_from_dict(_sketch(target_size=size)).target_size_bytes == nbytes


@pytest.mark.parametrize("size", [10**23, "0KiB", "1.2B", True])
def test_a_sketch_target_size_no_runtime_can_hold_is_refused(size):
    """Before: 10**23 bytes was accepted (the runtimes hold sizes in int64)."""
    with pytest.raises(SketchError, match="target_size: expected a size in bytes"):
        sketch_from_dict(_sketch(target_size=size))


def test_a_gpu_key_in_other_digits_is_one_line(tmp_path, xccl):
    """Before: ``"²"`` passed ``str.isdigit`` and ``int()`` raised a ValueError (a traceback)."""
    path = tmp_path / "s.json"
    for key in ("²", "١"):
        path.write_text(json.dumps(_sketch(internode={"strategy": "relay", "connections": {key: [1]}})))
        assert_one_line_error(
            xccl("sketch", "check", str(path), "-t", "ndv2x2"),
            f"internode.connections.{key}",
            "a machine-local GPU index as key",
        )
