"""A user's torch program that calls a compiled IR through ``runtime.torch.collective`` (run by
tests/test_torch_backend.py under torchrun, one process per rank).

``python -m torch.distributed.run --standalone --nproc-per-node N tests/torch_user_program.py IR OUT
[WRONG_RANK]``: every rank gathers (or reduces, per the IR's collective) its tensor with the IR and
with torch's own call and writes ``OUT/rank<R>.txt``: ``ok`` when both agree, else what differed;
with ``WRONG_RANK`` that rank passes an input one element short, and every rank writes what it
raised and whether its tensors were left as they were.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from codegen.formats import load_ir
from runtime.torch.collective import torch_collective

TORCH_CALL = {
    "allgather": lambda out, inp: getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, inp),
    "reducescatter": lambda out, inp: getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(
        out, inp
    ),
    "allreduce": lambda out, inp: (out.copy_(inp), dist.all_reduce(out)),
    "alltoall": lambda out, inp: dist.all_to_all_single(out, inp),
}


def main(ir_path: str, out_dir: str, wrong: int | None) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ir = load_ir(ir_path)
    fn = torch_collective(ir, timeout_s=3)
    elems = 6 * fn.input_chunks
    inp = torch.arange(elems, dtype=torch.float32) * (rank + 1)
    out = torch.full((elems * fn.output_chunks // fn.input_chunks,), -1.0)
    report = Path(out_dir) / f"rank{rank}.txt"
    if wrong is not None:
        if rank == wrong:
            inp = inp[:-1].clone()
        before = (inp.clone(), out.clone())
        try:
            fn(out, inp)
            said = "no error"
        except Exception as exc:
            said = f"{type(exc).__name__}: {exc}"
        kept = torch.equal(before[0], inp) and torch.equal(before[1], out)
        report.write_text(f"{said}\nuntouched: {kept}\n")
        return
    fn(out, inp)
    theirs = torch.empty_like(out)
    TORCH_CALL[ir.collective](theirs, inp.clone())
    report.write_text("ok\n" if torch.allclose(out, theirs) else f"differs: {out} vs {theirs}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
