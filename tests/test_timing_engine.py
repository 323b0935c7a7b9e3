"""The timing engine's rules (``synth.timing``): what a transfer occupies, when it arrives, and who
goes first when several want one server at the same instant."""

from __future__ import annotations

import numpy as np
import pytest

from synth.timing import CONNECTION, DEFAULT, IDEAL, Network
from synth.timing.engine import Jobs, Started, arcs_by_source, run_jobs
from topologies.builders import line, switch
from topologies.model import Link, Topology

MB = 1e3  # bytes per microsecond at 1 GB/s


def _graph(
    network: Network,
    jobs: list[tuple[int, float, tuple[int, int] | None, int]],
    nbytes: float | list[float],
    arcs: tuple[tuple[int, int, float], ...] = (),
) -> Jobs:
    """``(job, ready, (src, dst) or None, priority)`` jobs of ``nbytes`` each (or each its own) and
    ``(source, target, after)`` arcs; an id between them that is not listed never starts (it
    waits for an arc that is not there), so ids keep their place in the tie rule."""
    size = max(job for job, *_ in jobs) + 1
    sizes = nbytes if isinstance(nbytes, list) else [nbytes] * len(jobs)
    transfers = [network.transfer(*link, b) for (_, _, link, _), b in zip(jobs, sizes, strict=True) if link]
    transfer, priority = np.full(size, -1), np.zeros(size, np.int64)
    waits, ready = np.ones(size, np.int64), np.zeros(size)
    made = 0
    for job, at, link, prio in jobs:
        waits[job], ready[job], priority[job] = 0, at, prio
        if link is not None:
            transfer[job], made = made, made + 1
    for _, target, _ in arcs:
        waits[target] += 1
    source, target, after = (np.array(column) for column in zip(*arcs, strict=True)) if arcs else ([], [], [])
    return Jobs(transfers, transfer, priority, waits, ready, *arcs_by_source(source, target, after, size))


def _run(network: Network, jobs: list, nbytes: float | list[float], **given: object) -> dict[int, float]:
    """Start ``jobs`` (:func:`_graph`) on ``network``; job -> start time, for those that start."""
    started = run_jobs(network, _graph(network, jobs, nbytes, **given))
    return {job: float(at) for job, at in enumerate(started.starts) if not np.isnan(at)}


def test_a_transfer_holds_each_edge_of_its_path_and_arrives_alpha_plus_bytes_over_bandwidth():
    topo = switch(3, 25.0, 0.7)  # rank -> switch -> rank: two edges of 25 GB/s, 0.35 us each
    network = Network(topo, IDEAL)
    t = network.transfer(0, 1, 1e6)
    assert [network.edges[e] for e, _ in t.path] == [(0, "switch"), ("switch", 1)]
    assert [hold for _, hold in t.path] == pytest.approx([1e6 / (25.0 * MB)] * 2)
    assert t.busy_us == pytest.approx(1e6 / (25.0 * MB))
    assert t.delay_us == pytest.approx(0.7 + 1e6 / (25.0 * MB))
    assert t.delay_us == IDEAL.delay_us(topo.logical().links[(0, 1)], 1e6)


def test_a_switch_port_is_shared_and_alpha_occupies_nothing():
    """Two senders into rank 2's port: the second starts when the first's bytes have passed, not
    when they arrive."""
    network = Network(switch(3, 25.0, 0.7), IDEAL)
    starts = _run(network, [(0, 0.0, (0, 2), 0), (1, 0.0, (1, 2), 0)], 1e6)
    assert starts == {0: 0.0, 1: pytest.approx(40.0)}


def test_an_edge_with_count_servers_carries_count_transfers_at_once():
    doubled = Topology.build("pair", 2, {(0, 1): Link(25.0, 0.7, count=2), (1, 0): Link(25.0, 0.7, count=2)})
    network = Network(doubled, IDEAL)
    starts = _run(network, [(j, 0.0, (0, 1), j) for j in range(3)], 1e6)
    assert starts == {0: 0.0, 1: 0.0, 2: pytest.approx(40.0)}


def test_a_job_takes_the_server_that_frees_first():
    """Two parallel links: 40 us and 20 us transfers take both; the next starts when the shorter
    frees (20 us) on that link, the one after when the longer frees (40 us), the last at 60 us."""
    doubled = Topology.build("pair", 2, {(0, 1): Link(25.0, 0.7, count=2), (1, 0): Link(25.0, 0.7, count=2)})
    network = Network(doubled, IDEAL)
    starts = _run(network, [(job, 0.0, (0, 1), job) for job in range(5)], [1e6, 0.5e6, 1e6, 1e6, 1e6])
    assert starts == pytest.approx({0: 0.0, 1: 0.0, 2: 20.0, 3: 40.0, 4: 60.0})


def test_priority_first_then_the_longest_wait_then_the_job_id():
    """Rank 0's link is busy until 40 us; three jobs wait for it: job 1 since 0 us, job 2 since 10 us,
    job 3 since 10 us with a better priority. At 40 us job 3 goes (priority), then job 1 (it has
    waited longest), then job 2."""
    network = Network(line(2, 25.0, 0.7), IDEAL)
    jobs = [(0, 0.0, (0, 1), 0), (1, 0.0, (0, 1), 5), (2, 10.0, (0, 1), 5), (3, 10.0, (0, 1), 4)]
    starts = _run(network, jobs, 1e6)
    assert sorted(starts, key=starts.__getitem__) == [0, 3, 1, 2]
    equal = [(0, 0.0, (0, 1), 0), (7, 0.0, (0, 1), 0), (2, 10.0, (0, 1), 0)]
    starts = _run(network, equal, 1e6)
    assert starts[7] < starts[2]  # job 7 waited longer; its larger id does not matter


def test_a_job_ready_at_the_instant_being_decided_competes_in_it():
    """Job 0 starts at 0 and enables job 2 at once (a zero-time step, as a receive is); job 2 has a
    better priority than job 1, which was ready at 0 too, so it takes the link first."""
    network = Network(line(3, 25.0, 0.7), IDEAL)
    jobs = [(0, 0.0, None, 0), (1, 0.0, (1, 2), 1), (2, 0.0, (1, 2), 0)]
    starts = _run(network, jobs, 1e6, arcs=((0, 2, 0.0),))
    assert starts == {0: 0.0, 2: 0.0, 1: pytest.approx(40.0)}
    # an arc giving it a later ready time leaves the link to job 1 at 0 us
    assert _run(network, jobs, 1e6, arcs=((0, 2, 1.0),)) == {0: 0.0, 1: 0.0, 2: pytest.approx(40.0)}


def test_arcs_give_start_plus_after_and_nodes_pass_the_latest_on_at_once():
    """Job 2 waits for job 0's start + 5 us and job 1's start + 30 us (the later); job 3 waits
    through node 4 (ids past the jobs), which waits for jobs 0 and 1 at + 10 and + 20 us and gives
    its ready time + 1 us on; job 5 waits for a job that never starts and never starts either."""
    network = Network(line(3, 25.0, 0.7), IDEAL)
    ready = np.zeros(5)
    ready[1] = 2.0  # job 1 is ready at 2 us
    source, target, after = [0, 1, 0, 1, 4], [2, 2, 4, 4, 3], [5.0, 30.0, 10.0, 20.0, 1.0]
    waits = np.bincount(target, minlength=5)
    jobs = Jobs([], np.full(4, -1), np.zeros(4, np.int64), waits, ready, *arcs_by_source(source, target, after, 5))
    started = run_jobs(network, jobs)
    assert started.starts.tolist() == [0.0, 2.0, 32.0, 23.0]
    one_arc = arcs_by_source([0], [1], [0.0], 2)
    never = Jobs([], np.full(2, -1), np.zeros(2, np.int64), np.array([1, 1]), np.zeros(2), *one_arc)
    assert np.isnan(run_jobs(network, never).starts).all()
    assert run_jobs(network, never).order.tolist() == [-1, -1]


def test_the_server_that_carried_each_job_is_recorded():
    network = Network(switch(3, 25.0, 0.7), IDEAL)
    started = run_jobs(network, _graph(network, [(0, 0.0, (0, 2), 0), (1, 0.0, (1, 2), 1)], 1e6), record=True)
    assert isinstance(started, Started)
    assert started.used[(("switch", 2), 0)] == [0, 1]
    assert started.used[((0, "switch"), 0)] == [0]
    assert started.order.tolist() == [0, 1]


def test_a_connection_is_per_channel_where_the_channel_is_known():
    """The IR simulator knows each send's channel: a channel's connection is one FIFO driven by one
    threadblock (one server), and two channels to one peer are two connections sharing the edges.
    An Algorithm has no channels: its connection ``src -> dst`` has a server per parallel link."""
    doubled = Topology.build("pair", 2, {(0, 1): Link(25.0, 0.7, count=2), (1, 0): Link(25.0, 0.7, count=2)})
    network = Network(doubled, DEFAULT)

    def connection(t):
        (rid,) = [e for e, _ in t.path if network.edges[e][0] == CONNECTION]
        return network.edges[rid], network.servers[rid]

    on = [connection(network.transfer(0, 1, 1e6, channel=c)) for c in (0, 1)]
    assert on == [((CONNECTION, 0, 1, 0), 1), ((CONNECTION, 0, 1, 1), 1)]
    assert connection(network.transfer(0, 1, 1e6)) == ((CONNECTION, 0, 1), 2)


def test_networks_of_one_topology_time_each_transfer_in_their_own_model():
    """Networks of one topology share what their transfers cost per model (the Algorithm model and
    the IR simulator ask the same ones): a network in another model, made after, keeps its own."""
    topo = switch(3, 25.0, 0.7)
    link = topo.logical().links[(0, 1)]
    for params in (IDEAL, DEFAULT, IDEAL):
        t = Network(topo, params).transfer(0, 1, 1e6)
        assert t.delay_us == params.delay_us(link, 1e6)
        assert [hold for _, hold in t.path[:2]] == [params.hold_us(25.0, 1e6)] * 2


def test_one_server_edges_and_a_two_server_connection_in_one_run():
    """The calibrated model's connection over two parallel links carries two sends at once while the
    links themselves (two servers each) do too: three sends of one size, the third after the first."""
    doubled = Topology.build("pair", 2, {(0, 1): Link(25.0, 0.7, count=2), (1, 0): Link(25.0, 0.7, count=2)})
    network = Network(doubled, DEFAULT)
    t = network.transfer(0, 1, 1e6)
    starts = _run(network, [(j, 0.0, (0, 1), j) for j in range(3)], 1e6)
    assert starts == {0: 0.0, 1: 0.0, 2: t.busy_us}


@pytest.mark.parametrize("collective", ["allreduce", "reducescatter"])
def test_the_algorithm_models_sorted_dependencies_are_the_loops(collective):
    # the Algorithm model matches each send to the earlier-step writes to the slot it reads by
    # sorting (synth.cost._dependencies); sends out of step order keep the loop: both give the
    # same waits and dependents, alone and merged two to a call
    import importlib

    from synth.baselines import make_baseline
    from synth.collectives import make_collective
    from topologies.builders import ring

    cost = importlib.import_module("synth.cost")
    topo = ring(4, 25.0, 0.7)
    algo = make_baseline("ring", topo, make_collective(collective, 4, 4))
    sends = [(k, s) for k, step in enumerate(algo.steps) for s in step.sends]
    for order in (sends, sends[::-1]):
        columns = cost._columns(order)
        for servers in (None, lambda src, dst: 2):
            groups, group_of = cost._groups(order, servers, columns)
            waits, dependents = _through_nodes(*cost._dependencies(order, groups, group_of, columns), len(groups))
            assert (waits, dependents) == _through_nodes(*cost._dependencies_in_order(order, groups, group_of), len(groups))
            assert order is not sends or sum(waits) > 0
    for params in (IDEAL, DEFAULT):  # and the model times the sends alike either way
        network = Network(topo, params)
        shape = cost._shape(sends, network, False)
        loop = (*shape[:2], *cost._dependencies_in_order(sends, shape[0], shape[1]), *shape[5:])
        assert cost._run(sends, network, 1e6, shape, None) == cost._run(sends, network, 1e6, loop, None)


def _through_nodes(
    waits: np.ndarray, arcs_from: np.ndarray, arc_to: np.ndarray, size: int
) -> tuple[list[int], list[list[int]]]:
    """The groups each group waits for, through the slots' nodes (ids from ``size`` on): how many
    per group, and per group the groups that wait for it."""
    assert int(waits.sum()) == len(arc_to)  # every wait is an arc's

    def reached(x: int) -> set[int]:
        targets = arc_to[arcs_from[x] : arcs_from[x + 1]].tolist()
        return {g for d in targets for g in ([d] if d < size else reached(d))}

    assert all(w > 0 for w in waits[size:])  # every node waits for a write
    after = [sorted(reached(g)) for g in range(size)]
    return [sum(g in a for a in after) for g in range(size)], after


def test_merged_sends_spread_round_robin_over_a_connections_parallel_links():
    # sends that cost time are merged per step, connection and recorded start, one call per
    # parallel link in turn (synth.cost._groups); groups are numbered in the order of their first send
    import importlib

    from synth.algorithm import Send

    cost = importlib.import_module("synth.cost")
    sends = [(0, Send(c, 0, 1)) for c in range(7)]
    sends += [(0, Send(7, 1, 0)), (0, Send(8, 0, 1, start_us=2.0)), (1, Send(9, 0, 1))]
    groups, group_of = cost._groups(sends, lambda src, dst: 3 if (src, dst) == (0, 1) else 1, cost._columns(sends))
    assert groups == [[0, 3, 6], [1, 4], [2, 5], [7], [8], [9]]
    assert group_of == [0, 1, 2, 0, 1, 2, 0, 3, 4, 5]
    assert cost._groups(sends, None, cost._columns(sends)) == ([[i] for i in range(10)], list(range(10)))


def test_a_graph_the_loop_cannot_run_is_refused_before_it_runs():
    # the compiled loop reads its arrays unchecked: an arc past the last job or a transfer not
    # given would read or write past them, so run_jobs refuses the graph first
    network = Network(line(2, 25.0, 0.7), IDEAL)
    t = network.transfer(0, 1, 1e6)
    good = _graph(network, [(0, 0.0, (0, 1), 0), (1, 0.0, (0, 1), 1)], 1e6)
    assert run_jobs(network, good).starts.tolist() == [0.0, 40.0]
    one = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1))  # priority, waits, ready
    past = Jobs([t], np.array([0]), *one, *arcs_by_source([0], [5], [0.0], 1))
    with pytest.raises(ValueError, match="arc targets"):
        run_jobs(network, past)
    missing = Jobs([t], np.array([1]), *one, *arcs_by_source([], [], [], 1))
    with pytest.raises(ValueError, match="transfers among those given"):
        run_jobs(network, missing)


def test_a_run_that_outgrows_its_room_for_events_runs_again_with_more(monkeypatch):
    # the compiled loop never reallocates: where more events are pending at once than the room
    # given, it stops and runs again with twice the room; the starts are those of a roomy run
    import synth.timing.engine as engine

    network = Network(switch(4, 25.0, 0.7), IDEAL)
    jobs = [(j, 0.5 * j, (j % 3, 3), j % 2) for j in range(12)]
    arcs = tuple((j, j + 3, 1.0) for j in range(9))
    roomy = _run(network, jobs, 1e6, arcs=arcs)
    tries: list[int] = []
    run_loop = engine.run_loop
    monkeypatch.setattr(engine, "_events_room", lambda jobs, servers: 1)
    monkeypatch.setattr(engine, "run_loop", lambda *args: tries.append(args[-1]) or run_loop(*args))
    assert _run(network, jobs, 1e6, arcs=arcs) == roomy
    assert tries[:3] == [1, 2, 4] and len(roomy) == 12
