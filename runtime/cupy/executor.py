"""Run an IR on NVIDIA GPUs through CuPy: placement, buffers, FIFOs, one kernel launch per device.

Placement: with as many devices as ranks, rank r runs on device r, and peer access is enabled
between every pair of devices whose ranks exchange data (an error if it is impossible); with fewer
devices, consecutive ranks share a device, their buffers side by side in its memory, and the
kernel is the same. All blocks of a launch spin on each other, so they must be co-resident: the
occupancy is checked before launching and an IR needing more blocks is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from codegen.ir import IR
from common.errors import XcclError
from runtime import protocol
from runtime.cupy.pack import Packed, pack, plan_buffers
from runtime.errors import ExecutionError
from runtime.executor import Executor
from runtime.numpy.memory import garbage
from runtime.program import call_aliases
from synth.collectives import Collective

__all__ = [
    "DTYPES",
    "ERROR_CODES",
    "OPS",
    "THREADS",
    "CupyExecutor",
    "GpuExecutionError",
    "GpuUnavailable",
    "RankBound",
    "kernel_source",
    "rank_bound",
    "resident_blocks",
    "supported",
    "threadblock_bound",
]

THREADS = 512
DTYPES = {
    "float16": "__half",
    "float32": "float",
    "float64": "double",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
}
OPS = {"sum": "Sum", "prod": "Prod", "min": "Min", "max": "Max"}
ERROR_CODES = {
    1: "timed out waiting for a dependency",
    2: "timed out waiting for data on its connection",
    3: "timed out waiting for room in the peer's receive FIFO",
    4: "met an op type it does not know",
}


class GpuUnavailable(XcclError):
    """CuPy or a CUDA GPU is missing, or the GPUs cannot reach each other."""


class GpuExecutionError(ExecutionError):
    """The kernel reported an error (a wait timed out: a broken IR, not a hung GPU)."""


def kernel_source() -> str:
    return (resources.files("runtime") / "cupy" / "xccl_kernel.cu").read_text()


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise GpuUnavailable("the cupy backend needs CuPy: pip install 'xccl-synth[gpu]'") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise GpuUnavailable(f"no usable CUDA GPU: {exc}") from None
    if count == 0:
        raise GpuUnavailable("no CUDA GPU is visible")
    return cupy


_MODULES: dict[tuple[str, str], Any] = {}


def _kernel(cupy: Any, dtype: str, op: str) -> Any:
    key = (dtype, op)
    if key not in _MODULES:
        name = f"xccl_interpret<{DTYPES[dtype]}, {OPS[op]}>"
        module = cupy.RawModule(code=kernel_source(), options=("-std=c++17",), name_expressions=[name])
        _MODULES[key] = module.get_function(name)
    return _MODULES[key]


@dataclass(frozen=True)
class Placement:
    devices: tuple[int, ...]
    """``devices[rank]``: the CUDA device that runs the rank."""

    def ranks_of(self, device: int) -> range:
        ranks = [r for r, d in enumerate(self.devices) if d == device]
        return range(ranks[0], ranks[-1] + 1)


def place(num_ranks: int, devices: list[int]) -> Placement:
    if len(devices) >= num_ranks:
        return Placement(tuple(devices[:num_ranks]))
    per = math.ceil(num_ranks / len(devices))
    return Placement(tuple(devices[r // per] for r in range(num_ranks)))


def resident_blocks(attrs: Mapping[str, int], regs: int) -> tuple[int, int]:
    """The kernel's blocks (``THREADS`` threads of ``regs`` registers each) one SM holds at once,
    and the whole device, from its CUDA attributes (CuPy's ``Device.attributes``): every block of
    a launch spins on others, so a launch may hold no more."""
    per_sm = min(
        attrs["MaxThreadsPerMultiProcessor"] // THREADS,
        attrs["MaxRegistersPerMultiprocessor"] // max(1, regs * THREADS),
        attrs.get("MaxBlocksPerMultiprocessor", 32),
    )
    return per_sm, per_sm * attrs["MultiProcessorCount"]


@dataclass(frozen=True)
class RankBound:
    """The threadblocks each rank may have so that every device holds its ranks' blocks at once:
    those of the device that leaves a rank fewest (its resident blocks over the ranks placed on it)."""

    threadblocks: int
    device: int
    ranks: int
    capacity: int
    per_sm: int

    def describe(self) -> str:
        """Why, for people."""
        return (
            f"device {self.device} runs {self.ranks} rank(s) and holds {self.capacity} threadblocks "
            f"at once ({self.per_sm} per SM)"
        )


def rank_bound(placement: Placement, attrs_of: Callable[[int], Mapping[str, int]], regs: int) -> RankBound:
    """The :class:`RankBound` of ``placement``, each device's attributes ``attrs_of(device)``, for
    a kernel of ``regs`` registers per thread (:func:`resident_blocks`, as the executor checks)."""
    bounds = []
    for device in sorted(set(placement.devices)):
        per_sm, capacity = resident_blocks(attrs_of(device), regs)
        ranks = len(placement.ranks_of(device))
        bounds.append(RankBound(capacity // ranks, device, ranks, capacity, per_sm))
    return min(bounds, key=lambda b: b.threadblocks)


def threadblock_bound(num_ranks: int, dtype: str, op: str, devices: list[int] | None = None) -> RankBound:
    """The :class:`RankBound` of an IR of ``num_ranks`` ranks run with ``dtype`` and ``op`` on
    ``devices`` (default: every visible GPU), known before the IR exists: what a compile for this
    executor must keep within (the kernel is compiled for its register count)."""
    cp = _cupy()
    supported(dtype)
    all_devices = devices if devices is not None else list(range(cp.cuda.runtime.getDeviceCount()))
    regs = int(_kernel(cp, dtype, op).num_regs)
    return rank_bound(place(num_ranks, all_devices), lambda d: cp.cuda.Device(d).attributes, regs)


def supported(dtype: str) -> None:
    """Raise :class:`ExecutionError` unless the kernel is built for ``dtype`` (a NumPy name)."""
    if dtype not in DTYPES:
        raise ExecutionError(f"dtype {dtype}: the GPU kernel supports {', '.join(DTYPES)}")


class CupyExecutor(Executor):
    """Buffers, FIFOs and flags for one IR at one size; ``launch`` runs the collective once."""

    def __init__(
        self,
        ir: IR,
        size_bytes: int,
        dtype: str | np.dtype = "float32",
        op: str = "sum",
        *,
        inplace: bool = False,
        devices: list[int] | None = None,
        tile_bytes: int | None = None,
        timeout_s: float = 10.0,
        declared: Collective | None = None,
    ) -> None:
        # the same validation and buffer sizes as the NumPy executor (declared: a custom IR's result)
        super().__init__(ir, size_bytes, dtype, op, inplace, declared)
        proto = protocol.protocol(ir.protocol)
        tile = proto.tile_bytes if tile_bytes is None else tile_bytes
        self.tile_elems = max(1, tile // self.dtype.itemsize)
        # a FIFO of NCCL_STEPS slots; a call (at most one tile of data) fills steps_per_call of them,
        # as in NCCL (Simple: 4 of 8), so both executors block on the same schedules
        self.nslots = protocol.NCCL_STEPS
        self.slot_elems = max(1, math.ceil(self.tile_elems / proto.steps_per_call))
        self.aliases = call_aliases(self.program, inplace)
        self.timeout_ns = int(timeout_s * 1e9)
        cp = self._cp = _cupy()
        self.packed: Packed = pack(ir)
        all_devices = devices if devices is not None else list(range(cp.cuda.runtime.getDeviceCount()))
        self.placement = place(ir.num_ranks, all_devices)
        self._kernel = _kernel(cp, self.dtype.name, self.op)
        self._enable_peers()
        self._check_occupancy()
        self.epoch = 0
        self._allocate()

    def check_dtype(self) -> None:
        supported(self.dtype.name)

    # -- setup -----------------------------------------------------------------------------
    def _enable_peers(self) -> None:
        cp = self._cp
        pairs = {
            (self.placement.devices[c.sender], self.placement.devices[c.receiver])
            for c in self.packed.connections
        }
        for a, b in sorted(pairs):
            if a == b:
                continue
            for x, y in ((a, b), (b, a)):
                if not cp.cuda.runtime.deviceCanAccessPeer(x, y):
                    raise GpuUnavailable(
                        f"GPU {x} cannot access GPU {y} directly (no peer access); run with fewer devices"
                    )
                with cp.cuda.Device(x):
                    try:
                        cp.cuda.runtime.deviceEnablePeerAccess(y)
                    except cp.cuda.runtime.CUDARuntimeError as exc:
                        if "AlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                            raise GpuUnavailable(f"enabling peer access {x} -> {y}: {exc}") from None

    def _check_occupancy(self) -> None:
        regs = int(self._kernel.num_regs)
        for device in sorted(set(self.placement.devices)):
            lo, hi = self.packed.block_range(self.placement.ranks_of(device))
            per_sm, capacity = resident_blocks(self._cp.cuda.Device(device).attributes, regs)
            if hi - lo > capacity:
                raise GpuExecutionError(
                    f"{self.ir.name}: device {device} would run {hi - lo} threadblocks, but only {capacity} can be "
                    f"resident at once ({per_sm} per SM); they wait on each other, so this IR cannot run here"
                )

    def _allocate(self) -> None:
        cp, ir = self._cp, self.ir

        def zeros(rank: int, n: int):
            with cp.cuda.Device(self.placement.devices[rank]):
                return cp.zeros(n, self.dtype)

        self.inputs, self.outputs_device, self.scratch = plan_buffers(
            self.program, self.chunk_elems, self.aliases, zeros
        )
        pointers = np.array(
            [
                [b.data.ptr for b in (self.inputs[r], self.outputs_device[r], self.scratch[r])]
                for r in range(ir.num_ranks)
            ],
            dtype=np.uint64,
        ).reshape(-1)
        slots = self.nslots * self.slot_elems
        conn_rows = []
        self._keep = []  # FIFOs and counters stay alive with the executor
        for c in self.packed.connections:
            rdev, sdev = self.placement.devices[c.receiver], self.placement.devices[c.sender]
            with cp.cuda.Device(rdev):
                fifo = cp.zeros(slots, dtype=self.dtype)
                head = cp.zeros(1, dtype=cp.uint64)
            with cp.cuda.Device(sdev):
                tail = cp.zeros(1, dtype=cp.uint64)
            self._keep += [fifo, head, tail]
            conn_rows.append([fifo.data.ptr, head.data.ptr, tail.data.ptr])
        self._launch_args = []
        for device in sorted(set(self.placement.devices)):
            lo, _ = self.packed.block_range(self.placement.ranks_of(device))
            with cp.cuda.Device(device):
                tables = {
                    "blocks": cp.asarray(self.packed.blocks),
                    "steps": cp.asarray(
                        self.packed.steps if self.packed.steps.size else np.zeros((1, 10), np.int32)
                    ),
                    "deps": cp.asarray(
                        self.packed.deps if self.packed.deps.size else np.zeros((1, 2), np.int32)
                    ),
                    "conns": cp.asarray(np.array(conn_rows or [[0, 0, 0]], dtype=np.uint64)),
                    "buffers": cp.asarray(pointers),
                    "flags": cp.zeros(self.packed.num_blocks, dtype=cp.uint64),
                    "error": cp.zeros(4, dtype=cp.int32),
                }
            self._launch_args.append((device, lo, tables))

    # -- running ---------------------------------------------------------------------------
    def load(self, arrays: list[np.ndarray]) -> None:
        """One input array per rank (the same arrays the NumPy executor takes). As in the NumPy
        executor, everything else first holds :func:`garbage`, so outputs a schedule leaves unwritten
        (a rooted collective's non-roots) compare bit for bit and a read of unwritten memory shows."""
        for r, arr in enumerate(arrays):
            if np.size(arr) != self.input_elems(r):
                raise ExecutionError(
                    f"{self.ir.name}: input of rank {r}: expected {self.input_elems(r)} elements"
                )
            with self._cp.cuda.Device(self.placement.devices[r]):
                self.outputs_device[r].fill(garbage(self.dtype))
                self.scratch[r].fill(garbage(self.dtype))
                self.inputs[r][...] = self._cp.asarray(np.asarray(arr).reshape(-1), dtype=self.dtype)

    def launch(self) -> None:
        """Start the kernels on every device (asynchronously)."""
        cp = self._cp
        self.epoch += 1
        for device, lo, t in self._launch_args:
            hi = self.packed.block_range(self.placement.ranks_of(device))[1]
            with cp.cuda.Device(device):
                self._kernel(
                    (hi - lo,),
                    (THREADS,),
                    (
                        t["blocks"],
                        t["steps"],
                        t["deps"],
                        t["conns"],
                        t["buffers"],
                        t["flags"],
                        t["error"],
                        np.int64(self.chunk_elems),
                        np.int64(self.tile_elems),
                        np.int64(self.slot_elems),
                        np.int32(self.nslots),
                        np.int32(lo),
                        np.uint64(self.epoch),
                        np.uint64(self.timeout_ns),
                    ),
                )

    def synchronize(self) -> None:
        """Wait for every device and raise :class:`GpuExecutionError` if a block reported one."""
        cp = self._cp
        for device, _, t in self._launch_args:
            with cp.cuda.Device(device):
                cp.cuda.Device(device).synchronize()
                code, block, step, tile = (int(x) for x in t["error"].get())
            if code:
                rank, tb = int(self.packed.blocks[block, 0]), int(self.packed.blocks[block, 1])
                what = ERROR_CODES.get(code, f"failed with code {code}")
                raise GpuExecutionError(
                    f"{self.ir.name}: rank {rank} threadblock {tb} step {step} (tile {tile}) {what}"
                )

    def run(self) -> None:
        self.launch()
        self.synchronize()

    def outputs(self) -> list[np.ndarray]:
        """Every rank's output buffer, copied to the host."""
        return [o.get() for o in self.outputs_device]

    def time_us(self, repeats: int = 5, warmup: int = 1) -> list[float]:
        """Per-launch times from CUDA events on the first device (all devices synchronised)."""
        cp = self._cp
        for _ in range(warmup):
            self.run()
        times = []
        first = self._launch_args[0][0]
        for _ in range(repeats):
            with cp.cuda.Device(first):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
            self.launch()
            for device, _, _ in self._launch_args[1:]:
                cp.cuda.Device(device).synchronize()
            with cp.cuda.Device(first):
                end.record()
                end.synchronize()
            self.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        return times

    def copy_ceiling_us(self, nbytes: int, repeats: int = 5) -> float:
        """Median time of a plain device-to-device copy of ``nbytes`` on the first device."""
        cp = self._cp
        device = self._launch_args[0][0]
        with cp.cuda.Device(device):
            src = cp.ones(max(1, nbytes // 4), dtype=cp.float32)
            dst = cp.empty_like(src)
            dst[...] = src
            times = []
            for _ in range(repeats):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                cp.copyto(dst, src)
                end.record()
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        return float(np.median(times))
