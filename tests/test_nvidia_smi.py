"""``nvidia-smi topo -m`` parsing, on a table pasted from a DGX-1."""

from __future__ import annotations

import pytest

import topologies as T
from topologies import TopologyError, isomorphisms, parse_nvidia_smi_topo

DGX1_TOPO_M = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tmlx5_0\tCPU Affinity
GPU0\t X \tNV1\tNV1\tNV2\tNV2\tSYS\tSYS\tSYS\tPIX\t0-19,40-59
GPU1\tNV1\t X \tNV2\tNV1\tSYS\tNV2\tSYS\tSYS\tPIX\t0-19,40-59
GPU2\tNV1\tNV2\t X \tNV2\tSYS\tSYS\tNV1\tSYS\tPHB\t0-19,40-59
GPU3\tNV2\tNV1\tNV2\t X \tSYS\tSYS\tSYS\tNV1\tPHB\t0-19,40-59
GPU4\tNV2\tSYS\tSYS\tSYS\t X \tNV1\tNV1\tNV2\tSYS\t20-39,60-79
GPU5\tSYS\tNV2\tSYS\tSYS\tNV1\t X \tNV2\tNV1\tSYS\t20-39,60-79
GPU6\tSYS\tSYS\tNV1\tSYS\tNV1\tNV2\t X \tNV2\tSYS\t20-39,60-79
GPU7\tSYS\tSYS\tSYS\tNV1\tNV2\tNV1\tNV2\t X \tSYS\t20-39,60-79
mlx5_0\tPIX\tPIX\tPHB\tPHB\tSYS\tSYS\tSYS\tSYS\t X \t

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_dgx1_table_parses_to_the_shipped_dgx1_up_to_numbering():
    topo = parse_nvidia_smi_topo(DGX1_TOPO_M, name="dgx1")
    assert topo.num_ranks == 8
    assert topo.link(0, 3).count == 2 and topo.link(0, 1).count == 1 and topo.link(0, 5) is None
    assert sum(lk.count for s, _, lk in topo.links() if s == 0) == 6
    perms = list(isomorphisms(topo, T.load("dgx1")))
    assert len(perms) == 4  # isomorphic, with DGX-1's 4 symmetries


def test_pcie_option_joins_gpus_without_nvlink():
    text = "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n"
    with pytest.raises(TopologyError, match="pcie"):
        parse_nvidia_smi_topo(text)
    topo = parse_nvidia_smi_topo(text, pcie_GBps=16.0)
    assert topo.logical().links[(0, 1)].path == (0, "pcie", 1)


def test_garbage_is_one_clear_error():
    with pytest.raises(TopologyError, match="nvidia-smi topo -m"):
        parse_nvidia_smi_topo("no table here")


def test_cli_detect_from_a_file(tmp_path, cli):
    src = tmp_path / "topo.txt"
    src.write_text(DGX1_TOPO_M)
    out = tmp_path / "mine.json"
    proc = cli("topo", "detect", str(src), "-o", str(out), "--name", "mine")
    assert proc.returncode == 0, proc.stderr
    assert T.load(str(out)).num_ranks == 8
    again = cli("topo", "detect", str(src), "-o", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
