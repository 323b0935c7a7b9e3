"""Build a topology from the matrix that ``nvidia-smi topo -m`` prints.

Each ``NV#`` cell is a bond of # NVLinks between two GPUs; other cells (SYS, PHB, PIX, ...) are
PCIe paths, which this parser models only if asked (one shared PCIe switch).
"""

from __future__ import annotations

import re
from dataclasses import replace

from topologies.errors import TopologyError
from topologies.limits import COUNT_MAX, bandwidth_problem, check_links, check_ranks, count_problem
from topologies.model import Link, Topology

__all__ = ["parse_nvidia_smi_topo"]

_NV = re.compile(r"^NV([0-9]+)$")


def parse_nvidia_smi_topo(
    text: str,
    name: str = "detected",
    nvlink_GBps: float = 25.0,
    nvlink_alpha_us: float = 0.7,
    pcie_GBps: float | None = None,
    where: str = "<nvidia-smi topo -m>",
) -> Topology:
    """Parse the GPU rows of ``nvidia-smi topo -m``.

    ``nvlink_GBps`` is the rate of one NVLink per direction (25 for V100, 25 for A100 links, 25
    for H100 links as well). With ``pcie_GBps``, every GPU also joins one PCIe switch at that rate.
    """
    for field, rate in (("nvlink_GBps", nvlink_GBps), ("pcie_GBps", pcie_GBps)):
        expected = None if rate is None else bandwidth_problem(rate)  # as the topology format's
        if expected:
            raise TopologyError(f"{where}: {field}: expected {expected}, got {rate:g}")
    rows = _matrix(text, where)
    n = len(rows)
    links = _nvlinks(rows, where, Link(nvlink_GBps, nvlink_alpha_us))
    switches = {}
    if pcie_GBps is not None:
        switches["pcie"] = "pcie"
        for r in range(n):
            links[(r, "pcie")] = links[("pcie", r)] = Link(pcie_GBps, 1.5)
    try:
        return Topology.build(
            name,
            n,
            links,
            switches,
            where=where,
            description=f"{n} GPUs detected from nvidia-smi topo -m",
            source=f"nvidia-smi topo -m; {nvlink_GBps} GB/s per NVLink per direction",
        )
    except TopologyError as exc:
        if pcie_GBps is None:
            raise TopologyError(
                f"{exc}; some GPUs have no NVLink path: pass a PCIe rate (--pcie-GBps) to join them"
            ) from None
        raise


def _matrix(text: str, where: str) -> list[list[str]]:
    """The GPU cells of each GPU row (row ``i`` labelled ``GPUi``), as many rows as the header names GPUs."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header on a terminal
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    # the header is indented (its first cell is empty); rows start with their GPU label
    header = next((ln for ln in lines if ln[:1].isspace() and ln.split()[:1] == ["GPU0"]), None)
    rows = [ln for ln in lines if re.match(r"^GPU\d+\s", ln)]
    if header is None or not rows:
        raise TopologyError(
            f"{where}: expected the matrix of `nvidia-smi topo -m` (a header with GPU0 ... and rows GPU0 ...)"
        )
    n = sum(1 for c in _cells(header) if re.match(r"^GPU\d+$", c))  # empty cells match no GPU
    if len(rows) != n:
        raise TopologyError(f"{where}: header names {n} GPUs but there are {len(rows)} GPU rows")
    check_ranks(where, n)
    matrix = []
    for i, row in enumerate(rows):
        label, *cells = _cells(row)
        if label != f"GPU{i}":
            raise TopologyError(f"{where}: row {i + 1}: expected GPU{i}, got {label}")
        if len(cells) < n:
            raise TopologyError(f"{where}: row GPU{i}: expected {n} GPU cells, got {len(cells)}")
        matrix.append(cells[:n])
    return matrix


def _cells(line: str) -> list[str]:
    """A line's cells: tab-separated where it has tabs, else split at spaces."""
    return [c.strip() for c in (line.split("\t") if "\t" in line else line.split())]


def _nvlinks(rows: list[list[str]], where: str, nvlink: Link) -> dict:
    """``{(i, j): Link}`` for every ``NV#`` cell (a bond of # links), the matrix symmetric."""
    links: dict = {}
    for i, cells in enumerate(rows):
        for j, cell in enumerate(cells):
            if i == j:
                if cell != "X":
                    raise TopologyError(
                        f"{where}: row GPU{i} column GPU{j}: expected X on the diagonal, got {cell}"
                    )
                continue
            match = _NV.match(cell)
            if match:
                bond = int(match[1]) if len(match[1]) <= 6 else COUNT_MAX + 1  # no 5,000-digit int
                if count_problem(bond):
                    raise TopologyError(
                        f"{where}: row GPU{i} column GPU{j}: expected NV1 .. NV{COUNT_MAX}, got {cell[:20]}"
                    )
                links[(i, j)] = replace(nvlink, count=bond)
        check_links(where, len(links))
    for (i, j), link in links.items():
        if links.get((j, i)) != link:
            raise TopologyError(f"{where}: GPU{i}-GPU{j}: the matrix is not symmetric")
    return links
