"""The runtime backend registry drives the API and the command line: ``xccl.run`` dispatches through
it, and options a backend cannot honour are refused with the names of those that can."""

from __future__ import annotations

import subprocess
import sys

import pytest
import runtime_samples as samples
from conftest import assert_one_line_error

import xccl
from runtime.backends import BenchCase, BenchError, backends, get_backend
from runtime.errors import ExecutionError
from runtime.numpy import RunResult


def test_run_takes_the_backends_that_check_their_outputs():
    ir = samples.ring_allgather(4)
    runnable = [name for name, cls in backends().items() if cls.checks]
    with pytest.raises(ExecutionError, match=f"run takes {', '.join(runnable)} or auto"):
        xccl.run(ir, "4KiB", backend="sim")
    assert xccl.run(ir, "4KiB", backend="numpy").checked


def test_an_executor_backend_runs_an_ir_once_and_checks_it():
    case = BenchCase(4096, "int32", "max", inplace=False)
    result = get_backend("numpy", tile_bytes=64).run_once(samples.ring_allgather(4), case)
    assert isinstance(result, RunResult) and result.checked and result.tiles == 16  # 1 KiB chunks in 64 B tiles
    with pytest.raises(BenchError, match="moves no data"):
        get_backend("sim").run_once(samples.ring_allgather(4), case)


def test_max_memory_names_the_backends_it_applies_to(xccl):
    held = [name for name, cls in backends().items() if cls.host_memory]
    proc = xccl("bench", "example:ring_allreduce", "-D", "num_ranks=4", "-b", "sim", "--max-memory", "1GiB")
    assert_one_line_error(proc, f"(it applies to {', '.join(held)})")


def test_the_registry_and_its_backends_load_no_array_library():
    code = (
        "import sys; from runtime.backends import backends; table = backends(); "
        "print(sorted(table), [m for m in ('numpy', 'cupy', 'networkx', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['cupy', 'numpy', 'sim', 'torch'] []"
