"""Scale: synthesis, bounds, NCCL and the XML tooling on 16 to 4096 GPUs of dgx-h100xK and dgx-a100xK.

Run: ``.venv/bin/python benchmarks/scale.py`` (``--help`` for the sizes, collectives and the
per-case time limit). Each case runs in a child process with a wall-clock limit (default 300 s, what
the issue's targets allow a case with its XML stages, and 600 s from 4096 GPUs, the issue's target
there) and prints, per stage, its wall time and the child's peak memory: the lower bound (``xccl bound``:
steps, latency and bandwidth bounds, and how the bandwidth bound was found), synthesis by the best
synthesizer at scale (``synth trees`` for allgather, reducescatter and allreduce, composed over
the machines (``--hierarchical``) from ``--compose-from`` GPUs; ``synth hierarchical``, the
rail-aligned alltoall), the Algorithm's modeled time at 1 GiB (ideal: the bound's line rates, as a
percentage of the bound; calibrated: absolute), then compile as ``xccl compile`` does (the choice of
``runtime.choice``: its variants compiled and timed at 1 GiB are in the compile time), write XML,
load it back, check it, simulate it, and last NCCL: its layout (``xccl baseline nccl``) timed in both models and its own
model (synth/nccl), each side's time modeled, as the gain over NCCL (NCCL's time over ours).
A stage that runs past the limit ends its row (``>LIMIT`` and the stages after it blank).
Progress goes to stderr; Ctrl-C or SIGTERM stops the running case and prints the rows that finished.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xccl.cli.output import format_table, progress

GPUS = (16, 64, 128, 512, 4096)
LIMIT_S = 300.0
LARGE_GPUS, LARGE_LIMIT_S = 4096, 600.0
"""The default per-case limit, and from how many GPUs the larger one. Below 4096 GPUs: what issue
17's targets allow one case, synthesis in 60 s (alltoall 120 s) and each of the five XML stages in
30 s, with the bound's and NCCL's stages (120 s stopped 64-GPU allreduces in their XML or NCCL
stage at load 5). From 4096: the issue's 10 minutes (the composed allgather takes about 135 s
there, its reducescatter and allreduce 260-300 s)."""


def limit_for(gpus: int, limit_s: float | None) -> float:
    """The per-case wall-clock limit: the one given, else the default for that many GPUs."""
    if limit_s is not None:
        return limit_s
    return LARGE_LIMIT_S if gpus >= LARGE_GPUS else LIMIT_S


MACHINES = ("dgx-h100", "dgx-a100")
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
SIZE = 1 << 30
XML_STAGES = ("compile", "write", "load", "check", "simulate")
STAGES = ("topology", "bound", "synth", "model", *XML_STAGES, "nccl")
METHOD = {"allgather": "trees", "reducescatter": "trees", "allreduce": "trees", "alltoall": "hierarchical"}
"""The best synthesizer at scale per collective."""
COMPOSE_FROM = 4096


def _peak_so_far() -> float:
    """This process's peak resident memory so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _report(stage: str, start: float, **extra) -> None:
    """One JSON line per finished stage: its seconds and the peak memory so far (MiB)."""
    print(
        json.dumps({"stage": stage, "s": time.perf_counter() - start, "peak_MiB": _peak_so_far(), **extra}),
        flush=True,
    )


def _synthesize(topo, collective: str, limit_s: float, compose: bool):
    """The best synthesizer's verified result (a :class:`~synth.trees.TreesResult`, or the
    rail-aligned alltoall held as arrays, :class:`~synth.baselines.rails.VerifiedRails`), and how
    it was made."""
    from synth.baselines.hierarchical import rail_alltoall
    from synth.trees import synthesize as trees_synthesize

    if METHOD[collective] == "trees":
        result = trees_synthesize(
            topo, collective, size_bytes=SIZE, time_limit_s=limit_s, hierarchical=compose
        )
        return result, "trees --hierarchical" if compose else "trees"
    return rail_alltoall(topo), METHOD[collective]


def _refuse_early(topo, collective: str, compose: bool) -> None:
    """The synthesizer's size limits, checked before the bound (minutes at 4096 GPUs): tree
    packing's sends, except a composed schedule's (arrays); the alltoall is held as arrays."""
    from synth.trees.synthesis import check_sends

    if METHOD[collective] == "trees" and not compose:
        check_sends(topo, collective)


def _model(made, topo) -> tuple[float, float]:
    """The modeled time at 1 GiB, ideal and calibrated (a composed schedule's from its parts,
    :func:`synth.trees.synthesis.modeled`; the held alltoall's from its parts,
    :func:`synth.baselines.rails_time.simulate_rails`: no Algorithm needed at 4096 GPUs)."""
    from synth.baselines.rails import VerifiedRails
    from synth.baselines.rails_time import simulate_rails
    from synth.timing import model_params
    from synth.trees.synthesis import modeled

    ideal, calibrated = model_params("ideal"), model_params("calibrated")
    timed = simulate_rails if isinstance(made, VerifiedRails) else modeled
    return timed(made, topo, SIZE, ideal).time_us, timed(made, topo, SIZE, calibrated).time_us


def _xml_stages(algo, topo) -> None:
    """Compile as ``xccl compile`` does (``runtime.choice.compile_fastest``: the variants the
    choice compiles and times at the recorded size are in the stage's time), write the XML, load it
    back, check it as ``xccl check`` does (the runtime's rules, the file's facts, then what it
    computes by symbolic execution: a row with a problem stops at ``check``) and simulate it
    (calibrated, as the Algorithm's ``calibrated us``), each reported."""
    from codegen.check import find_problems
    from codegen.formats import read_ir_facts, write_ir
    from codegen.semantics import find_wrong_result
    from runtime.choice import compile_fastest
    from runtime.sim import simulate as simulate_ir
    from synth.timing import model_params

    t = time.perf_counter()
    ir, choice = compile_fastest(algo, topo, dialect="azure")
    compiled = 1 if choice is None else 1 + len(choice.others_us)
    _report("compile", t, variants=compiled, kept=choice.variant.describe() if choice else "compiled once")
    t = time.perf_counter()
    text = write_ir(ir, "azure")
    _report("write", t, xml_MB=len(text) / 1e6)
    t = time.perf_counter()
    ir, facts = read_ir_facts(text, "<scale>")
    _report("load", t)
    t = time.perf_counter()
    problems = find_problems(ir, "azure", facts=facts)
    wrong = None if problems else find_wrong_result(ir)
    _report("check", t, problems=len(problems), wrong=None if wrong is None else str(wrong))
    if problems or wrong is not None:
        first = f"{len(problems)} problem(s), first: {problems[0]}" if problems else f"wrong result: {wrong}"
        raise Refused("check", first)
    t = time.perf_counter()
    ir_us = simulate_ir(ir, topo, SIZE, params=model_params("calibrated")).time_us
    _report("simulate", t, ir_us=ir_us)


def run_case(topology: str, collective: str, limit_s: float, compose: bool, with_xml: bool) -> None:
    """The child: every stage of one case, reported as it finishes; a refusal (a limit, a time the
    engine cannot give yet) ends the case with a ``refused`` line saying why, not a traceback."""
    from common.errors import XcclError

    try:
        _stages(topology, collective, limit_s, compose, with_xml)
    except Refused as exc:
        print(json.dumps({"stage": "refused", "at": exc.at, "why": exc.why, "peak_MiB": _peak_so_far()}), flush=True)
    except XcclError as exc:
        print(json.dumps({"stage": "refused", "why": str(exc), "peak_MiB": _peak_so_far()}), flush=True)


class Refused(Exception):
    """The stage a case ends at, and why (the row's "stopped at"): a limit refuses it, or its result
    fails its check."""

    def __init__(self, at: str, why: str) -> None:
        super().__init__(f"{at}: {why}")
        self.at, self.why = at, why


def _stages(topology: str, collective: str, limit_s: float, compose: bool, with_xml: bool) -> None:
    """The stages of one case (module docstring), each reported."""
    from common.errors import XcclError
    from synth.bounds import bandwidth_bound_method, lower_bound_us
    from synth.collectives import make_collective
    from synth.nccl.compare import nccl_layout_refusal, nccl_reference
    from synth.timing import model_params
    from topologies import load

    t = time.perf_counter()
    topo = load(topology)
    n = topo.num_ranks
    _report("topology", t)
    try:
        _refuse_early(topo, collective, compose)
    except XcclError as exc:
        raise Refused("synth", str(exc)) from None
    t = time.perf_counter()
    lazy = make_collective(collective, n, lazy=True)
    bound = lower_bound_us(topo, lazy, SIZE)
    _report("bound", t, bound_us=bound, how=bandwidth_bound_method(topo, lazy))
    t = time.perf_counter()
    made, method = _synthesize(topo, collective, limit_s, compose)
    _report("synth", t, method=method, sends=made.num_sends)
    t = time.perf_counter()
    times = _model(made, topo)
    _report("model", t, ideal_us=times[0], calibrated_us=times[1])
    whole, why = _whole(made)
    if with_xml:
        if whole is None:
            raise Refused("compile", f"an XML needs the Algorithm: {why}")
        _xml_stages(whole, topo)
    t = time.perf_counter()
    if whole is None:  # NCCL's layout has as many sends as ours: only NCCL's own model, where it has one
        from synth.nccl.model import COLLECTIVES, nccl_time

        est = nccl_time(topo, collective, SIZE).time_us if collective in COLLECTIVES else None
        _report("nccl", t, layout_us=None, layout_ideal_us=None, model_us=est)
        return
    calibrated, ideal = model_params("calibrated"), model_params("ideal")
    cal = nccl_reference(topo, lazy, SIZE, calibrated)
    line = nccl_reference(topo, lazy, SIZE, ideal)
    refused = nccl_layout_refusal(topo, lazy)
    _report(
        "nccl",
        t,
        layout_us=cal.layout_us,
        layout_ideal_us=line.layout_us,
        model_us=cal.model_us,
        layout_refused=refused,
    )


def _whole(made):
    """``made`` as an Algorithm, or None and why for a schedule held as arrays over a limit on
    the Algorithm (4096 GPUs: the composed allgather's 16.8 M sends, over XCCL_MAX_TREES_SENDS;
    the alltoall's 31.4 M, over XCCL_MAX_BASELINE_SENDS), which is verified and timed as arrays."""
    from common.limits import LimitError
    from synth.baselines.rails import VerifiedRails
    from synth.cost import sized

    try:
        if isinstance(made, VerifiedRails):  # with its size recorded, as ``xccl synth hierarchical`` writes it
            whole = made.algorithm()
            return replace(whole, provenance=sized(whole.provenance, SIZE)), ""
        return made.algorithm, ""
    except LimitError as exc:
        return None, str(exc)


def _cpu_s_of_children() -> float:
    """User and system CPU seconds of the children that have ended so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _peak_mib(pid: int) -> float | None:
    """A running process's peak resident memory so far (Linux's VmHWM), None where unreadable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    hwm = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(hwm[0]) / 1024 if hwm else None


def _child(
    topology: str, collective: str, limit_s: float, compose: bool, with_xml: bool
) -> tuple[dict, str | None]:
    """Run one case in a child; its stage reports (with ``case``: the child's CPU seconds and, if
    it was stopped at the limit, its peak memory then), and the stage it was stopped in (or None)."""
    cmd = [sys.executable, __file__, "--case", topology, collective, "--limit", str(limit_s)]
    cmd += (["--compose-from", "1"] if compose else []) + ([] if with_xml else ["--no-xml"])
    done: dict = {}
    case: dict = {}
    cpu = _cpu_s_of_children()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        deadline = time.monotonic() + limit_s
        try:
            out, err = child.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:  # what the stopped stage had used is in its row too
            case["peak_MiB"] = _peak_mib(child.pid)
            child.kill()
            out, err = child.communicate()
        except KeyboardInterrupt:
            child.kill()
            raise
        for line in out.splitlines():
            report = json.loads(line)
            done[report.pop("stage")] = report
    case["cpu_s"] = _cpu_s_of_children() - cpu
    done["case"] = case
    stages = STAGES if with_xml else tuple(s for s in STAGES if s not in XML_STAGES)
    refused = done.pop("refused", None)
    if refused is not None:  # what the refused stage had used is in its row too
        case["peak_MiB"] = refused.get("peak_MiB")
    stopped = next((s for s in stages if s not in done), None)
    if refused is not None:
        return done, f"{refused.get('at') or stopped}: {refused['why']}"
    if stopped is not None and time.monotonic() < deadline and child.returncode != 0:
        last = (err.strip().splitlines() or ["failed"])[-1]
        return done, f"{stopped}: {last[:60]}"
    return done, stopped and f"{stopped}: >{limit_s:g} s"


def _gain(nccl_us: float | None, ours_us: float | None) -> str:
    return f"{nccl_us / ours_us:.2f}x" if nccl_us and ours_us else ""


def _not_built(nccl: dict) -> str:
    """Where NCCL's layout was refused, the limit that refused it (``over XCCL_MAX_CHUNKS``)."""
    why = nccl.get("layout_refused")
    if not why:
        return ""
    limit = re.search(r"set (\w+) to raise it", why)
    return f"over {limit.group(1)}" if limit else "not built"


def _short_how(how: str) -> str:
    """How the bandwidth bound was found, each reduced part's method without its details (a
    parenthesis, what follows a comma), never cut in a word: "routing meets a bound", "flow LP per
    class of alike ranks and cuts", "cuts around 1 representative rank(s)"."""
    parts = (re.sub(r" \((?:[^()]|\([^()]*\))*\)", "", part).split(", ")[0] for part in how.split("; "))
    return "; ".join(parts)


def _ratio(xml_us: float | None, algorithm_us: float | None) -> str:
    return f"{xml_us / algorithm_us:.3f}x" if xml_us and algorithm_us else ""


def _row(machine: str, gpus: int, collective: str, done: dict, stopped: str | None) -> list:
    def secs(stage: str) -> str:
        return f"{done[stage]['s']:.1f}" if stage in done else ""

    model, nccl = done.get("model", {}), done.get("nccl", {})
    pct = ""
    if model and "bound" in done:
        pct = f"{100 * done['bound']['bound_us'] / model['ideal_us']:.1f}%"
    peak = max((d.get("peak_MiB") or 0 for d in done.values()), default=0)
    return [
        f"{machine}x{gpus // 8}",
        gpus,
        collective,
        secs("bound"),
        _short_how(done.get("bound", {}).get("how", "")),
        done.get("synth", {}).get("method", ""),
        secs("synth"),
        done.get("synth", {}).get("sends", ""),
        pct,
        f"{model['calibrated_us']:.0f}" if model else "",
        _gain(nccl.get("layout_us"), model.get("calibrated_us")) or _not_built(nccl),
        _gain(nccl.get("layout_ideal_us"), model.get("ideal_us")) or _not_built(nccl),
        _gain(nccl.get("model_us"), model.get("calibrated_us")),
        secs("compile"),
        done.get("compile", {}).get("variants", ""),
        *(secs(s) for s in ("write", "load", "check", "simulate")),
        _ratio(done.get("simulate", {}).get("ir_us"), model.get("calibrated_us")),
        secs("nccl"),
        f"{done['case']['cpu_s']:.1f}" if "case" in done else "",
        f"{peak:.0f}",
        stopped or "",
    ]


HEADERS = [
    "topology",
    "GPUs",
    "collective",
    "bound s",
    "bandwidth bound from",
    "synthesis",
    "synth s",
    "sends",
    "% of bound",
    "calibrated us",
    "vs NCCL layout",
    "vs NCCL layout (ideal)",
    "vs NCCL model",
    "compile s",
    "variants",
    "write s",
    "load s",
    "check s",
    "sim s",
    "XML / Algorithm",
    "nccl s",
    "CPU s",
    "peak MiB",
    "stopped at",
]
LEGEND = """\
per-case limit {limit}; 1 GiB; every time is modeled (synth/timing), none measured on GPUs.
% of bound: line-rate lower bound / the Algorithm's time in the ideal model (the bound's link rates).
calibrated us: the Algorithm's time in the calibrated model. vs NCCL layout: NCCL's channels as an
Algorithm (xccl baseline nccl) over ours, both calibrated; (ideal): both ideal; vs NCCL model: NCCL's
own tuning model over our calibrated time (none for alltoall: NCCL's model has no alltoall);
"over LIMIT": NCCL's layout refused by that limit (raise it through its environment variable).
compile s: as xccl compile compiles (runtime.choice): the schedule as it is and, where that is not
within 10% of its Algorithm at 1 GiB, each variant the choice tries (variants: how many compiled),
each timed in the IR simulator. check s: the loaded XML checked as xccl check does (the azure
runtime's rules, then what it computes); a row it fails stops there. XML / Algorithm: the checked
XML's time in the IR simulator over the Algorithm's, both calibrated. Stage times (s) are wall
clock; CPU s and peak MiB: the case's child process's CPU time (user + system) and peak resident
memory, the stage it was stopped in included."""


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=list(GPUS))
    parser.add_argument("--machines", nargs="+", default=list(MACHINES), choices=MACHINES)
    parser.add_argument("--collectives", nargs="+", default=list(COLLECTIVES), choices=COLLECTIVES)
    parser.add_argument(
        "--limit",
        type=float,
        default=None,
        help=f"wall-clock seconds per case (default {LIMIT_S:g}, {LARGE_LIMIT_S:g} from {LARGE_GPUS} GPUs)",
    )
    parser.add_argument(
        "--compose-from",
        type=int,
        default=COMPOSE_FROM,
        metavar="GPUS",
        help=f"from this many GPUs, tree packing composes machines (default {COMPOSE_FROM})",
    )
    parser.add_argument(
        "--no-xml",
        action="store_true",
        help="skip compile, write, load, check and simulate (reach NCCL's stage)",
    )
    parser.add_argument("--case", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:  # the child: the packing searches get half the case's time
        run_case(
            *args.case,
            limit_s=(args.limit or LIMIT_S) / 2,
            compose=args.compose_from <= 1,
            with_xml=not args.no_xml,
        )
        return
    signal.signal(signal.SIGTERM, _stop)
    rows = []
    cases = [(m, g, c) for g in args.gpus for m in args.machines for c in args.collectives]
    try:
        for i, (machine, gpus, coll) in enumerate(cases, 1):
            progress(f"[scale {i}/{len(cases)}] {coll} on {machine}x{gpus // 8} ({gpus} GPUs)")
            compose = gpus >= args.compose_from and METHOD[coll] == "trees"
            limit = limit_for(gpus, args.limit)
            done, stopped = _child(f"{machine}x{gpus // 8}", coll, limit, compose, not args.no_xml)
            rows.append(_row(machine, gpus, coll, done, stopped))
    except KeyboardInterrupt:
        progress(f"interrupted: {len(rows)} of {len(cases)} cases done")
    limits = sorted({limit_for(g, args.limit) for g in args.gpus})
    print(LEGEND.format(limit=" / ".join(f"{x:g} s" for x in limits)))
    print(format_table(HEADERS, rows))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
