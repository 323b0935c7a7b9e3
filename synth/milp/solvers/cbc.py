"""CBC through PuLP's bundled binary (the fallback): PuLP writes the model, runs cbc, reads values.

CBC's best bound is not exposed by PuLP, so it is read from the solver log ("Lower bound:").
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import re
import signal
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from synth.milp.solvers.base import Backend
from synth.milp.solvers.model import Model, Solution, Status

__all__ = ["CbcBackend"]

_BOUND = re.compile(r"^Lower bound:\s*(\S+)", re.MULTILINE)
_RESULT = re.compile(r"^Result - (.*)$", re.MULTILINE)


def _stop_children(name: str) -> None:
    """End this process's children called ``name``. PuLP runs CBC as a child and, when Ctrl-C or
    SIGTERM interrupts the wait, leaves it running to its own time limit (Linux's /proc; elsewhere
    a terminal's Ctrl-C reaches the child anyway)."""
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        comm, _, rest = text.partition("(")[2].rpartition(")")
        fields = rest.split()
        if comm == name and len(fields) > 1 and int(fields[1]) == me:
            with contextlib.suppress(OSError):
                os.kill(int(stat.parent.name), signal.SIGTERM)


def _problem(model: Model) -> tuple:
    """The model as a PuLP problem, and its columns in order."""
    import pulp

    prob = pulp.LpProblem(re.sub(r"\W", "_", model.name) or "model", pulp.LpMinimize)
    cols = [
        prob.add_variable(
            f"x{i}",
            lowBound=None if math.isinf(lo) else float(lo),
            upBound=None if math.isinf(up) else float(up),
            cat=pulp.LpInteger if flag else pulp.LpContinuous,
        )
        for i, (lo, up, flag) in enumerate(zip(model.col_lower, model.col_upper, model.integer, strict=True))
    ]
    prob.setObjective(
        pulp.LpAffineExpression([(cols[i], float(c)) for i, c in enumerate(model.col_cost) if c != 0.0])
    )
    terms: list[list[tuple]] = [[] for _ in range(model.num_rows)]
    for r, c, v in zip(model.a_rows.tolist(), model.a_cols.tolist(), model.a_vals.tolist(), strict=True):
        terms[r].append((cols[c], v))
    for r, row in enumerate(terms):
        lo, up = float(model.row_lower[r]), float(model.row_upper[r])
        expr = pulp.LpAffineExpression(row)
        if lo == up:
            prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintEQ, f"r{r}", lo))
            continue
        if not math.isinf(lo):
            prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintGE, f"r{r}l", lo))
        if not math.isinf(up):
            prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintLE, f"r{r}u", up))
    return prob, cols


class CbcBackend(Backend):
    name = "cbc"
    capabilities = frozenset({"lp", "mip", "mip_start", "bound"})

    def available(self) -> bool:
        spec = importlib.util.find_spec("pulp")
        if spec is None or not spec.submodule_search_locations:
            return False
        root = Path(next(iter(spec.submodule_search_locations))) / "solverdir" / "cbc"
        return any(p.name in ("cbc", "cbc.exe") for p in root.glob("*/*/*"))

    def solve(self, model: Model, time_limit_s: float, threads: int = 1) -> Solution:
        import pulp

        began = time.perf_counter()
        prob, cols = _problem(model)
        warm = model.start is not None and model.is_mip
        if warm:
            for var, value in zip(cols, model.start, strict=True):
                var.setInitialValue(float(value))
        with tempfile.TemporaryDirectory(prefix="xccl-cbc-") as tmp:
            log = Path(tmp) / "cbc.log"
            with warnings.catch_warnings():  # PuLP 3 bundles CBC here and announces its 4.0 move
                warnings.simplefilter("ignore", DeprecationWarning)
                solver = pulp.PULP_CBC_CMD(
                    msg=False,
                    timeLimit=max(1, math.ceil(time_limit_s)),
                    threads=_threads(threads),
                    warmStart=warm,
                    logPath=str(log),
                    gapRel=float(model.rel_gap),
                )
            try:
                prob.solve(solver)
            except KeyboardInterrupt:
                _stop_children("cbc")
                return Solution(
                    Status.UNKNOWN, time_s=time.perf_counter() - began, solver=self.name, interrupted=True
                )
            except pulp.PulpSolverError as exc:
                return Solution(
                    Status.UNKNOWN, time_s=time.perf_counter() - began, solver=self.name, detail=str(exc)
                )
            text = log.read_text() if log.exists() else ""
        return self._result(model, prob, cols, text, time.perf_counter() - began)

    def _result(self, model: Model, prob, cols: list, log: str, elapsed: float) -> Solution:
        import pulp

        result = _RESULT.search(log)
        detail = result[1].strip() if result else pulp.LpStatus[prob.status]
        if prob.status == pulp.LpStatusInfeasible or "infeasible" in detail.lower():
            return Solution(Status.INFEASIBLE, time_s=elapsed, solver=self.name, detail=detail)
        seen = {v.name for v in prob.variables()}
        values = np.array(
            [
                v.varValue if v.varValue is not None else (np.nan if v.name in seen else np.clip(0.0, lo, up))
                for v, lo, up in zip(cols, model.col_lower, model.col_upper, strict=True)
            ],
            dtype=float,
        )
        solved = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
        if not solved or np.isnan(values).any():
            return Solution(Status.UNKNOWN, time_s=elapsed, solver=self.name, detail=detail)
        objective = float(model.col_cost @ values)
        if prob.sol_status == pulp.LpSolutionOptimal and "stopped" not in detail.lower():
            return Solution(Status.OPTIMAL, objective, objective, values, elapsed, self.name, detail=detail)
        match = _BOUND.search(log)
        bound = float(match[1]) if match else None
        return Solution(Status.FEASIBLE, objective, bound, values, elapsed, self.name, detail=detail)


def _threads(threads: int) -> int | None:
    """CBC's ``-threads`` for ``threads`` workers; None (no option: the serial search) for one.

    With ``-threads 1`` CBC runs its threaded search with one worker, and that worker sometimes never
    starts: the main thread waits out the whole time limit with the optimum in hand ("Thread 0 used
    0 times, waiting to start 10.0", "Stopped on time limit"; 1 in about 20 solves of a 5-job
    makespan here; coin-or/Cbc issue 640, coin-or/pulp issue 737)."""
    return threads if threads > 1 else None
