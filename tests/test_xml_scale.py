"""The XML and IR tooling at scale (issue 17, item 3): the searches that replaced scans give what
the scans gave, the collector pause is undone, and the slow stages of ``xccl compile``, ``check``
and ``run`` say so on stderr. Timings: ``benchmarks/scale.py`` and ``benchmarks/RESULTS.md``."""

from __future__ import annotations

import functools
import gc
import itertools
import random
import weakref

import pytest
from codegen_helpers import heap_order

from codegen.chunk_dag import DepKind
from codegen.instr_dag import InstrEdge, topological_order
from codegen.passes.channel_taken import Taken, connection_busy, hold, in_order
from common.gc_pause import gc_paused
from xccl.cli import bench as cli_bench
from xccl.cli import compiler as cli_compiler
from xccl.cli.output import slow_stage


def _scanin_order(placed: list[tuple[int, int]], pairs: list[tuple[int, int]]) -> bool:
    """The check ``_in_order`` replaced: insert every pair, then scan the whole connection."""
    merged = sorted([*placed, *pairs])
    return not any(a[1] > b[1] for a, b in itertools.pairwise(merged))


@pytest.mark.parametrize("seed", range(40))
def test_receive_order_by_search_is_the_scan(seed):
    rnd = random.Random(seed)
    sends = rnd.sample(range(200), 30)
    receives = sorted(rnd.sample(range(200), 30))
    placed = sorted(zip(sorted(sends[:20]), receives[:20], strict=True))  # received in send order
    if rnd.random() < 0.5:
        rnd.shuffle(receives)
    pairs = list(zip(sends[20:], receives[20:], strict=False))[: rnd.randint(1, 4)]
    assert in_order(placed, list(pairs)) == _scanin_order(placed, pairs)


class _Holds:
    """A stand-in DAG for ``connection_busy``: each send holds ``spans[send]``."""

    def __init__(self, spans: list[tuple[float, float]]) -> None:
        self.spans = spans
        self.instrs = [type("I", (), {"rank": 0, "send_to": 1})() for _ in spans]

    def holds(self, send: int) -> tuple[float, float]:
        return self.spans[send]

    def overlap(self, a: int, b: int) -> bool:
        (s, e), (s2, e2) = self.holds(a), self.holds(b)
        return s < e2 and s2 < e


@pytest.mark.parametrize("seed", range(40))
def test_busy_by_search_is_the_scan(seed):
    """Counting overlaps in the sorted starts and ends says what the scan over held sends said,
    touching intervals and empty holds included."""
    rnd = random.Random(seed)
    spans = []
    for _ in range(25):
        start = rnd.randint(0, 20) / 2
        spans.append((start, start + rnd.choice([0, 0.5, 1, 2, 3])))
    dag = _Holds(spans)
    taken = Taken()
    key = (0, 1, 0, 0)
    for send in range(len(spans)):
        scanned = any(
            dag.overlap(send, other) for other in (taken.conns[key].held if key in taken.conns else ())
        )
        assert connection_busy(dag, send, 0, 0, taken) == scanned, (send, spans[: send + 1])
        if rnd.random() < 0.7:
            hold(dag, send, key, taken)


@pytest.mark.parametrize("seed", range(40))
def test_topological_order_without_the_heap_is_kahns(seed):
    """Whether or not the key's sort is already topological, the order is the heap's."""
    rnd = random.Random(seed)
    n = rnd.randint(2, 30)
    rank = list(range(n))
    rnd.shuffle(rank)
    edges = [InstrEdge(a, b, DepKind.RAW) for a in range(n) for b in range(a + 1, n) if rnd.random() < 0.15]
    hint = [rank[i] if seed % 2 else i + rnd.choice([0, 0, 3]) for i in range(n)]
    key = functools.partial(lambda h, i: (h[i], i), hint)
    assert topological_order(n, edges, key) == heap_order(n, edges, key)


def test_the_collector_is_back_on_after_a_pause_even_after_an_error():
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves it to the outer one
        raise ValueError
    assert gc.isenabled()


class _Node:
    def __init__(self, parent: object) -> None:
        self.parent = parent


def test_what_a_pause_built_is_old_after_it_so_the_next_young_collection_skips_it():
    gc.collect()
    with gc_paused():
        built = [_Node(None) for _ in range(50_000)]
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert sum(id(node) in young for node in built) == 0
    assert id(built[0]) in {id(o) for o in gc.get_objects(generation=2)}  # still collectable
    cycle = _Node(None)
    with gc_paused():
        cycle.parent = cycle  # garbage once dropped, freed only by the collector
    ref = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert ref() is None


def test_a_callers_frozen_objects_stay_frozen_after_a_pause():
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            [_Node(None) for _ in range(1_000)]
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_compile_check_and_run_say_what_is_slow(xccl, tmp_path, monkeypatch):
    """Every stage past the threshold (here 0 s) names itself on stderr and its time when done;
    stdout keeps only the results."""
    eager = functools.partial(slow_stage, after_s=0.0)
    monkeypatch.setattr(cli_compiler, "slow_stage", eager)
    monkeypatch.setattr(cli_bench, "slow_stage", eager)
    xml = tmp_path / "ring.xml"
    done = xccl("compile", "example:ring_allreduce", "-D", "num_ranks=4", "-o", str(xml))
    assert done.returncode == 0, done.stderr
    assert "xccl: compiling example:ring_allreduce" in done.stderr
    assert "xccl: writing azure" in done.stderr
    checked = xccl("check", str(xml))
    assert checked.returncode == 0, checked.stderr
    assert f"xccl: loading {xml}" in checked.stderr and f"xccl: checking {xml}" in checked.stderr
    ran = xccl("run", str(xml), "--size", "4KiB")
    assert ran.returncode == 0, ran.stderr
    assert f"xccl: loading {xml}" in ran.stderr and f"xccl: running {xml} on numpy" in ran.stderr
    assert "xccl:" not in ran.stdout and ran.stdout.startswith("ok:")
