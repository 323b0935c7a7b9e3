"""``xccl baseline``, ``xccl verify``, ``xccl cost``, ``xccl bound``."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from common.units import format_size, parse_size
from xccl.cli.choices import BASELINE_NAMES, NCCL_ALGO_NAMES
from xccl.cli.common import (
    BEST,
    add_collective_args,
    add_model_args,
    add_output_args,
    collective_from_args,
    params_from_args,
    topology_from_args,
)
from xccl.cli.output import print_json, print_table, slow_stage

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from topologies.model import Topology

__all__ = ["register"]

DEFAULT_SIZES = ("1KiB", "1MiB", "1GiB")
ONE_RANK_NOTE = "one rank: nothing moves, every time is 0 us and bandwidths are unbounded (null)"
"""What ``--json`` says where a bandwidth is infinite, which JSON cannot write."""


def _finite_or_none(rows: list[dict]) -> tuple[list[dict], bool]:
    """The rows with every non-finite number as None, and whether there was one."""
    out = [
        {k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in r.items()} for r in rows
    ]
    return out, out != rows


def _with_note(doc: dict, rows: list[dict]) -> dict:
    clean, changed = _finite_or_none(rows)
    return {**doc, "rows": clean, **({"note": ONE_RANK_NOTE} if changed else {})}


def algorithm_topology(algo: Algorithm, override: str | Topology | None, where: str) -> Topology:
    """The topology an algorithm file names, or the one given with --topology."""
    from topologies import TopologyError, load

    if override:
        topo = load(override)
    else:
        try:
            topo = load(algo.topology)
        except TopologyError:
            raise TopologyError(
                f"{where}: topology {algo.topology!r} is not a shipped machine or family; pass --topology FILE"
            ) from None
    if topo.num_ranks != algo.collective.num_ranks:
        raise TopologyError(
            f"{where}: topology {topo.name} has {topo.num_ranks} ranks, the algorithm {algo.collective.num_ranks}"
        )
    return topo


def cmd_baseline(args: argparse.Namespace) -> int:
    from common.files import check_writable
    from synth.baselines import default_chunks, make_baseline
    from synth.errors import AlgorithmFormatError

    if args.output:
        check_writable(args.output, args.force, AlgorithmFormatError)
    topo = topology_from_args(args)
    chunks = args.chunks
    if chunks is None:
        chunks = default_chunks(args.kind, args.collective, topo.num_ranks, topo, args.algo)
    coll = collective_from_args(args, topo, chunks)
    with slow_stage(f"baseline {args.kind}: {coll.name} on {topo.num_ranks} ranks, built and verified"):
        algo = make_baseline(args.kind, topo, coll, args.algo)
    if args.output:
        with slow_stage(f"writing {args.output}"):
            algo.save(args.output, force=args.force)
        print(f"wrote {args.output}: {algo.name} (verified)")
    else:
        print(algo.describe())
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from synth.algorithm import Algorithm

    algo = Algorithm.load(args.file)
    topo = algorithm_topology(algo, args.topology, args.file)
    algo.verify(topo)
    print(
        f"{args.file}: ok: {algo.collective!r} on {topo.name} in {algo.num_steps} steps, "
        f"{algo.rounds} rounds, {algo.chunks} chunk(s) per rank, {algo.num_sends} sends"
    )
    return 0


def _timed(algo: Algorithm, topo: Topology, size: int, args: argparse.Namespace):
    """``algo`` timed in the model ``args`` name (``--protocol best``: the fastest protocol)."""
    from synth.cost import simulate, simulate_best

    if args.protocol == BEST and args.send_us is None:
        return simulate_best(algo, topo, size, args.model)
    return simulate(algo, topo, size, params_from_args(args))


def cost_rows(algo: Algorithm, topo: Topology, sizes: list[int], args: argparse.Namespace) -> list[dict]:
    """One row per size: SCCL's closed form, the modeled time (the model ``args`` names; with
    ``--protocol best`` the fastest protocol per size), the line-rate bound, and NCCL's two
    estimates (its layout in the same model, its own model) with the gain over each."""
    from synth.bounds import lower_bound_us
    from synth.cost import sccl_cost
    from synth.nccl.compare import nccl_reference

    rows = []
    for size in sizes:
        sccl = sccl_cost(algo, topo, size)
        sim = _timed(algo, topo, size, args)
        bound = lower_bound_us(topo, algo.collective, size)
        nccl = nccl_reference(
            topo, algo.collective, size, time_us=lambda a, size=size: _timed(a, topo, size, args).time_us
        )
        rows.append(
            {
                "size_bytes": size,
                "sccl_latency_us": sccl.latency_us,
                "sccl_bandwidth_us": sccl.bandwidth_us,
                "time_us": sim.time_us,
                "model": sim.model,
                "algbw_GBps": sim.algbw_GBps,
                "busbw_GBps": sim.busbw_GBps,
                "bound_us": bound,
                "of_bound": bound / sim.time_us if sim.time_us else 1.0,
                **nccl.fields(sim.time_us),
            }
        )
    return rows


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _cost_title(algo: Algorithm, topo: Topology, models: list[str], args: argparse.Namespace) -> str:
    what = " (textbook ring: one channel)" if algo.provenance.method == "baseline:ring" else ""
    model = models[0] if len(models) == 1 else args.model + ", fastest protocol"
    return (
        f"{algo.name} on {topo.name} (S={algo.num_steps}, R={algo.rounds}, C={algo.chunks}){what}; "
        f"modeled: {model}; "
        "NCCL layout: NCCL's channels in the same model; NCCL model: NCCL's own (modeled); "
        "gain = NCCL / ours; bound at line rate"
    )


def cmd_cost(args: argparse.Namespace) -> int:
    from synth.algorithm import Algorithm

    algo = Algorithm.load(args.file)
    topo = algorithm_topology(algo, args.topology, args.file)
    algo.verify(topo)
    sizes = [parse_size(s) for s in (args.size or DEFAULT_SIZES)]
    rows = cost_rows(algo, topo, sizes, args)
    if args.json:
        print_json(_with_note({"algorithm": algo.name, "topology": topo.name}, rows))
        return 0
    models = sorted({r["model"] for r in rows})
    print_table(
        [
            "size",
            "S*alpha us",
            "R/C*L*beta us",
            "modeled us",
            *(["model"] if len(models) > 1 else []),
            "algbw GB/s",
            "busbw GB/s",
            "bound us",
            "of bound",
            "NCCL layout us",
            "NCCL model us",
            "gain vs layout",
            "gain vs model",
        ],
        [
            [
                format_size(r["size_bytes"]),
                f"{r['sccl_latency_us']:.2f}",
                f"{r['sccl_bandwidth_us']:.2f}",
                f"{r['time_us']:.2f}",
                *([r["model"]] if len(models) > 1 else []),
                f"{r['algbw_GBps']:.2f}",
                f"{r['busbw_GBps']:.2f}",
                f"{r['bound_us']:.2f}",
                f"{100 * r['of_bound']:.0f}%",
                _cell(r["nccl_layout_us"], ".2f"),
                _cell(r["nccl_model_us"], ".2f"),
                _cell(r["gain_vs_nccl_layout"], ".2f") + ("x" if r["gain_vs_nccl_layout"] else ""),
                _cell(r["gain_vs_nccl_model"], ".2f") + ("x" if r["gain_vs_nccl_model"] else ""),
            ]
            for r in rows
        ],
        title=_cost_title(algo, topo, models, args),
    )
    return 0


def cmd_bound(args: argparse.Namespace) -> int:
    from synth.bounds import (
        bandwidth_bound_method,
        bandwidth_time_us,
        latency_time_us,
        rounds_per_chunk_bound,
        steps_lower_bound,
    )
    from synth.cost import algbw_GBps

    with slow_stage("loading the topology"):
        topo = topology_from_args(args)
    coll = collective_from_args(args, topo, chunks=1, lazy=True)  # the bounds never list its chunks
    with slow_stage(f"steps and latency bounds on {topo.num_ranks} ranks"):
        steps = steps_lower_bound(topo, coll)
        latency = latency_time_us(topo, coll)
    with slow_stage(f"bandwidth bounds on {topo.num_ranks} ranks"):
        rpc = rounds_per_chunk_bound(topo, coll)
        method = bandwidth_bound_method(topo, coll)
    sizes = [parse_size(s) for s in (args.size or DEFAULT_SIZES)]
    rows = []
    for size in sizes:
        bw = bandwidth_time_us(topo, coll, size)
        total = max(latency, bw)
        rows.append(
            {
                "size_bytes": size,
                "latency_us": latency,
                "bandwidth_us": bw,
                "bound_us": total,
                "algbw_GBps": algbw_GBps(size, total),
            }
        )
    if args.json:
        doc = {
            "topology": topo.name,
            "collective": coll.name,
            "steps": steps,
            "rounds_per_chunk": str(rpc),
            "bandwidth_bound": method,
        }
        print_json(_with_note(doc, rows))
        return 0
    print(f"{coll.name} on {topo.name} ({topo.num_ranks} ranks)")
    print(f"  steps lower bound:            {steps}")
    unit = topo.chunk_capacity().unit_GBps
    print(f"  rounds per chunk lower bound: {rpc}  (SCCL's integer model, {unit:g} GB/s per chunk per round)")
    print(f"  latency lower bound:          {latency:.2f} us")
    print("  (at line rate, no per-call or per-send cost: no timing model's schedule beats it)")
    print(f"  bandwidth lower bound from:   {method}")
    print()
    print_table(
        ["size", "latency us", "bandwidth us", "bound us", "max algbw GB/s"],
        [
            [
                format_size(r["size_bytes"]),
                f"{r['latency_us']:.2f}",
                f"{r['bandwidth_us']:.2f}",
                f"{r['bound_us']:.2f}",
                f"{r['algbw_GBps']:.2f}",
            ]
            for r in rows
        ],
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="build a baseline algorithm (ring, direct, nccl, ...) and verify it")
    p.add_argument("kind", choices=BASELINE_NAMES, metavar="KIND", help="one of %(choices)s")
    add_collective_args(p, chunks_default=None)
    p.add_argument(
        "--algo",
        choices=NCCL_ALGO_NAMES,
        metavar="ALGO",
        help="for nccl: NCCL's algorithm, one of %(choices)s (default auto: what NCCL runs at large sizes)",
    )
    add_output_args(p)
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser("verify", help="check that an algorithm file implements its collective")
    p.add_argument("file")
    p.add_argument("--topology", "-t", help="topology file, when the algorithm's is not shipped")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("cost", help="modeled time of an algorithm file at some sizes")
    p.add_argument("file")
    p.add_argument(
        "--size", "-s", action="append", help="buffer size (repeatable), e.g. 1MiB; default 1KiB 1MiB 1GiB"
    )
    p.add_argument("--topology", "-t", help="topology file, when the algorithm's is not shipped")
    add_model_args(p, best=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("bound", help="lower bounds of a collective on a topology")
    add_collective_args(p, chunks=False)
    p.add_argument("--size", "-s", action="append", help="buffer size (repeatable); default 1KiB 1MiB 1GiB")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bound)
