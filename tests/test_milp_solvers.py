"""Solver back ends: the registry is honest, and one standard instance set has the same answers on each."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from synth.milp.solvers import (
    BACKENDS,
    CAPABILITIES,
    INF,
    Model,
    ModelBuilder,
    SolverError,
    Status,
    available_backends,
    get_backend,
)


def knapsack() -> tuple[Model, float]:
    """max 5x + 4y + 3z, 2x + 3y + z <= 5, 4x + y + 2z <= 11, 3x + 4y + 2z <= 8, integers >= 0 (optimum 13)."""
    mb = ModelBuilder("knapsack")
    x, y, z = (mb.var(n, 0, INF, -c, integer=True) for n, c in (("x", 5), ("y", 4), ("z", 3)))
    mb.row({x: 2, y: 3, z: 1}, upper=5)
    mb.row({x: 4, y: 1, z: 2}, upper=11)
    mb.row({x: 3, y: 4, z: 2}, upper=8)
    return mb.build(), -13.0


def lp() -> tuple[Model, float]:
    """min -x - y with x + 2y <= 4, 3x + y <= 6 (optimum at x=1.6, y=1.2: -2.8), free-ranged row."""
    mb = ModelBuilder("lp")
    x, y = mb.var("x", cost=-1), mb.var("y", cost=-1)
    mb.row({x: 1, y: 2}, upper=4)
    mb.row({x: 3, y: 1}, lower=-INF, upper=6)
    return mb.build(), -2.8


def assignment() -> tuple[Model, float]:
    """3x3 assignment, costs with a unique optimum of 5 (1 + 2 + 2)."""
    cost = [[1, 4, 5], [5, 2, 3], [4, 6, 2]]
    mb = ModelBuilder("assignment")
    v = {(i, j): mb.var(f"a{i}{j}", 0, 1, cost[i][j], integer=True) for i in range(3) for j in range(3)}
    for i in range(3):
        mb.row({v[i, j]: 1 for j in range(3)}, lower=1, upper=1)
        mb.row({v[j, i]: 1 for j in range(3)}, lower=1, upper=1)
    return mb.build(start=np.array([1, 0, 0, 0, 1, 0, 0, 0, 1], dtype=float)), 5.0


def makespan() -> tuple[Model, float]:
    """Two machines, jobs 3, 3, 2, 2, 2: the least makespan is 6 (a routing model in miniature)."""
    jobs = [3, 3, 2, 2, 2]
    mb = ModelBuilder("makespan")
    t = mb.var("T", 0, 100, 1.0)
    x = {(j, m): mb.var(f"x{j}{m}", 0, 1, 0, integer=True) for j in range(5) for m in range(2)}
    for j in range(5):
        mb.row({x[j, 0]: 1, x[j, 1]: 1}, lower=1, upper=1)
    for m in range(2):
        mb.row({**{x[j, m]: jobs[j] for j in range(5)}, t: -1}, upper=0)
    return mb.build(), 6.0


STANDARD = [knapsack, lp, assignment, makespan]


def test_cbc_with_one_thread_runs_its_serial_search(monkeypatch):
    """``-threads 1`` starts CBC's threaded search, whose one worker sometimes never starts: a
    5-job makespan then waits out its whole time limit (1 solve in about 20). One thread is no
    ``-threads`` option at all; more are passed on."""
    import pulp

    given = []
    real = pulp.PULP_CBC_CMD

    def spy(*args, **kwargs):
        given.append(kwargs.get("threads"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pulp, "PULP_CBC_CMD", spy)
    solver = get_backend("cbc")
    model, optimum = makespan()
    for threads in (1, 2):
        sol = solver.solve(model, time_limit_s=10, threads=threads)
        assert sol.status is Status.OPTIMAL and sol.objective == optimum
    assert given == [None, 2]


def test_registry_is_ordered_and_honest():
    assert list(BACKENDS) == ["highs", "cbc"]
    for name, backend in BACKENDS.items():
        assert backend.name == name
        assert backend.capabilities <= CAPABILITIES
        assert {"lp", "mip"} <= backend.capabilities
    assert get_backend().name == available_backends()[0]
    with pytest.raises(SolverError, match="unknown solver 'gurobi'"):
        get_backend("gurobi")


def test_available_does_not_import_the_solver():
    code = (
        "import sys; from synth.milp.solvers import BACKENDS; "
        "[b.available() for b in BACKENDS.values()]; "
        "print(sorted(m for m in ('highspy', 'pulp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("instance", STANDARD, ids=lambda f: f.__name__)
def test_standard_instances_have_the_known_optimum(backend, instance):
    solver = get_backend(backend)
    model, optimum = instance()
    sol = solver.solve(model, time_limit_s=10)
    assert sol.status is Status.OPTIMAL
    assert sol.objective == pytest.approx(optimum, abs=1e-6)
    assert sol.gap == 0.0
    assert model.is_feasible(sol.values)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_infeasible_is_reported(backend):
    mb = ModelBuilder("infeasible")
    x = mb.var("x", 0, 1, 1.0, integer=True)
    y = mb.var("y", 0, 1, 1.0, integer=True)
    mb.row({x: 1, y: 1}, lower=3)
    sol = get_backend(backend).solve(mb.build(), time_limit_s=10)
    assert sol.status is Status.INFEASIBLE and sol.values is None


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_time_limit_keeps_the_incumbent_and_reports_a_gap(backend):
    """A 60-item knapsack with a MIP start and a tiny time limit: a solution is always returned."""
    rng = np.random.default_rng(0)
    weights = rng.integers(100, 1000, 60)
    values = weights + rng.integers(0, 50, 60)
    mb = ModelBuilder("knapsack60")
    cols = [mb.var(f"x{i}", 0, 1, -float(v), integer=True) for i, v in enumerate(values)]
    mb.row(dict(zip(cols, map(float, weights), strict=True)), upper=float(weights.sum() // 2))
    model = mb.build(start=np.zeros(60))
    sol = get_backend(backend).solve(model, time_limit_s=0.05)
    assert sol.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert model.is_feasible(sol.values)
    if sol.status is Status.FEASIBLE and sol.gap is not None:
        assert sol.gap >= 0.0


def test_model_checks_a_start():
    model, _ = assignment()
    assert model.is_feasible(model.start)
    assert not model.is_feasible(np.ones(9))
    assert "9 vars (9 integer) x 6 rows" in model.size()


def market_split(rows: int = 4, cols: int = 40) -> Model:
    """Cornuéjols and Dawande's market split: equality knapsacks that branch and bound takes
    minutes on, so an interrupt lands while the solver runs."""
    rng = np.random.default_rng(1)
    a = rng.integers(0, 100, (rows, cols))
    mb = ModelBuilder("market-split")
    xs = [mb.var(f"x{j}", 0, 1, 0.0, integer=True) for j in range(cols)]
    for i in range(rows):
        rhs = float(a[i].sum() // 2)
        mb.row({x: float(v) for x, v in zip(xs, a[i], strict=True)}, lower=rhs, upper=rhs)
    return mb.build()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are found through /proc")
def test_an_interrupted_cbc_leaves_no_solver_process_behind():
    import signal

    def children() -> set[int]:
        from pathlib import Path

        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found.add(int(stat.parent.name))
        return found

    def press_ctrl_c(signum, frame):
        seen.update(children())
        raise KeyboardInterrupt

    seen: set[int] = set()
    previous = signal.signal(signal.SIGALRM, press_ctrl_c)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    try:
        sol = get_backend("cbc").solve(market_split(), time_limit_s=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert sol.interrupted and seen  # CBC was running when the interrupt came
    for _ in range(50):
        if not any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in seen):
            break
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in seen)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
