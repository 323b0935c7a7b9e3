"""Work in a forked child (``common.forked``): what comes back is what the work gives inline (its
value, or its error with the same type and message), a child that dies means the parent does the
work, ``XCCL_FORK=0`` keeps it all inline, and no child outlives its parent, however that ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import common.forked as forked_module
from common.errors import XcclError
from common.forked import ENV, Results, forked, together

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork: everything runs inline")


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch):
    """A second CPU, so that each test runs its work in a child wherever this machine runs it."""
    monkeypatch.setattr(forked_module, "_cpus", lambda: 2)
    monkeypatch.delenv(ENV, raising=False)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (exited or a zombie left to its reaper) within ``within_s``."""
    stop = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X") or time.monotonic() > stop:
            return state in ("Z", "X")
        time.sleep(0.05)


def _ignores_ctrl_c(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` ignores SIGINT (its ``SigIgn`` mask) within ``within_s``."""
    stop = time.monotonic() + within_s
    while time.monotonic() < stop:
        status = Path(f"/proc/{pid}/status").read_text()
        mask = int(status.split("SigIgn:")[1].split()[0], 16)
        if mask >> (signal.SIGINT - 1) & 1:
            return True
        time.sleep(0.05)
    return False


def _script(body: str) -> subprocess.Popen:
    """``body`` run by a Python of its own in a session of its own, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(body)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_a_value_comes_back_from_a_child_as_it_is_made_inline():
    data = {k: [k / 7, str(k)] for k in range(1000)}  # the child reads the parent's objects
    with forked(lambda: (os.getpid(), {k: v[0] * 3 for k, v in data.items()})) as job:
        pid = job.pid
        assert pid is not None and pid != os.getpid()
        child, value = job.result()
    assert child == pid and job.pid is None and _gone(pid, 0.0)  # reaped once its value is in
    assert value == {k: v[0] * 3 for k, v in data.items()}


def test_an_error_in_a_child_is_raised_in_the_parent_with_its_type_and_message():
    parent = os.getpid()

    def fails():
        raise XcclError(f"no layout fits (raised by {os.getpid()})")

    with pytest.raises(XcclError, match=r"no layout fits \(raised by (\d+)\)") as raised:
        forked(fails).result()
    assert type(raised.value) is XcclError and str(parent) not in str(raised.value)


class _Odd(XcclError):
    """An error whose pickle does not come back (its constructor takes what its args do not hold)."""

    def __init__(self, what: str, pid: int) -> None:
        super().__init__(f"{what} in {pid}")


def test_an_error_that_does_not_pickle_back_is_raised_by_the_work_run_again_inline():
    parent = os.getpid()
    with pytest.raises(_Odd, match=f"in {parent}$"):
        forked(lambda: (_ for _ in ()).throw(_Odd("odd", os.getpid()))).result()


def test_a_child_killed_gives_the_inline_result():
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer would
        return "computed by the parent"

    job = forked(work)
    pid = job.pid
    assert pid is not None and job.result() == "computed by the parent" and _gone(pid, 0.0)


def test_a_child_that_stops_making_progress_is_killed_and_the_parent_does_the_work(monkeypatch):
    monkeypatch.setattr(forked_module, "STALL_S", 1.0)
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            time.sleep(3600)  # no CPU time and nothing written: as if blocked on a lock for good
        return "computed by the parent"

    job = forked(work)
    pid = job.pid
    started = time.monotonic()
    assert pid is not None and job.result() == "computed by the parent" and _gone(pid, 0.0)
    assert time.monotonic() - started < 30


def test_a_child_that_computes_longer_than_the_stall_limit_is_waited_for(monkeypatch):
    monkeypatch.setattr(forked_module, "STALL_S", 1.0)

    def work():
        stop = time.process_time() + 2.5  # CPU time: it keeps computing past the limit
        while time.process_time() < stop:
            pass
        return os.getpid()

    job = forked(work)
    pid = job.pid
    assert pid is not None and job.result() == pid  # the child's value, not the parent's


def test_a_value_that_does_not_pickle_is_made_again_inline():
    parent = os.getpid()
    job = forked(lambda: lambda: os.getpid())  # a lambda does not pickle
    assert job.pid is not None and job.result()() == parent


def test_the_environment_variable_keeps_the_work_inline(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    job = forked(os.getpid)
    assert job.pid is None and job.result() == os.getpid()
    assert together(os.getpid, os.getpid) == [os.getpid()] * 2


def test_work_done_inline_is_done_once_even_where_it_fails(monkeypatch):
    # as a child's answer is kept, so is the inline one: asking again raises the same error, and
    # the work (a 512-rank verification: 2 s) does not run again
    monkeypatch.setenv(ENV, "0")
    calls: list[int] = []

    def fails() -> None:
        calls.append(1)
        raise XcclError("broken schedule")

    job = forked(fails)
    for _ in range(2):
        with pytest.raises(XcclError, match="broken schedule"):
            job.result()
    assert calls == [1]


def test_one_cpu_keeps_the_work_inline(monkeypatch):
    monkeypatch.setattr(forked_module, "_cpus", lambda: 1)
    assert forked(os.getpid).pid is None


def test_together_runs_the_others_in_children_and_gives_the_values_in_order():
    pids = together(os.getpid, os.getpid, os.getpid)
    assert pids[0] == os.getpid() and len(set(pids)) == 3


def test_together_raises_the_first_error_and_leaves_no_child(monkeypatch):
    jobs = []
    start = forked_module.forked
    monkeypatch.setattr(forked_module, "forked", lambda fn: jobs.append(start(fn)) or jobs[-1])
    pids = []
    with pytest.raises(XcclError, match="first"):
        together(
            lambda: pids.extend(j.pid for j in jobs) or (_ for _ in ()).throw(XcclError("first")),
            lambda: time.sleep(60),
        )
    assert len(pids) == 1 and pids[0] is not None and _gone(pids[0], 0.0) and jobs[0].pid is None


def test_results_are_made_once_each_and_those_not_asked_for_are_killed():
    made = []

    def compute(key: str) -> tuple[str, int]:
        made.append(key)
        if key == "never":
            time.sleep(60)
        return key, os.getpid()

    with Results(compute) as results:
        results.start(["early", "never"])
        pids = [job.pid for job in results._started.values()]
        assert results("early") == results("early") and results("early")[1] != os.getpid()
        assert results("late") == ("late", os.getpid())
    assert made == ["late"] and all(_gone(pid, 5.0) for pid in pids)


def test_a_child_writes_nothing_and_is_killed_when_its_parent_exits():
    # the parent exits without asking for the result: the child (asleep for a minute) is killed
    proc = _script(
        """
        import os, sys, time
        import common.forked as f
        f._cpus = lambda: 2
        def work():
            print("child on stdout", flush=True)
            print("child on stderr", file=sys.stderr, flush=True)
            time.sleep(60)
        job = f.forked(work)
        print(job.pid, flush=True)
        time.sleep(0.5)
        """
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "child" not in out + err, (out, err)
    assert _gone(int(out.split()[0]))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "Ctrl-C"])
def test_no_child_outlives_a_parent_ended_by_a_signal(how):
    # SIGTERM and SIGKILL end the parent at once (no Python runs): the kernel kills the child;
    # Ctrl-C reaches the whole process group: the child ignores it and the parent kills it
    proc = _script(
        """
        import signal, time
        import common.forked as f
        signal.signal(signal.SIGINT, signal.default_int_handler)  # started in the background, it inherits SIGINT ignored
        f._cpus = lambda: 2
        job = f.forked(lambda: time.sleep(60))
        print(job.pid, flush=True)
        job.result()
        """
    )
    pid = int(proc.stdout.readline())
    assert _ignores_ctrl_c(pid)  # the child is at its work: past its own set-up
    if how == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(getattr(signal, how))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and _gone(pid), err
    assert how != "Ctrl-C" or "KeyboardInterrupt" in err


def test_the_compilers_choice_times_in_children_what_it_times_inline(monkeypatch):
    # the Algorithm's calibrated time beside the lowering, and each compiled IR's static check and
    # ideal time beside its calibrated one: the same IR and the same Choice as all inline
    from runtime.choice import compile_fastest
    from synth.trees import synthesize
    from topologies import load

    topo = load("dgx-a100x2")
    algo = synthesize(topo, "allgather", size_bytes=1 << 26).algorithm
    forks = []
    fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(fork()) or forks[-1])
    ir, choice = compile_fastest(algo, topo)
    # the Algorithm's calibrated and ideal times (the lowering orders it at 1 GiB, not at 64 MiB),
    # and the one IR compiled (within SPEED as it is): its check, its time in the ideal model
    assert len(forks) == 4 and all(_gone(pid, 0.0) for pid in forks) and choice.others_us == ()
    monkeypatch.setenv(ENV, "0")
    assert compile_fastest(algo, topo) == (ir, choice) and len(forks) == 4
