"""The ``torch`` backend: the IR run by one process per rank through torch.distributed point to
point, timed by each rank's clock (the slowest rank's time is the call's), every rank's output
checked against the NumPy reference, and torch's own collective measured beside it on the same
process group.

On one machine the backend spawns the ranks itself (``runtime.torch.pool.Pool``: Gloo, or NCCL with
a GPU per rank); under ``torchrun`` (the launcher's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` are set) this process is one rank of the launched job and joins its group
(``runtime.torch.joined.Joined``). Light to import, as the registry must be: torch is imported by
the processes that run ranks.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from codegen.ir import Buffer
from runtime.backends import Backend, BenchCase, BenchError, Trial, register_backend
from runtime.torch.errors import FAULT_ENV, Fault, parse_fault
from runtime.torch.launch import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from codegen.ir import IR
    from topologies.model import Topology

__all__ = ["TorchBackend", "TorchRunResult", "TorchTrial"]

MAX_TIMEOUT_S = 86400.0
"""A day: longer timeouts are surely a mistake (and overflow torch's)."""
PROCESS_BYTES = 400 << 20
"""About the host memory of one rank's process before any buffer (torch and the project)."""


@dataclass(frozen=True)
class TorchRunResult:
    """One checked execution on the torch backend (``xccl.run(..., backend="torch")``)."""

    ir_name: str
    collective: str
    num_ranks: int
    size_bytes: int
    dtype: str
    op: str
    inplace: bool
    dist: str
    levels: int
    time_us: float
    checked: bool

    def to_json(self) -> dict:
        return asdict(self)


class TorchTrial(Trial):
    """One call prepared on every rank; ``jobs`` names the jobs (ours, or the peer's)."""

    def __init__(
        self, group: Any, peer_note: str | None, jobs: tuple[str, str, str] = ("reset", "run", "check")
    ):
        self.group, self.peer_note, self.jobs = group, peer_note, jobs

    def reset(self) -> None:
        self.group.call(self.jobs[0])

    def run(self) -> float:
        return max(self.group.call(self.jobs[1]))

    def check(self) -> bool:
        return all(self.group.call(self.jobs[2]))

    def peer(self) -> Trial | None:
        if self.peer_note is not None:
            return None
        return TorchTrial(self.group, "a peer has no peer", ("peer_reset", "peer_run", "peer_check"))


@register_backend
class TorchBackend(Backend):
    name = "torch"
    description = (
        "torch.distributed point to point, one process per rank (Gloo on CPU, NCCL on GPUs), "
        "beside torch's own collective"
    )
    timing = "wall"
    checks = True
    host_memory = True
    processes = True
    peer_label = "torch"

    def __init__(
        self,
        ranks: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        dist: str = "auto",
        seed: int = 0,
        max_memory: int | str | None = None,
        fault: Fault | str | None = None,
    ) -> None:
        if not (isinstance(timeout_s, int | float) and 0 < timeout_s < MAX_TIMEOUT_S):
            raise BenchError(f"timeout {timeout_s!r}: expected seconds above 0 and below {MAX_TIMEOUT_S:g}")
        self.ranks, self.timeout_s, self.dist = ranks, float(timeout_s), dist
        self.seed, self.max_memory = seed, max_memory
        if fault is None and os.environ.get(FAULT_ENV):
            fault = os.environ[FAULT_ENV]
        self.fault = parse_fault(fault) if isinstance(fault, str) else fault
        self._group: Any = None
        self._world = self.levels = 0
        self._peer: str | None = None

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("torch") is not None

    @classmethod
    def reporting(cls) -> bool:
        from runtime.torch.launch import in_launched_job

        return not in_launched_job() or os.environ.get("RANK") == "0"

    def device(self, topology: Topology | None) -> str:
        version = importlib.metadata.version("torch")
        dist = getattr(self._group, "dist", self.dist)
        if self._launched():
            where = "a launched job (torchrun)"
        elif dist == "nccl":
            where = _gpu_names()
        else:
            where = f"{os.cpu_count()} CPU cores ({platform.machine()})"
        ranks = self._world or self.ranks or "?"
        return f"torch {version}, {dist}, {ranks} process{'' if ranks == 1 else 'es'} on {where}"

    def peer_description(self) -> str | None:
        if self._peer is None:
            return None
        dist = getattr(self._group, "dist", self.dist)
        return f"torch.distributed.{self._peer} on the same {dist} process group (its own buffers)"

    # -- the group of ranks -------------------------------------------------------------------------
    def _launched(self) -> bool:
        from runtime.torch.launch import in_launched_job

        return in_launched_job()

    def group(self, ir: IR) -> Any:
        """The ranks for ``ir``: spawned here, or this process's launched job."""
        world = ir.num_ranks
        if self.ranks is not None and self.ranks != world:
            raise BenchError(f"--ranks {self.ranks}: {ir.name} has {world} ranks; one process runs each")
        if self._group is not None and self._world == world:
            return self._group
        self.close()
        if self._launched():
            from runtime.torch.joined import Joined

            launched = int(os.environ["WORLD_SIZE"])
            if launched != world:
                raise BenchError(
                    f"{ir.name} has {world} ranks, and the launched job has WORLD_SIZE {launched}"
                )
            self._group = Joined(self.dist, self.timeout_s)
        else:
            from runtime.torch.launch import resolve_dist
            from runtime.torch.pool import Pool

            self._group = Pool(world, dist=resolve_dist(self.dist, world), timeout_s=self.timeout_s)
        self._world = world
        return self._group

    def close(self) -> None:
        if self._group is not None:
            self._group.close()
        self._group, self._world = None, 0

    # -- trials ---------------------------------------------------------------------------------------
    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None, peer: bool = True) -> Trial:
        from runtime.torch.jobs import Call

        self._check_memory(ir, case)
        if self.fault is not None and self.fault.rank >= ir.num_ranks:
            raise BenchError(
                f"{FAULT_ENV}: rank {self.fault.rank}: {ir.name} has ranks 0 to {ir.num_ranks - 1}"
            )
        group = self.group(ir)
        call = Call(
            ir, case.size_bytes, case.dtype, case.op, case.inplace, case.declared, self.seed, peer, self.fault
        )
        prepared = group.call("prepare", call=call)[0]
        group.prepared(ir.name, prepared.levels)
        self.levels, self._peer = prepared.levels, prepared.peer
        return TorchTrial(group, prepared.peer_refused)

    def run_once(self, ir: IR, case: BenchCase) -> TorchRunResult:
        from runtime.reference import parse_dtype

        try:
            trial = self.prepare(ir, case, None, peer=False)
            trial.reset()
            time_us = trial.run()
            checked = trial.check()
        finally:
            self.close()
        return TorchRunResult(
            ir.name,
            ir.collective,
            ir.num_ranks,
            case.size_bytes,
            parse_dtype(case.dtype).name,
            case.op,
            case.inplace,
            self.dist,
            self.levels,
            time_us,
            checked,
        )

    def _check_memory(self, ir: IR, case: BenchCase) -> None:
        """Refuse, before any process starts, a call whose ranks would need more host memory than
        the limit (every rank's buffers, the inputs and reference each rank computes, torch's own
        collective's buffers, and the processes themselves)."""
        if self._launched():
            return
        from runtime.limits import check_memory, memory_limit
        from runtime.program import build_program, chunk_elems
        from runtime.reference import parse_dtype

        dtype = parse_dtype(case.dtype)
        program = build_program(ir, case.declared)
        elems = chunk_elems(ir, case.size_bytes, dtype)
        n = ir.num_ranks
        total = 0
        for chunks in program.chunks:
            inp, out, scratch = chunks[Buffer.INPUT], chunks[Buffer.OUTPUT], chunks[Buffer.SCRATCH]
            wide = 8 if dtype.kind == "f" else dtype.itemsize
            per_rank = (3 * (inp + out) + scratch + n * inp) * dtype.itemsize + n * inp * wide
            total += per_rank * elems + PROCESS_BYTES
        check_memory(
            f"{ir.name}: {n} torch ranks at {case.size_bytes} B", total, memory_limit(self.max_memory)
        )


def _gpu_names() -> str:
    """What NCCL runs on here: the GPUs' names and count (a process has one each)."""
    import torch

    names = sorted({torch.cuda.get_device_name(d) for d in range(torch.cuda.device_count())})
    return f"{torch.cuda.device_count()} GPU(s): {', '.join(names)}"
