"""torch's own collective for the call an IR implements: the real peer, measured on the same process
group in the same run (``xccl bench --backend torch``).

Each collective maps to the torch.distributed call that computes it with the same buffer layout
(nccl-tests'): ``allgather`` -> ``all_gather_single`` (``all_gather_into_tensor`` before torch 2.13),
``reducescatter`` -> ``reduce_scatter_single`` (``reduce_scatter_tensor``), ``allreduce`` ->
``all_reduce``, ``alltoall`` -> ``all_to_all_single``, ``broadcast``, ``reduce``, ``gather`` and
``scatter`` with the IR's root. The peer runs out of place on buffers of its own (``all_reduce``,
``broadcast`` and ``reduce`` work in place in torch: the input is copied into the output before
each run, untimed), so its output is checked against the same NumPy reference as ours.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from runtime.torch.ops import storage_dtype, torch_dtype
from synth.collectives import Collective

__all__ = ["Peer", "peer_function", "peer_refusal"]

_REDUCE_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX"}
_NAMES = {
    "allgather": ("all_gather_single", "all_gather_into_tensor"),
    "reducescatter": ("reduce_scatter_single", "reduce_scatter_tensor"),
    "allreduce": ("all_reduce",),
    "alltoall": ("all_to_all_single",),
    "broadcast": ("broadcast",),
    "reduce": ("reduce",),
    "gather": ("gather",),
    "scatter": ("scatter",),
}
_IN_PLACE = frozenset({"allreduce", "broadcast", "reduce"})


def peer_function(collective: str) -> str | None:
    """The name of torch.distributed's call for ``collective`` in this torch (None for ``custom``)."""
    for name in _NAMES.get(collective, ()):
        if hasattr(dist, name):
            return name
    return None


def peer_refusal(collective: Collective | None, dtype: np.dtype, op: str) -> str | None:
    """Why torch's own collective cannot run this call (None when it can)."""
    if collective is None or peer_function(collective.name) is None:
        return "torch.distributed has no call for a custom collective"
    if storage_dtype(dtype) != np.dtype(dtype) and collective.combining and op in ("min", "max"):
        return f"torch.distributed has no {np.dtype(dtype).name} {op}"
    return None


class Peer:
    """torch's collective for rank ``rank``'s part of ``collective``, chunks of ``chunk_elems``
    elements, on ``group`` (None: the default group) and ``device``."""

    def __init__(
        self,
        collective: Collective,
        rank: int,
        chunk_elems: int,
        dtype: np.dtype,
        op: str,
        group: object | None,
        device: torch.device,
    ) -> None:
        self.coll, self.rank, self.group = collective, rank, group
        kind = torch_dtype(dtype)
        self.storage = storage_dtype(dtype)
        self.input = torch.empty(collective.input_chunks * chunk_elems, dtype=kind, device=device)
        self.output = torch.empty(collective.output_chunks * chunk_elems, dtype=kind, device=device)
        self.reduce_op = getattr(dist.ReduceOp, _REDUCE_OPS[op])
        self.name = peer_function(collective.name)
        self._call = self._bind()

    def reset(self, data: np.ndarray) -> None:
        """This rank's input, and the output filled as torch's in-place calls need it."""
        self.input.copy_(torch.from_numpy(np.ascontiguousarray(data).reshape(-1).view(self.storage)))
        if self.coll.name in _IN_PLACE:
            self.output.copy_(self.input[: self.output.numel()])

    def run(self) -> None:
        self._call()

    def output_numpy(self, dtype: np.dtype) -> np.ndarray:
        return self.output.cpu().numpy().view(dtype).copy()

    def _bind(self) -> Callable[[], object]:
        name, g, coll = self.name, self.group, self.coll
        func = getattr(dist, name)
        root = coll.root
        n = coll.num_ranks
        if coll.name in ("allgather", "alltoall"):
            return lambda: func(self.output, self.input, group=g)
        if coll.name == "reducescatter":
            return lambda: func(self.output, self.input, op=self.reduce_op, group=g)
        if coll.name == "allreduce":
            return lambda: func(self.output, op=self.reduce_op, group=g)
        if coll.name == "broadcast":
            return lambda: func(self.output, group=g, group_src=root)
        if coll.name == "reduce":
            return lambda: func(self.output, group=g, group_dst=root, op=self.reduce_op)
        if coll.name == "gather":
            parts = list(self.output.chunk(n)) if self.rank == root else None
            return lambda: func(self.input, parts, group=g, group_dst=root)
        parts = list(self.input.chunk(n)) if self.rank == root else None
        return lambda: func(self.output, parts, group=g, group_src=root)
