"""The NumPy reference executor: runs any IR on n simulated ranks with the MSCCL runtime's semantics
and checks its outputs against the NumPy reference of the collective (see ``docs/runtime.md``)."""

from runtime.numpy.executor import ExecStats, NumpyExecutor
from runtime.numpy.ops import HANDLERS
from runtime.numpy.runner import RunResult, execute, run

__all__ = ["HANDLERS", "ExecStats", "NumpyExecutor", "RunResult", "execute", "run"]
