"""Our JSON form of the IR: everything the IR holds, several dependencies per op included.

One op per line, keys in a fixed order: the same IR always gives the same bytes, and diffs read
well. ``read_ir_json(write_ir_json(ir)) == ir`` for every IR.
"""

from __future__ import annotations

import json
from typing import Any

from codegen.errors import IRFormatError
from codegen.formats.mscclpp_json import is_plan, not_read_back
from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock
from codegen.limits import CHUNKS, RANKS
from common.fields import Fields
from common.files import parse_json

__all__ = ["FORMAT", "read_ir_json", "write_ir_json"]

FORMAT = "xccl-ir/1"
_HEAD = (
    "name",
    "collective",
    "num_ranks",
    "nchunksperloop",
    "protocol",
    "inplace",
    "outofplace",
    "root",
    "min_bytes",
    "max_bytes",
)


def _ref(ref: Ref | None) -> list | None:
    return None if ref is None else [ref.buffer.value, ref.index]


def _op(op: Op) -> str:
    doc = {
        "type": op.type.value,
        "src": _ref(op.src),
        "dst": _ref(op.dst),
        "count": op.count,
        "deps": [[d.tb, d.op] for d in op.deps],
        "has_dep": op.has_dep,
    }
    return json.dumps(doc)


def write_ir_json(ir: IR) -> str:
    """Deterministic JSON text of ``ir``."""
    lines = ["{", f'  "format": {json.dumps(FORMAT)},']
    lines += [f"  {json.dumps(k)}: {json.dumps(getattr(ir, k))}," for k in _HEAD]
    lines.append('  "gpus": [')
    for g, gpu in enumerate(ir.gpus):
        head = {k: getattr(gpu, k) for k in ("rank", "input_chunks", "output_chunks", "scratch_chunks")}
        lines.append(f'    {json.dumps(head)[:-1]}, "threadblocks": [')
        for t, tb in enumerate(gpu.threadblocks):
            peers = {"id": tb.id, "send": tb.send, "recv": tb.recv, "channel": tb.channel}
            lines.append(f'      {json.dumps(peers)[:-1]}, "ops": [')
            lines.extend(
                f"        {_op(op)}{',' if k < len(tb.ops) - 1 else ''}" for k, op in enumerate(tb.ops)
            )
            lines.append("      ]}" + ("," if t < len(gpu.threadblocks) - 1 else ""))
        lines.append("    ]}" + ("," if g < len(ir.gpus) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


class _Reader(Fields):
    """The IR's own compound fields: chunk counts within the limit, buffer references, ops."""

    def chunks(self, value: Any, field: str, lo: int = 0) -> int:
        """A count of chunks, within xccl's limit (:data:`codegen.limits.CHUNKS`)."""
        count = self.integer(value, field, lo)
        CHUNKS.check(count, f"{self.where}: {field}", IRFormatError)
        return count

    def ref(self, value: Any, field: str) -> Ref | None:
        if value is None:
            return None
        if not (isinstance(value, list) and len(value) == 2 and value[0] in ("i", "o", "s")):
            raise self.fail(field, '["i"|"o"|"s", index] or null')
        return Ref(Buffer(value[0]), self.integer(value[1], f"{field}[1]"))

    def op(self, value: Any, field: str) -> Op:
        doc = self.record(value, field, ("type", "src", "dst", "count", "deps", "has_dep"))
        kind = OpType(self.choice(doc["type"], f"{field}.type", (t.value for t in OpType)))
        deps = doc["deps"]
        if not isinstance(deps, list) or not all(isinstance(d, list) and len(d) == 2 for d in deps):
            raise self.fail(f"{field}.deps", "a list of [threadblock, step]")
        return Op(
            kind,
            self.ref(doc["src"], f"{field}.src"),
            self.ref(doc["dst"], f"{field}.dst"),
            self.integer(doc["count"], f"{field}.count", 0),
            tuple(Dep(self.integer(t, f"{field}.deps"), self.integer(s, f"{field}.deps")) for t, s in deps),
            self.boolean(doc["has_dep"], f"{field}.has_dep"),
        )


def read_ir_json(text: str, where: str = "<ir>") -> IR:
    """Parse our JSON IR; malformed input raises :class:`IRFormatError` naming the field."""
    doc = parse_json(text, where, IRFormatError)
    if is_plan(doc):
        raise IRFormatError(not_read_back(where))
    r = _Reader(where, IRFormatError)
    doc = r.record(doc, "(top level)", ("format", *_HEAD, "gpus"))
    if doc["format"] != FORMAT:
        raise r.fail("format", f'"{FORMAT}"')
    if (
        not isinstance(doc["name"], str)
        or not isinstance(doc["collective"], str)
        or not isinstance(doc["protocol"], str)
    ):
        raise r.fail("name/collective/protocol", "strings")
    RANKS.check(r.integer(doc["num_ranks"], "num_ranks", 1), f"{where}: num_ranks", IRFormatError)
    gpus = []
    for g, gdoc in enumerate(r.array(doc["gpus"], "gpus")):
        gd = r.record(
            gdoc, f"gpus[{g}]", ("rank", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks")
        )
        tbs = []
        for t, tdoc in enumerate(r.array(gd["threadblocks"], f"gpus[{g}].threadblocks")):
            where = f"gpus[{g}].threadblocks[{t}]"
            td = r.record(tdoc, where, ("id", "send", "recv", "channel", "ops"))
            ops = r.array(td["ops"], f"{where}.ops")
            tbs.append(
                Threadblock(
                    r.integer(td["id"], f"{where}.id", 0),
                    r.integer(td["send"], f"{where}.send", 0, null=True),
                    r.integer(td["recv"], f"{where}.recv", 0, null=True),
                    r.integer(td["channel"], f"{where}.channel", 0),
                    tuple(r.op(o, f"{where}.ops[{k}]") for k, o in enumerate(ops)),
                )
            )
        gpus.append(
            Gpu(
                r.integer(gd["rank"], f"gpus[{g}].rank", 0),
                r.chunks(gd["input_chunks"], f"gpus[{g}].input_chunks"),
                r.chunks(gd["output_chunks"], f"gpus[{g}].output_chunks"),
                r.chunks(gd["scratch_chunks"], f"gpus[{g}].scratch_chunks"),
                tuple(tbs),
            )
        )
    return IR(
        name=doc["name"],
        collective=doc["collective"],
        num_ranks=r.integer(doc["num_ranks"], "num_ranks", 1),
        nchunksperloop=r.chunks(doc["nchunksperloop"], "nchunksperloop", 1),
        gpus=tuple(gpus),
        protocol=doc["protocol"],
        inplace=r.boolean(doc["inplace"], "inplace"),
        outofplace=r.boolean(doc["outofplace"], "outofplace"),
        root=r.integer(doc["root"], "root", 0, null=True),
        min_bytes=r.integer(doc["min_bytes"], "min_bytes", 0),
        max_bytes=r.integer(doc["max_bytes"], "max_bytes", 0),
    )
