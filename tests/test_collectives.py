"""Collectives: pre/postconditions, buffer layouts and duals."""

from __future__ import annotations

import pytest

from common.limits import LimitError
from synth.collectives import COLLECTIVES, CollectiveError, make_collective


@pytest.mark.parametrize("name", COLLECTIVES)
@pytest.mark.parametrize(("n", "c"), [(4, 1), (3, 2)])
def test_layouts_cover_every_chunk_once(name, n, c):
    coll = make_collective(
        name, n, c, root=1 if name in ("broadcast", "reduce", "gather", "scatter") else None
    )
    # every chunk sits in exactly the input slots of its source ranks
    placed = {}
    for r, slots in enumerate(coll.inputs):
        for cid in slots:
            if cid is not None:
                assert r in coll.chunks[cid].pre
                placed[cid] = placed.get(cid, 0) + 1
    assert set(placed) == set(range(len(coll.chunks)))
    # every output slot names an address some rank must end with there
    for r, slots in enumerate(coll.outputs):
        for addr in slots:
            if addr is not None:
                assert any(r in coll.chunks[cid].post for cid in coll.contributions[addr])
    assert coll.combining == (name in ("allreduce", "reducescatter", "reduce"))


def test_msccl_layouts():
    ag = make_collective("allgather", 4, 2)
    assert ag.inputs[2] == (4, 5) and ag.outputs[0] == tuple(range(8))
    a2a = make_collective("alltoall", 3, 1)
    # rank 1's output slot 2 holds what rank 2 had in its input slot 1
    cid = a2a.outputs[1][2]
    assert a2a.chunks[cid].pre == {2} and a2a.inputs[2][1] == cid
    rs = make_collective("reducescatter", 4, 1)
    assert rs.outputs[2] == (2,) and len(rs.contributions[2]) == 4
    ar = make_collective("allreduce", 4, 3)
    assert ar.num_addresses == 3 and all(len(s) == 4 for s in ar.contributions)
    assert ar.size_chunks == 3 and ag.size_chunks == 8 and rs.size_chunks == 4


def test_duals():
    assert make_collective("reducescatter", 8, 2).dual() == make_collective("allgather", 8, 2)
    assert make_collective("reduce", 8, 1, root=3).dual() == make_collective("broadcast", 8, 1, root=3)
    assert not make_collective("allreduce", 8).has_dual


def test_busbw_factors_are_nccl_tests():
    assert make_collective("allreduce", 8).busbw_factor == pytest.approx(14 / 8)
    assert make_collective("allgather", 8).busbw_factor == pytest.approx(7 / 8)
    assert make_collective("broadcast", 8).busbw_factor == 1.0


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(("bcast", 4), "unknown collective"), (("broadcast", 4, 1, 9), "root"), (("allgather", 4, 0), "chunks")],
)
def test_bad_parameters(args, fragment):
    with pytest.raises(CollectiveError, match=fragment):
        make_collective(*args)


def test_a_collective_made_again_is_described_once_and_judged_by_the_limits_in_force(monkeypatch):
    # xccl compile made the 512-rank allreduce twice (for the Algorithm and for its IR); the second
    # is the first object, but the limits are asked again: XCCL_MAX_CHUNKS may have changed
    first = make_collective("allreduce", 16, 4)
    assert make_collective("allreduce", 16, 4) is first
    assert make_collective("allreduce", 16, 2) is not first
    monkeypatch.setenv("XCCL_MAX_CHUNKS", "32")
    with pytest.raises(LimitError, match="XCCL_MAX_CHUNKS"):
        make_collective("allreduce", 16, 4)
