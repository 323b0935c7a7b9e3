"""A compiled IR as a collective a torch program calls: ``fn(output, input)`` on every rank of a
process group, like ``torch.distributed.all_gather_into_tensor(output, input, group=...)``.

:func:`torch_collective` builds the callable once per IR and group; each call runs the IR's level
schedule (``runtime.torch.rank``) through torch.distributed point to point on the group, whichever
backend it has (Gloo for CPU tensors, NCCL for CUDA ones). The rounds run on buffers of the
callable's own (one set per tensor size and element type, kept for later calls): the input is
copied in first, and the output tensor is written only once every round has finished, so a call
that fails (a rank with a tensor of the wrong size, a peer that died or timed out) leaves the
caller's tensors as they were. Every rank must call it with tensors of the same size; a rank whose
tensors do not fit the IR raises at once, naming itself, and its peers raise a ``PeerFailure``
naming the level and the peer they waited for after ``timeout_s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from codegen.ir import Buffer
from runtime.errors import ExecutionError
from runtime.program import build_program
from runtime.torch.launch import DEFAULT_TIMEOUT_S
from runtime.torch.rank import RankExecutor
from runtime.torch.schedule import build_schedule

if TYPE_CHECKING:
    from codegen.ir import IR

__all__ = ["TorchCollective", "torch_collective"]

_OPS = {"SUM": "sum", "PRODUCT": "prod", "MIN": "min", "MAX": "max"}


def _op_name(op: Any) -> str:
    """``sum``/``prod``/``min``/``max`` from a name or a ``torch.distributed.ReduceOp``."""
    if isinstance(op, str):
        if op not in _OPS.values():
            raise ExecutionError(f"reduction {op!r}: expected one of {', '.join(_OPS.values())}")
        return op
    for name, ours in _OPS.items():
        if op == getattr(dist.ReduceOp, name):
            return ours
    raise ExecutionError(f"reduction {op!r}: expected ReduceOp SUM, PRODUCT, MIN or MAX")


class TorchCollective:
    """The collective of ``ir`` on ``group`` (None: the default group), whose size must be the IR's
    ranks; ``op`` the reduction (a name or a ``ReduceOp``); ``timeout_s`` how long a rank waits for
    one round's transfers before it raises."""

    def __init__(
        self, ir: IR, group: Any = None, *, op: Any = "sum", timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        if not dist.is_initialized():
            raise ExecutionError(
                f"{ir.name}: torch.distributed is not initialised (call init_process_group first)"
            )
        world = dist.get_world_size(group)
        if world != ir.num_ranks:
            raise ExecutionError(f"{ir.name}: {ir.num_ranks} ranks, and the process group has {world}")
        self.ir, self.group, self.op, self.timeout_s = ir, group, _op_name(op), timeout_s
        self.rank = dist.get_rank(group)
        self.program = build_program(ir)
        self.schedule = build_schedule(self.program)
        self.inplace = not ir.outofplace
        self._executors: dict[tuple[int, torch.dtype, torch.device], RankExecutor] = {}

    @property
    def input_chunks(self) -> int:
        return self.program.chunks[self.rank][Buffer.INPUT]

    @property
    def output_chunks(self) -> int:
        return self.program.chunks[self.rank][Buffer.OUTPUT]

    def __call__(self, output: torch.Tensor, input: torch.Tensor | None = None) -> torch.Tensor:
        """Run the collective: ``input`` (this rank's part; None: ``output`` holds it, as for
        ``all_reduce(tensor)``) in, ``output`` written; returns ``output``."""
        source = output if input is None else input
        ex = self._executor(output, source)
        ex.load(source.detach().reshape(-1))
        ex.execute()
        output.copy_(ex.output().view(output.shape))
        return output

    def _executor(self, output: torch.Tensor, source: torch.Tensor) -> RankExecutor:
        """The executor for this call's tensors, after checking they fit the IR."""
        where = f"{self.ir.name}: rank {self.rank}"
        for name, t in (("output", output), ("input", source)):
            if not t.is_contiguous():
                raise ExecutionError(f"{where}: the {name} tensor is not contiguous")
        if source.dtype != output.dtype or source.device != output.device:
            raise ExecutionError(f"{where}: input and output differ in dtype or device")
        elems, chunks = source.numel(), self.input_chunks
        if elems == 0 or elems % chunks:
            raise ExecutionError(
                f"{where}: input of {elems} elements: expected a positive multiple of {chunks}"
            )
        chunk = elems // chunks
        if output.numel() != self.output_chunks * chunk:
            raise ExecutionError(
                f"{where}: output of {output.numel()} elements: expected {self.output_chunks * chunk} "
                f"({self.output_chunks} chunks of {chunk}, as the input of {elems} has {chunks})"
            )
        key = (chunk, source.dtype, source.device)
        if key not in self._executors:
            try:
                dtype = np.dtype(torch.empty(0, dtype=source.dtype).numpy().dtype)
            except TypeError:
                raise ExecutionError(f"{where}: {source.dtype} has no NumPy type to check against") from None
            size = chunk * self.ir.nchunksperloop * dtype.itemsize
            self._executors[key] = RankExecutor(
                self.ir,
                size,
                dtype,
                self.op,
                rank=self.rank,
                group=self.group,
                device=source.device,
                inplace=self.inplace,
                timeout_s=self.timeout_s,
                schedule=self.schedule,
            )
        return self._executors[key]


def torch_collective(
    ir: IR, group: Any = None, *, op: Any = "sum", timeout_s: float = DEFAULT_TIMEOUT_S
) -> TorchCollective:
    """The collective ``ir`` computes, as a callable ``fn(output, input)`` for this rank of
    ``group`` (see :class:`TorchCollective`); every rank of the group builds its own."""
    return TorchCollective(ir, group, op=op, timeout_s=timeout_s)
