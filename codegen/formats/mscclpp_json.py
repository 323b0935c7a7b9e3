"""Print an IR as an MSCCL++ execution plan (JSON), the format of mscclpp v0.8.0 that v0.9.0 and
v0.10.0 read unchanged (:data:`codegen.rules.DIALECTS` ``["mscclpp"]``).

The IR is checked for the MSCCL++ executor first (:func:`codegen.check.check_ir`: its collectives,
the Simple protocol, its threadblock count), then lowered (:mod:`codegen.formats.mscclpp_plan`) and
printed: one op per line, keys in a fixed order, so the same IR always gives the same bytes. The
plan's ``name`` is the IR's, ``-inplace`` for an in-place plan, and 8 hex digits of the SHA-256 of
the rest of the plan: the executor caches a plan's resources by name, so two different plans (two
size windows of one schedule, say) must not share one. An ``xccl`` key, which the executor does
not read, states the format version and the root of a rooted collective. Reductions are sums: the
executor performs no other (:func:`codegen.rules.reduction_problems`).
"""

from __future__ import annotations

import hashlib
import json

from codegen.check import check_ir
from codegen.formats.mscclpp_plan import build_plan, plan_mode
from codegen.ir import IR
from codegen.rules import Dialect, get_dialect

__all__ = ["is_plan", "not_read_back", "write_mscclpp"]


def write_mscclpp(ir: IR, dialect: str | Dialect = "mscclpp") -> str:
    """The plan text of ``ir``; an IR the executor cannot run raises
    :class:`~codegen.errors.IRCheckError` or :class:`~codegen.errors.CodegenError` naming why."""
    d = get_dialect(dialect)
    check_ir(ir, d)
    mode = plan_mode(ir)
    plan = build_plan(ir, d, mode, "")
    digest = hashlib.sha256(_text(plan).encode()).hexdigest()[:8]
    plan["name"] = f"{ir.name}{'-inplace' if mode.inplace else ''}-{digest}"
    return _text(plan)


def _text(plan: dict) -> str:
    lines = ["{"]
    lines += [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in plan.items() if k != "gpus"]
    lines.append('  "gpus": [')
    for g, gpu in enumerate(plan["gpus"]):
        head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in gpu.items() if k != "threadblocks")
        lines.append(f'    {{{head}, "threadblocks": [')
        for t, tb in enumerate(gpu["threadblocks"]):
            top = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in tb.items() if k != "ops")
            lines.append(f'      {{{top}, "ops": [')
            ops = tb["ops"]
            lines.extend(
                f"        {json.dumps(op)}{',' if k < len(ops) - 1 else ''}" for k, op in enumerate(ops)
            )
            lines.append("      ]}" + ("," if t < len(gpu["threadblocks"]) - 1 else ""))
        lines.append("    ]}" + ("," if g < len(plan["gpus"]) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def is_plan(doc: object) -> bool:
    """Whether a parsed JSON document is an MSCCL++ execution plan (ours or anyone's)."""
    if not isinstance(doc, dict) or "format" in doc:
        return False
    gpus = doc.get("gpus")
    first = gpus[0] if isinstance(gpus, list) and gpus else None
    return isinstance(first, dict) and ("remote_buffers" in first or ("input_chunks" in first and "id" in first))


def not_read_back(where: str) -> str:
    """The message for an MSCCL++ plan given where xccl reads an algorithm, a program or an IR."""
    return (
        f"{where}: an MSCCL++ execution plan: xccl writes plans but does not read them back "
        "(compile the algorithm, program or IR it came from)"
    )
