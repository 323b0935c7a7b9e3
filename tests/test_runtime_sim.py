"""The IR-level timing simulator: closed forms, and agreement with the Algorithm-level simulator."""

from __future__ import annotations

import pytest
import runtime_samples as samples

from codegen.compiler import compile_algorithm
from runtime.errors import DeadlockError, ExecutionError
from runtime.sim import simulate
from synth.baselines import default_chunks, make_baseline
from synth.collectives import make_collective
from synth.cost import simulate as simulate_algorithm
from synth.timing import DEFAULT, IDEAL
from topologies import load
from topologies.builders import fully_connected, line, ring, switch

ALPHA, GBPS = 0.7, 25.0
MB = 1e3  # bytes per microsecond at 1 GB/s


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("size", [1e3, 1e6, 256 * 2**20])
def test_ring_allgather_closed_form(n, size):
    """(n - 1) hops of one chunk each: (n - 1) * (alpha + M / (n B))."""
    result = simulate(samples.ring_allgather(n), ring(n, GBPS, ALPHA), size, params=IDEAL)
    assert result.time_us == pytest.approx((n - 1) * (ALPHA + size / n / (GBPS * MB)), rel=1e-9)
    assert result.algbw_GBps == pytest.approx(size / result.time_us / MB)
    assert result.busbw_GBps == pytest.approx(result.algbw_GBps * (n - 1) / n)


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("size", [1e4, 1e8])
def test_agrees_with_the_algorithm_simulator_on_ring_baselines(n, size):
    topo = ring(n)
    for ir, coll in (
        (samples.ring_allgather(n), make_collective("allgather", n, 1)),
        (samples.ring_allreduce(n), make_collective("allreduce", n, n)),
    ):
        ours = simulate(ir, topo, size, params=IDEAL).time_us
        theirs = simulate_algorithm(make_baseline("ring", topo, coll), topo, size, IDEAL).time_us
        assert ours == pytest.approx(theirs, rel=0.05)


@pytest.mark.parametrize("topo", [fully_connected(6), switch(6)], ids=lambda t: t.name)
def test_agrees_on_direct_allgather_with_shared_switch_ports(topo):
    """All-pairs: one transfer per peer in parallel; through a switch the port serializes them."""
    ours = simulate(samples.allpairs_allgather(6), topo, 6e6, params=IDEAL).time_us
    algo = make_baseline("direct", topo, make_collective("allgather", 6, 1))
    assert ours == pytest.approx(simulate_algorithm(algo, topo, 6e6, IDEAL).time_us, rel=0.05)
    per_peer = 1e6 / (25.0 * MB)
    if topo.name.startswith("fully"):
        assert ours == pytest.approx(ALPHA + per_peer, rel=1e-9)
    else:  # each rank's port to the switch carries its 5 sends one after another (at least)
        assert ours >= 2 * ALPHA + 5 * per_peer


def test_a_threadblock_runs_its_steps_in_order():
    """Two chunks per rank in one threadblock wait for each other; on two channels they overlap and
    only share the link, which saves one alpha per hop."""
    n, size = 4, 8e6
    topo = ring(n, GBPS, ALPHA)
    serial = simulate(samples.ring_allgather(n, chunks=2), topo, size, params=IDEAL).time_us
    parallel = simulate(samples.ring_allgather(n, chunks=2, channels=2), topo, size, params=IDEAL).time_us
    assert serial == pytest.approx((n - 1) * (2 * ALPHA + size / n / (GBPS * MB)))
    assert parallel < serial - (n - 2) * ALPHA


@pytest.mark.parametrize("n", [3, 4])
def test_channels_to_one_peer_pay_their_per_send_costs_at_once(n):
    """Each channel has its own connection to a peer (NCCL's ``ncclChannel.peers[peer]``, one
    threadblock each in MSCCL), so two chunks sent round the ring on two channels pay their per-send
    costs side by side and share only the link, which carries the 2 (n - 1) chunks back to back:
    only the last one's send cost and alpha show. With one connection per rank pair (the model
    before), each hop paid both chunks' send costs one after another."""
    size = 8e6
    hold = size / (2 * n) / (GBPS * DEFAULT.rate_fraction * MB)
    ir = samples.ring_allgather(n, chunks=2, channels=2)
    time = simulate(ir, ring(n, GBPS, ALPHA), size, params=DEFAULT).time_us
    assert time == pytest.approx(DEFAULT.launch_us + DEFAULT.send_us + ALPHA + 2 * (n - 1) * hold)


def test_tiles_pipeline_a_broadcast():
    """Replaying tile by tile lets a broadcast chain overlap its hops; whole chunks cannot."""
    n, size, tile = 4, 64e6, 2 << 20
    ir = samples.ring_broadcast(n)
    whole = simulate(ir, ring(n), size, params=IDEAL).time_us
    tiled = simulate(ir, ring(n), size, tile_bytes=tile, params=IDEAL).time_us
    assert whole == pytest.approx((n - 1) * (ALPHA + size / (GBPS * MB)))
    tiles = -(-int(size) // tile)
    assert tiled == pytest.approx((tiles + n - 2) * (ALPHA + tile / (GBPS * MB)), rel=0.05)


def test_bounded_fifos_and_missing_links():
    ir = samples.ring_allgather(4, chunks=3, aggregate=True)
    with pytest.raises(DeadlockError, match="waits for room to send"):
        simulate(ir, ring(4), 4 * 3 * 256, tile_bytes=256)
    assert simulate(ir, ring(4), 4 * 3 * 256, tile_bytes=256, fifo_depth=4).time_us > 0
    with pytest.raises(ExecutionError, match="has no link 3->0"):
        simulate(samples.ring_allgather(4), line(4), 1e6)
    with pytest.raises(ExecutionError, match="has 8"):
        simulate(samples.ring_allgather(4), ring(8), 1e6)


AGREES = [
    ("ring", "allgather", "dgx1"),
    ("ring", "allgather", "ring:8"),
    ("ring", "allreduce", "dgx1"),
    ("ring", "allreduce", "ring:8"),
    ("ring", "reducescatter", "ring:8"),
    ("bidir-ring", "allgather", "dgx1"),
    ("direct", "allgather", "fully-connected:4"),
    ("direct", "allgather", "dgx2"),
    ("binomial-tree", "broadcast", "dgx1"),
    ("hierarchical", "allgather", "ndv2x2"),
]


@pytest.mark.parametrize(("kind", "coll", "topology"), AGREES, ids=["-".join(c) for c in AGREES])
def test_agrees_with_the_algorithm_simulator_on_compiled_baselines(kind, coll, topology):
    """The compiled IR (out of place and in place) takes the time the Algorithm model gives the
    schedule it came from, within 5%, from latency- to bandwidth-bound sizes."""
    topo = load(topology)
    n = topo.num_ranks
    chunks = default_chunks(kind, coll, n)
    algo = make_baseline(kind, topo, make_collective(coll, n, chunks))
    for inplace in (False, True):
        ir = compile_algorithm(algo, topo, inplace=inplace)
        for size in (1e3, 1e6, 1e9):
            ours = simulate(ir, topo, size, params=IDEAL).time_us
            assert ours == pytest.approx(simulate_algorithm(algo, topo, size, IDEAL).time_us, rel=0.05)


def test_timing_an_ir_keeps_no_hold_on_it():
    """The simulator remembers the last IR's program for its next model, weakly: a 512-rank IR is
    gigabytes of objects, and holding its program kept it alive after its compile returned."""
    import gc
    import weakref

    ir = samples.ring_allgather(4)
    assert simulate(ir, ring(4), 1e6, params=IDEAL).time_us > 0
    gone = weakref.ref(ir)
    del ir
    gc.collect()
    assert gone() is None


def test_timing_an_algorithm_keeps_no_hold_on_it_or_its_topology():
    """The Algorithm model's memo of the last schedule (and the network's of the last topology) is
    weak too."""
    import gc
    import weakref

    from synth.cost import link_bound_us

    topo = ring(4)
    algo = make_baseline("ring", topo, make_collective("allgather", 4, 1))
    assert simulate_algorithm(algo, topo, 1e6, IDEAL).time_us > 0 < link_bound_us(algo, topo, 1e6)
    gone = (weakref.ref(algo), weakref.ref(topo))
    del algo, topo
    gc.collect()
    assert [ref() for ref in gone] == [None, None]


def test_a_prepared_ir_is_timed_in_each_model_without_building_it_again(monkeypatch):
    """``xccl compile`` prepares the IR before it forks the child that times the ideal model."""
    import runtime.sim as sim

    builds = []
    judged = sim.judged
    monkeypatch.setattr(sim, "judged", lambda ir: builds.append(ir) or judged(ir))
    ir = samples.ring_allgather(4)
    sim.prepare(ir, 1e6)
    times = [simulate(ir, ring(4), 1e6, params=p).time_us for p in (IDEAL, DEFAULT)]
    assert builds == [ir] and 0 < times[0] < times[1]
    with pytest.raises(ExecutionError, match="expected positive sizes"):
        sim.prepare(ir, 0)
