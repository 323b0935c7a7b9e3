"""NCCL's own time model (synth.nccl) against the measured NCCL numbers of shared/reference/nccl.md
(section 3.1), and ``xccl nccl``."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error

import topologies as T
from synth.nccl import NcclModelError, nccl_time

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
WITHIN = 0.15
"""The issue's bar: NCCL's model within 15% of NCCL measured on the same machine."""


@pytest.mark.parametrize(
    ("name", "coll", "size", "measured_us"),
    [
        ("dgx-a100", "allgather", KiB, 12.53),  # 8xA100 NDmv4, NCCL 2.17.1 (microsoft/mscclpp docs)
        ("dgx-h100", "allgather", KiB, 9.54),  # 8xH100 ND H100 v5, NCCL 2.18.3 (Azure/msccl docs)
        ("dgx-h100", "allgather", MiB, 18.33),
        ("dgx-h100", "allgather", GiB, 2663.8),
    ],
)
def test_time_within_15_percent_of_measured_nccl(name, coll, size, measured_us):
    est = nccl_time(T.load(name), coll, size)
    assert est.time_us == pytest.approx(measured_us, rel=WITHIN)


@pytest.mark.parametrize(
    ("name", "coll", "measured_busbw", "algorithm"),
    [
        ("dgx-a100", "allgather", 253.59, "Ring"),
        ("dgx-h100", "allreduce", 466.0, "NVLS"),  # NVLink SHARP on the NVSwitch
    ],
)
def test_busbw_within_15_percent_of_measured_nccl_at_1GiB(name, coll, measured_busbw, algorithm):
    est = nccl_time(T.load(name), coll, GiB)
    assert est.busbw_GBps == pytest.approx(measured_busbw, rel=WITHIN)
    assert (est.algorithm, est.protocol) == (algorithm, "Simple")


def test_protocol_moves_with_size_as_nccl_does():
    """LL at small sizes, Simple at large: NCCL's choice by the minimum of its table."""
    topo = T.load("dgx-h100")
    assert nccl_time(topo, "allgather", KiB).protocol == "LL"
    assert nccl_time(topo, "allgather", GiB).protocol == "Simple"


def test_reference_table_values():
    """Section 1.4 and 5.2 of the reference: 8-rank NVLink ring allgather latency 10.8 us (LL);
    dgx1 1 GiB 7861.6 us (Ring/Simple) with v2.30.7's 20 GB/s per NVLink, 7149.8 us with v2.12's 22."""
    dgx1 = T.load("dgx1")
    assert nccl_time(dgx1, "allgather", KiB).time_us == pytest.approx(10.8, abs=0.05)
    assert nccl_time(dgx1, "allgather", GiB).time_us == pytest.approx(7861.6, rel=0.001)
    assert nccl_time(dgx1, "allgather", GiB, version="2.12").time_us == pytest.approx(7149.8, rel=0.001)


def test_multi_machine_values_from_the_reference():
    assert nccl_time(T.load("ndv2x2"), "allgather", GiB).time_us == pytest.approx(83956, rel=0.001)
    assert nccl_time(T.load("dgx2x2"), "allgather", GiB).time_us == pytest.approx(10959.7, rel=0.001)


def test_the_model_refuses_what_it_does_not_cover():
    with pytest.raises(NcclModelError, match="alltoall"):
        nccl_time(T.load("dgx1"), "alltoall", KiB)
    with pytest.raises(NcclModelError, match="version"):
        nccl_time(T.load("dgx1"), "allgather", KiB, version="1.0")


def test_cli_labels_every_time_modeled(cli):
    proc = cli("nccl", "-t", "dgx-h100", "-C", "allgather", "-s", "1KiB,1MiB,1GiB")
    assert proc.returncode == 0, proc.stderr
    assert "modeled" in proc.stdout and "NCCL 2.30.7" in proc.stdout
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith(("1KiB", "1MiB", "1GiB"))]
    assert [r[1:3] for r in rows] == [["Ring", "LL"], ["Ring", "LL"], ["Ring", "Simple"]]


def test_cli_json_is_one_document(xccl):
    proc = xccl("nccl", "-t", "dgx-a100", "-C", "allreduce", "-s", "1GiB", "--json")
    doc = json.loads(proc.stdout)
    assert doc["rows"][0]["algorithm"] == "Ring" and doc["arch"] == "sm80"


def test_cli_bad_version_is_one_line(xccl):
    assert_one_line_error(
        xccl("nccl", "-t", "dgx1", "-C", "allgather", "--nccl-version", "9.9"), "9.9", "2.30.7"
    )
