"""``xccl topo list | show NAME | check FILE | detect [FILE]``."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from typing import TYPE_CHECKING

from topologies.errors import TopologyError
from xccl.cli.output import print_json, print_table

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["register"]


def _summary_row(topo: Topology) -> list:
    return [
        topo.name,
        topo.num_ranks,
        topo.num_machines,
        len(topo.switches),
        topo.num_links,
        len(topo.logical().links),
        topo.description,
    ]


def cmd_list(args: argparse.Namespace) -> int:
    from topologies import FAMILIES, load, shipped_machines, topology_to_dict

    machines = [load(name) for name in shipped_machines()]
    if args.json:
        print_json(
            {
                "machines": [topology_to_dict(t) | {"links": t.num_links} for t in machines],
                "families": list(FAMILIES),
            }
        )
        return 0
    print_table(
        ["name", "ranks", "machines", "switches", "links", "rank pairs", "description"],
        [_summary_row(t) for t in machines],
    )
    print()
    print("multi-machine variants: <machine>x<k> for machines with NICs, e.g. ndv2x2, dgx2x2, dgx-a100x8")
    print("families: " + ", ".join(f"{f}:N" if f != "torus" else "torus:AxB" for f in FAMILIES))
    return 0


def _show(topo: Topology) -> None:
    print(
        f"{topo.name}: {topo.num_ranks} ranks on {topo.num_machines} machine(s), {len(topo.switches)} switch(es)"
    )
    if topo.description:
        print(f"  {topo.description}")
    if topo.source:
        print(f"  source: {topo.source}")
    rows = []
    capacity = topo.chunk_capacity()
    for (src, dst), link in sorted(topo.logical().links.items()):
        via = " > ".join(str(v) for v in link.path[1:-1]) or "direct"
        cap = capacity.pair(src, dst)
        rows.append([src, dst, f"{link.bandwidth_GBps:g}", f"{link.alpha_us:g}", cap, via])
    print()
    print_table(["src", "dst", "GB/s", "alpha_us", "chunks/round", "via"], rows, title="rank-to-rank links:")


def cmd_show(args: argparse.Namespace) -> int:
    from topologies import dump_topology, load

    topo = load(args.name)
    if args.json:
        print(dump_topology(topo), end="")
    else:
        _show(topo)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from topologies import load_topology_file

    topo = load_topology_file(args.file)
    print(
        f"{args.file}: ok: {topo.name}, {topo.num_ranks} ranks, {topo.num_machines} machine(s), "
        f"{len(topo.switches)} switch(es), {topo.num_links} links, every rank reaches every other"
    )
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    from common.files import read_text, save_text
    from topologies import dump_topology, parse_nvidia_smi_topo

    if args.file:
        text = read_text(args.file, TopologyError)
        where = args.file
    else:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            raise TopologyError(
                "nvidia-smi not found: run `nvidia-smi topo -m > topo.txt` on the machine and pass topo.txt"
            )
        text = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, check=False).stdout
        where = "nvidia-smi topo -m"
    topo = parse_nvidia_smi_topo(
        text, name=args.name, nvlink_GBps=args.nvlink_GBps, pcie_GBps=args.pcie_GBps, where=where
    )
    if args.output:
        save_text(args.output, dump_topology(topo), force=args.force)
        print(f"wrote {args.output}: {topo.num_ranks} GPUs, {topo.num_links} links")
    else:
        print(dump_topology(topo), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    topo = sub.add_parser("topo", help="list, show, check and detect topologies")
    tsub = topo.add_subparsers(dest="topo_command", required=True, metavar="{list,show,check,detect}")

    p = tsub.add_parser("list", help="shipped machines and families")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = tsub.add_parser("show", help="links of a topology (name or file)")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="print the topology JSON")
    p.set_defaults(func=cmd_show)

    p = tsub.add_parser("check", help="validate a topology JSON file")
    p.add_argument("file")
    p.set_defaults(func=cmd_check)

    p = tsub.add_parser(
        "detect", help="build a topology from `nvidia-smi topo -m` (run now, or saved in FILE)"
    )
    p.add_argument("file", nargs="?")
    p.add_argument("--name", default="detected")
    p.add_argument(
        "--nvlink-GBps", dest="nvlink_GBps", type=float, default=25.0, help="GB/s per NVLink per direction"
    )
    p.add_argument(
        "--pcie-GBps",
        dest="pcie_GBps",
        type=float,
        default=None,
        help="also join all GPUs through PCIe at this rate",
    )
    p.add_argument("-o", "--output")
    p.add_argument("-f", "--force", action="store_true")
    p.set_defaults(func=cmd_detect)
