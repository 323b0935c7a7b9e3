"""HiGHS through highspy: the model goes straight into a ``HighsLp`` (no per-variable Python calls)."""

from __future__ import annotations

import importlib.util
import time

import numpy as np

from common.native_output import native_stdout_silenced
from synth.milp.solvers.base import Backend
from synth.milp.solvers.model import Model, Solution, Status

__all__ = ["HighsBackend", "highs_lp", "new_highs"]

POLL_S = 0.05


def new_highs():
    """A silent ``highspy.Highs``: its banner (printed by the constructor) and its log stay off stdout."""
    import highspy

    with native_stdout_silenced():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
    return h


def highs_lp(
    cost: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    triplets: tuple[np.ndarray, np.ndarray, np.ndarray],
    integer: np.ndarray | None = None,
):
    """A ``highspy.HighsLp`` (minimise ``cost @ x``) from a sparse matrix given as ``(rows, cols,
    values)`` triplets, stored column-wise as HiGHS keeps it; ``integer`` flags integer columns."""
    import highspy

    rows, cols, vals = triplets
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = len(cost)
    lp.num_row_ = len(row_lower)
    lp.col_cost_ = cost
    lp.col_lower_ = np.where(np.isfinite(col_lower), col_lower, -inf)
    lp.col_upper_ = np.where(np.isfinite(col_upper), col_upper, inf)
    lp.row_lower_ = np.where(np.isfinite(row_lower), row_lower, -inf)
    lp.row_upper_ = np.where(np.isfinite(row_upper), row_upper, inf)
    order = np.lexsort((rows, cols))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.searchsorted(cols[order], np.arange(len(cost) + 1)).astype(np.int32)
    lp.a_matrix_.index_ = rows[order].astype(np.int32)
    lp.a_matrix_.value_ = vals[order]
    if integer is not None:
        kinds = highspy.HighsVarType
        lp.integrality_ = [kinds.kInteger if flag else kinds.kContinuous for flag in integer]
    return lp


class HighsBackend(Backend):
    name = "highs"
    capabilities = frozenset({"lp", "mip", "mip_start", "bound", "interrupt"})

    def available(self) -> bool:
        return importlib.util.find_spec("highspy") is not None

    def solve(self, model: Model, time_limit_s: float, threads: int = 1) -> Solution:
        import highspy

        began = time.perf_counter()
        h = new_highs()
        h.setOptionValue("time_limit", float(max(time_limit_s, 0.01)))
        h.setOptionValue("threads", int(max(threads, 1)))
        h.setOptionValue("mip_rel_gap", float(model.rel_gap))
        h.setOptionValue("random_seed", 0)
        triplets = (model.a_rows, model.a_cols, model.a_vals)
        bounds = (model.col_lower, model.col_upper, model.row_lower, model.row_upper)
        h.passModel(highs_lp(model.col_cost, *bounds, triplets, model.integer if model.is_mip else None))
        if model.start is not None and model.is_mip:
            sol = highspy.HighsSolution()
            sol.col_value = list(map(float, model.start))
            sol.value_valid = True
            h.setSolution(sol)
        interrupted = self._run(h)
        return self._solution(h, model, interrupted, time.perf_counter() - began)

    def _solution(self, h, model: Model, interrupted: bool, elapsed: float) -> Solution:
        """HiGHS's model status mapped to :class:`Status`, with the values and the best bound."""
        import highspy

        status = h.getModelStatus()
        info = h.getInfo()
        has_primal = info.primal_solution_status == 2
        values = np.array(h.getSolution().col_value) if has_primal else None
        objective = float(info.objective_function_value) if has_primal else None
        bound = float(info.mip_dual_bound) if model.is_mip else objective
        kinds = highspy.HighsModelStatus
        if status == kinds.kOptimal:
            mapped = Status.OPTIMAL
            bound = objective
        elif status in (kinds.kInfeasible, kinds.kUnboundedOrInfeasible):
            mapped = Status.INFEASIBLE
        elif has_primal:
            mapped = Status.FEASIBLE
        else:
            mapped = Status.UNKNOWN
        detail = h.modelStatusToString(status)
        return Solution(mapped, objective, bound, values, elapsed, self.name, interrupted, detail)

    @staticmethod
    def _run(h) -> bool:
        """Solve in HiGHS's thread, polling so that Ctrl-C cancels the search and keeps the incumbent."""
        h.HandleUserInterrupt = True
        thread = h.startSolve()
        interrupted = False
        while True:
            try:
                done, _ = h.wait(POLL_S)
                if done:
                    break
            except KeyboardInterrupt:
                interrupted = True
                h.cancelSolve()
        if thread is not None:
            thread.join()
        return interrupted
