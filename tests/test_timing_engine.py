"""The timing engine's rules (``synth.timing``): what a transfer occupies, when it arrives, and who
goes first when several want one server at the same instant."""

from __future__ import annotations

import pytest

from synth.timing import CONNECTION, DEFAULT, IDEAL, Engine, Network
from topologies.builders import line, switch
from topologies.model import Link, Topology

MB = 1e3  # bytes per microsecond at 1 GB/s


def _run(network: Network, jobs: list[tuple[int, float, tuple[int, int], int]], nbytes: float) -> dict:
    """Start ``(job, ready, (src, dst), priority)`` jobs on ``network``; job -> start time."""
    engine = Engine(network)
    for job, ready, (src, dst), priority in jobs:
        engine.submit(job, ready, network.transfer(src, dst, nbytes), priority)
    starts: dict[int, float] = {}
    engine.run(lambda job, at: starts.__setitem__(job, at))
    return starts


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
    engine = Engine(network)
    for job, nbytes in enumerate([1e6, 0.5e6, 1e6, 1e6, 1e6]):
        engine.submit(job, 0.0, network.transfer(0, 1, nbytes), job)
    starts: dict[int, float] = {}
    engine.run(lambda job, at: starts.__setitem__(job, at))
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
    engine = Engine(network)
    starts: dict[int, float] = {}

    def on_start(job: int, at: float) -> None:
        starts[job] = at
        if job == 0:
            engine.submit(2, at, network.transfer(1, 2, 1e6), 0)

    engine.submit(0, 0.0, None, 0)
    engine.submit(1, 0.0, network.transfer(1, 2, 1e6), 1)
    engine.run(on_start)
    assert starts == {0: 0.0, 2: 0.0, 1: pytest.approx(40.0)}


def test_the_server_that_carried_each_job_is_recorded():
    network = Network(switch(3, 25.0, 0.7), IDEAL)
    engine = Engine(network, record=True)
    for job, src in ((0, 0), (1, 1)):
        engine.submit(job, 0.0, network.transfer(src, 2, 1e6), job)
    engine.run(lambda job, at: None)
    assert engine.used[(("switch", 2), 0)] == [0, 1]


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
        for servers in (None, lambda src, dst: 2):
            groups, group_of = cost._groups(order, servers)
            waits, dependents = _through_nodes(*cost._dependencies(order, groups, group_of), len(groups))
            assert (waits, dependents) == cost._dependencies_in_order(order, groups, group_of)
            assert order is not sends or sum(waits) > 0
    for params in (IDEAL, DEFAULT):  # and the model times the sends alike either way
        network = Network(topo, params)
        shape = cost._shape(sends, network, False)
        loop = (*shape[:2], *cost._dependencies_in_order(sends, shape[0], shape[1]), *shape[4:])
        assert cost._run(sends, network, 1e6, shape, None) == cost._run(sends, network, 1e6, loop, None)


def _through_nodes(
    waits: list[int], dependents: list[list[int]], size: int
) -> tuple[list[int], list[list[int]]]:
    """The groups each group waits for, through the slots' nodes (ids from ``size`` on), as the
    loop's form: how many per group, and per group the groups that wait for it."""

    def reached(x: int) -> set[int]:
        return {g for d in dependents[x] for g in ([d] if d < size else reached(d))}

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
    groups, group_of = cost._groups(sends, lambda src, dst: 3 if (src, dst) == (0, 1) else 1)
    assert groups == [[0, 3, 6], [1, 4], [2, 5], [7], [8], [9]]
    assert group_of == [0, 1, 2, 0, 1, 2, 0, 3, 4, 5]
    assert cost._groups(sends, None) == ([[i] for i in range(10)], list(range(10)))
