"""``xccl sketch list|show|check``: the shipped communication sketches, and checking one against a topology."""

from __future__ import annotations

import argparse

from xccl.cli.output import print_json, print_table

__all__ = ["register"]


def cmd_list(args: argparse.Namespace) -> int:
    from sketches import load_sketch, shipped_sketches

    rows = []
    for name in shipped_sketches():
        s = load_sketch(name)
        inter = s.internode.connections if s.internode else "-"
        if not isinstance(inter, str):
            inter = "explicit"
        sym = " ".join(f"[{o},{z}]" for o, z in s.symmetry_offsets) or "-"
        rows.append([name, s.topology or "-", s.intranode.strategy, inter, sym, s.chunkup or "auto"])
    print_table(["sketch", "topology", "intranode", "relay", "symmetry", "chunkup"], rows)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from sketches import load_sketch, sketch_to_dict

    sketch = load_sketch(args.sketch)
    if args.json:
        print_json(sketch_to_dict(sketch))
        return 0
    print(f"{sketch.name}  ({sketch.where})")
    if sketch.comment:
        print(f"  {sketch.comment}")
    doc = sketch_to_dict(sketch)
    for key in ("topology", "intranode", "internode", "symmetry_offsets", "chunkup", "target_size"):
        if key in doc:
            print(f"  {key}: {doc[key]}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from sketches import SketchError, load_sketch, restrict
    from topologies import TopologyError, load

    sketch = load_sketch(args.sketch)
    if args.topology:
        topo = load(args.topology)
    elif sketch.topology is None:
        raise SketchError(f"{sketch.where}: topology: the sketch names none; pass --topology")
    else:
        try:
            topo = load(sketch.topology)
        except TopologyError:  # a name only, e.g. of the user's own topology file
            raise SketchError(
                f"{sketch.where}: topology: {sketch.topology!r} is not a shipped topology; "
                f"pass --topology FILE"
            ) from None
    r = restrict(sketch, topo)
    relay = sum(1 for p in r.links if r.crossing(p))
    print(
        f"{sketch.where}: ok on {topo.name}: {len(r.links) - relay} intra-machine and {relay} relay links allowed, "
        f"{len(r.group)} symmetries"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sketch", help="communication sketches for MILP synthesis: list, show, check")
    cmds = p.add_subparsers(dest="sketch_command", required=True, metavar="ACTION")
    q = cmds.add_parser("list", help="the shipped sketches")
    q.set_defaults(func=cmd_list)
    q = cmds.add_parser("show", help="one sketch's fields and the idea behind it")
    q.add_argument("sketch", help="shipped sketch name or JSON file")
    q.add_argument("--json", action="store_true", help="print the JSON document")
    q.set_defaults(func=cmd_show)
    q = cmds.add_parser("check", help="validate a sketch against a topology (default: the one it names)")
    q.add_argument("sketch", help="shipped sketch name or JSON file")
    q.add_argument("--topology", "-t", help="topology to check against")
    q.set_defaults(func=cmd_check)
