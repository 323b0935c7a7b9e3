"""The public API: one thin, documented call into each package.

Every function accepts names where objects are expected (a topology name or file, a collective
name, a size like ``"1MiB"``), so a session reads like the command line::

    >>> import xccl
    >>> ring = xccl.topology("ring:4")
    >>> algo = xccl.synthesize(ring, "allgather")            # SMT: fewest steps, verified
    >>> algo.num_steps
    2
    >>> ir = xccl.compile(algo)                               # chunk schedule -> checked IR
    >>> xccl.run(ir, "64KiB").checked                         # executed and compared with NumPy
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import xccl
from codegen import compile_program, save_ir
from codegen.dsl import ChunkProgram
from codegen.errors import CodegenError
from codegen.ir import IR
from common.errors import quoted
from common.fields import is_integer
from common.units import SizeError, parse_size, parse_size_range
from runtime.choice import compile_fastest
from runtime.errors import ExecutionError
from synth.algorithm import Algorithm
from synth.baselines import BASELINES, default_chunks, make_baseline
from synth.bounds import lower_bound_us
from synth.collectives import Collective, CollectiveError, make_collective
from synth.cost import SimResult
from synth.errors import InfeasibleError, SolverTimeout
from topologies import Topology, TopologyError, load, topology_from_dict

__all__ = list(xccl.__all__)
"""The public names, declared once by the package (``import xccl`` loads this module on first use)."""


def topology(name_or_path: str | Path | dict | Topology) -> Topology:
    """A shipped machine (``dgx1``), a multi-machine variant (``ndv2x2``), a family (``ring:8``), a
    JSON file, or a dict in that file's format (docs/topology-format.md), validated.

    >>> topology("dgx1").num_ranks, topology("ndv2x2").num_machines
    (8, 2)
    >>> pair = {"name": "pair", "ranks": 2, "links": [{"src": 0, "dst": 1, "bandwidth_GBps": 25, "alpha_us": 0.7}]}
    >>> topology(pair).num_ranks
    2
    """
    return _load(name_or_path)


def _load(given: str | Path | Topology | dict) -> Topology:
    """What every call accepts where a topology goes: a name, a file, a Topology or a dict."""
    if isinstance(given, dict):
        return topology_from_dict(given, where=f"<topology {given.get('name', '?')}>")
    return load(given)


def _size_bytes(size: str | int, what: str = "size") -> int:
    """A buffer size in bytes from ``"1MiB"`` or an int; zero, negative and non-integer sizes raise
    :class:`common.units.SizeError` (Python would take them, and every bound would be nonsense)."""
    if isinstance(size, bool) or not isinstance(size, int | str):
        raise SizeError(f"{what}: expected bytes as an int or a string like '1MiB', got {size!r}")
    nbytes = parse_size(size)
    if nbytes < 1:
        raise SizeError(f"{what}: expected at least 1 byte, got {size!r}")
    return nbytes


def collective(
    name: str | Collective, num_ranks: int, chunks: int = 1, root: int | None = None
) -> Collective:
    """A collective by name (``allgather``, ``allreduce``, ``reducescatter``, ``alltoall``,
    ``broadcast``, ``reduce``, ``gather``, ``scatter``); rooted ones default to root 0.

    >>> collective("allreduce", 4, chunks=4).combining
    True
    """
    if isinstance(name, Collective):
        return name
    return make_collective(name, num_ranks, chunks, root)


def synthesize(
    topology: str | Path | Topology,
    collective: str | Collective,
    method: str = "smt",
    *,
    chunks: int | None = None,
    root: int | None = None,
    steps: int | None = None,
    rounds: int | None = None,
    sketch: Any = None,
    size: str | int = "1GiB",
    chunkup: int | None = None,
    time_limit_s: float | None = None,
    solver: str | None = None,
    algo: str | None = None,
) -> Algorithm:
    """A verified algorithm for ``collective`` on ``topology``.

    ``method="smt"`` (default) searches the fewest steps (or solves the instance ``steps``/``rounds``
    when given) with ``chunks`` chunks per rank; ``"milp"`` schedules from a ``sketch`` (a shipped
    name like ``"ndv2x2-relay"``, a file, or a :class:`sketches.Sketch`) for buffers of ``size``,
    splitting each chunk into ``chunkup`` pieces (default: the sketch's); ``"trees"`` packs spanning
    trees at the topology's best rate (allgather, reducescatter, allreduce; chunks chosen for
    ``size``); a baseline name
    (``"ring"``, ``"bidir-ring"``, ``"direct"``, ``"recursive-doubling"``, ``"binomial-tree"``,
    ``"hierarchical"``, ``"nccl"``) builds that baseline; ``algo`` chooses NCCL's algorithm for
    ``"nccl"`` (``"auto"``, ``"ring"``, ``"tree"``, ``"nvls"``, ``"p2p"``; docs/nccl.md).
    ``time_limit_s`` bounds the whole search in wall time (default 600 s for SMT, MILP and trees;
    MILP and trees then return the best verified result found). Raises
    ``InfeasibleError`` when no algorithm exists within the limits and ``SolverTimeout`` when the
    time limit stopped the search.

    >>> synthesize("ring:4", "allgather", steps=1)
    Traceback (most recent call last):
    ...
    synth.errors.InfeasibleError: allgather on ring:4: no algorithm with 1 step(s) and 1 round(s) (unsat)
    >>> synthesize("ring:4", "allgather", "ring").provenance.method
    'baseline:ring'
    >>> synthesize("dgx1", "allgather", "nccl").chunks  # NCCL's six rings, a chunk on each
    6
    """
    topo = _load(topology)
    if method not in SYNTHESIZERS:
        raise CollectiveError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    if algo is not None and method != "nccl":
        raise CollectiveError(f"algo chooses NCCL's algorithm: it applies to method 'nccl', not {method!r}")
    request = _Request(chunks, root, steps, rounds, sketch, size, chunkup, time_limit_s, solver, algo)
    return SYNTHESIZERS[method](topo, collective, request)


@dataclass(frozen=True)
class _Request:
    """``synthesize``'s options, as each method reads them."""

    chunks: int | None
    root: int | None
    steps: int | None
    rounds: int | None
    sketch: Any
    size: str | int
    chunkup: int | None
    time_limit_s: float | None
    solver: str | None
    algo: str | None = None


def _collective_for(coll: str | Collective, topo: Topology, chunks: int, root: int | None) -> Collective:
    """``coll`` as given, or the named collective over the topology's ranks."""
    if isinstance(coll, Collective):
        return coll
    return make_collective(coll, topo.num_ranks, chunks, root)


def _smt(topo: Topology, coll: str | Collective, request: _Request) -> Algorithm:
    """SMT: the fewest steps, or the instance ``steps``/``rounds``."""
    from synth.smt import least_steps, solve_instance
    from synth.smt.synthesizer import DEFAULT_TIME_LIMIT_S

    chunks, steps, rounds = request.chunks or 1, request.steps, request.rounds
    c = _collective_for(coll, topo, chunks, request.root)
    time_limit_s = DEFAULT_TIME_LIMIT_S if request.time_limit_s is None else request.time_limit_s
    if steps is None:
        result = least_steps(topo, c, time_limit_s=time_limit_s)
        if result.algorithm is None:
            error = InfeasibleError if result.proven else SolverTimeout
            raise error(f"{c.name} on {topo.name}: {result.message()}")
        return result.algorithm
    outcome = solve_instance(topo, c, steps, rounds, time_limit_s=time_limit_s)
    if outcome.algorithm is not None:
        return outcome.algorithm
    r = steps if rounds is None else rounds
    if outcome.status.answered:
        raise InfeasibleError(
            f"{c.name} on {topo.name}: no algorithm with {steps} step(s) and {r} round(s) (unsat)"
        )
    raise SolverTimeout(
        f"{c.name} on {topo.name}: S={steps} R={r} C={chunks} timed out after {time_limit_s} s (unknown)"
    )


def _milp(topo: Topology, coll: str | Collective, request: _Request) -> Algorithm:
    """MILP: a schedule from the sketch, for buffers of ``size``."""
    from sketches import load_sketch
    from synth.milp import Options
    from synth.milp import synthesize as milp_synthesize

    chunkup = request.chunkup
    if request.chunks is not None:
        raise CollectiveError("method milp: chunks come from the sketch; pass chunkup= to split them")
    if chunkup is not None and (not is_integer(chunkup) or chunkup < 1):
        raise CollectiveError(f"chunkup: expected an integer >= 1, got {chunkup!r}")
    if request.sketch is None:
        raise InfeasibleError("method milp needs a sketch (a shipped name such as 'ndv2x2-relay', or a file)")
    name = coll.name if isinstance(coll, Collective) else coll
    limit = {} if request.time_limit_s is None else {"time_limit_s": request.time_limit_s}
    options = Options(solver=request.solver, chunkup=chunkup, **limit)
    result = milp_synthesize(
        topo,
        name,
        load_sketch(request.sketch),
        size_bytes=_size_bytes(request.size),
        root=request.root,
        options=options,
    )
    return result.algorithm


def _trees(topo: Topology, coll: str | Collective, request: _Request) -> Algorithm:
    """Tree packing: bandwidth-optimal allgather, reducescatter, allreduce for buffers of ``size``."""
    from synth.trees import synthesize as trees_synthesize

    if request.chunks is not None or request.steps is not None or request.rounds is not None:
        raise CollectiveError("method trees: chunks come from the packing; chunks, steps and rounds are not taken")
    name = coll.name if isinstance(coll, Collective) else coll
    limit = {} if request.time_limit_s is None else {"time_limit_s": request.time_limit_s}
    return trees_synthesize(topo, name, size_bytes=_size_bytes(request.size), **limit).algorithm


def _baseline(kind: str, topo: Topology, coll: str | Collective, request: _Request) -> Algorithm:
    """The ``kind`` baseline, with its default chunks unless told otherwise."""
    name = coll.name if isinstance(coll, Collective) else coll
    chunks = request.chunks or default_chunks(kind, name, topo.num_ranks, topo, request.algo)
    return make_baseline(kind, topo, _collective_for(coll, topo, chunks, request.root), request.algo)


SYNTHESIZERS: dict[str, Callable[[Topology, str | Collective, _Request], Algorithm]] = {
    "smt": _smt,
    "milp": _milp,
    "trees": _trees,
    **{kind: partial(_baseline, kind) for kind in BASELINES},
}
"""``synthesize``'s methods, by name: SMT (SCCL style), MILP (TACCL style, needs a sketch), tree
packing (ForestColl style: allgather, reducescatter, allreduce), and every baseline of ``synth.baselines.BASELINES``."""

METHODS = tuple(SYNTHESIZERS)
"""``synthesize``'s methods: SMT (SCCL style), MILP (TACCL style, needs a sketch), or a baseline."""


def pareto(
    topology: str | Path | Topology,
    collective: str,
    *,
    root: int | None = None,
    max_chunks: int | None = None,
    time_limit_s: float | None = None,
):
    """The Pareto-optimal front in (steps, rounds per chunk) by SMT, walked as SCCL does; its
    ``algorithms`` are verified and ``stop`` says why the walk ended (``time limit`` after
    ``time_limit_s``, default 600 s of wall time; each instance gets at most 60 s).

    >>> front = pareto("ring:4", "allgather")
    >>> [(a.num_steps, a.rounds, a.chunks) for a in front.algorithms], front.stop
    ([(2, 3, 2)], 'bandwidth optimal')
    """
    from synth.smt import DEFAULT_MAX_CHUNKS, pareto_front
    from synth.smt.synthesizer import DEFAULT_TIME_LIMIT_S

    return pareto_front(
        _load(topology),
        collective,
        root=root,
        max_chunks=max_chunks or DEFAULT_MAX_CHUNKS,
        time_limit_s=DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s,
    )


def compile(
    source: Algorithm | ChunkProgram,
    topology: str | Path | Topology | None = None,
    *,
    dialect: str = "azure",
    instances: int = 1,
    protocol: str | None = None,
    inplace: bool = False,
    port_order: str = "auto",
) -> IR:
    """An algorithm (or a DSL program) compiled to an IR that passed the static checker for
    ``dialect`` (``azure`` or ``msccl``). A timed algorithm (a MILP's) is compiled as ``xccl
    compile`` does: with and without its sends taking each port in the schedule's order, the one
    faster in the IR simulator at its synthesized size kept (``port_order="auto"``; ``"on"`` or
    ``"off"`` force it; :func:`runtime.choice.compile_fastest`). ``protocol`` None: a program's
    own, Simple for an algorithm, or for a timed one what that choice takes (LL where the Algorithm
    model runs it faster in LL).

    >>> ir = compile(synthesize("ring:4", "allgather", "ring"))
    >>> ir.num_ranks, ir.collective
    (4, 'allgather')
    >>> compile("ring.json")
    Traceback (most recent call last):
    ...
    codegen.errors.CodegenError: compile: source: expected an Algorithm or a DSL Program, got str 'ring.json'
    """
    if not isinstance(source, Algorithm | ChunkProgram):
        raise CodegenError(
            f"compile: source: expected an Algorithm or a DSL Program, got {type(source).__name__} {quoted(source)}"
        )
    if not isinstance(inplace, bool):
        raise CodegenError(
            f"compile: inplace: expected True or False, got {type(inplace).__name__} {quoted(inplace)}"
        )
    if isinstance(source, ChunkProgram):
        return compile_program(source, instances=instances, protocol=protocol, dialect=dialect)
    topo = _load(topology) if topology is not None else None
    return compile_fastest(
        source, topo, port_order, inplace=inplace, instances=instances, protocol=protocol, dialect=dialect
    )[0]


def export(ir: IR, path: str | Path, dialect: str = "azure", force: bool = False, op: str = "sum") -> Path:
    """Write ``ir`` as MSCCL XML (``azure``, ``msccl``), our JSON IR (``json``) or an MSCCL++
    execution plan (``mscclpp``); an existing file is kept unless ``force``. ``op`` is the reduction
    the schedule will be called with: a runtime that does not perform it is refused (MSCCL++ only sums).

    >>> import tempfile
    >>> path = export(compile(synthesize("ring:4", "allgather", "ring")), f"{tempfile.mkdtemp()}/ag.xml")
    >>> run(path, "64KiB", backend="numpy").checked            # the file runs as written
    True
    >>> ir = compile(synthesize("ring:4", "allgather", "ring"), dialect="mscclpp")
    >>> plan = export(ir, f"{tempfile.mkdtemp()}/ag.json", "mscclpp")  # an MSCCL++ execution plan
    >>> plan.read_text().count('"name": "put"')                 # one per chunk a rank sends
    12
    """
    return save_ir(ir, path, dialect, force=force, reduction=op)


def _gpu_ready() -> bool:
    from runtime.cupy.backend import CupyBackend

    if not CupyBackend.available():
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def best_backend() -> str:
    """``cupy`` where CuPy and a GPU are present, else ``numpy``: what ``backend="auto"`` runs on.

    >>> best_backend() in ("cupy", "numpy")
    True
    """
    return "cupy" if _gpu_ready() else "numpy"


def _target(source: IR | ChunkProgram | str | Path, backend: str, dtype: str, op: str):
    """What ``run`` and ``bench`` execute (``runtime.selection.run_target``): the IR, the result a
    DSL program declares for a custom collective, the dialect whose size window applies. A program
    is compiled within the threadblocks per rank ``backend`` runs at once with ``dtype`` and ``op``
    (the cupy backend: the resident blocks of the GPU over the ranks placed on it), as ``xccl run``
    compiles it; an IR or IR file runs as it is."""
    from runtime.backends import backends
    from runtime.reference import parse_dtype, parse_op
    from runtime.selection import compiled_within, run_target, runtime_dialect

    if not isinstance(source, IR | ChunkProgram | str | Path):
        raise ExecutionError(
            f"{source!r} ({type(source).__name__}): expected an IR, a DSL Program or an IR file (.xml, .json)"
        )
    table = backends()
    if not isinstance(source, ChunkProgram) or backend not in table or not table[backend].available():
        return run_target(source)  # (an unknown backend is refused by the caller, naming the choices)
    ranks = source.collective.num_ranks
    bound = table[backend]().rank_threadblocks(ranks, parse_dtype(dtype).name, parse_op(op))
    limit = None if bound is None else bound.per_rank
    return compiled_within(lambda d: run_target(source, d), runtime_dialect(source.collective.name), limit)


def _placement(ir: IR, inplace: bool | None) -> bool:
    if inplace is None:
        return not ir.outofplace
    if not isinstance(inplace, bool):
        raise ExecutionError(f"inplace {inplace!r}: expected True, False or None (what the IR allows)")
    return inplace


def run(
    ir: IR | ChunkProgram | str | Path,
    size: str | int = "1MiB",
    *,
    backend: str = "auto",
    dtype: str = "float32",
    op: str = "sum",
    inplace: bool | None = None,
):
    """Execute ``ir`` (an IR, a DSL program, or an XML or JSON IR file) once on random inputs at
    nccl-tests' ``size`` (an integer number of bytes >= 1, or a string like ``"64KiB"``) and check
    every output against the NumPy reference (raises ``ExecutionMismatch`` with rank, buffer, chunk
    and index otherwise). A custom collective is checked against the result its program declares
    (``codegen.custom_collective``); without one ``checked`` is False. A size outside the IR's
    ``minBytes``/``maxBytes`` window raises ``SizeNotSelected``; one that needs more host memory
    than the limit (``XCCL_MAX_MEMORY``) ``MemoryLimitError``, before anything is allocated.
    ``backend`` is ``numpy``, ``cupy`` or ``auto`` (the GPU if present). ``inplace`` defaults to
    what the IR allows (out of place when both are).

    >>> result = run(compile(synthesize("ring:4", "allreduce", "ring"), inplace=True), "64KiB")
    >>> result.checked, result.inplace
    (True, True)
    >>> run(compile(synthesize("ring:4", "allreduce", "ring"), inplace=True), 1.5)
    Traceback (most recent call last):
    ...
    common.units.SizeError: size 1.5 (float): expected a whole number of bytes ...
    """
    from runtime.backends import BenchCase, backends
    from runtime.bench import aligned_size
    from runtime.selection import check_window

    nbytes = parse_size(size)
    executors = {name: cls for name, cls in backends().items() if cls.checks}
    if backend != "auto" and backend not in executors:
        raise ExecutionError(f"backend {backend!r}: run takes {', '.join(executors)} or auto")
    chosen = best_backend() if backend == "auto" else backend
    target = _target(ir, chosen, dtype, op)
    ir = target.ir
    place = _placement(ir, inplace)
    nbytes = aligned_size(ir, nbytes, dtype)
    check_window(ir, nbytes, target.dialect)
    return executors[chosen]().run_once(ir, BenchCase(nbytes, dtype, op, place, target.declared))


def bench(
    ir: IR | ChunkProgram | str | Path,
    sizes: str | list[int | str] = "1KiB:1MiB",
    *,
    backend: str = "auto",
    topology: str | Path | Topology | None = None,
    dtype: str = "float32",
    op: str = "sum",
    inplace: bool | None = None,
    warmup: int = 1,
    repeats: int = 5,
):
    """An nccl-tests-style report (size, count, time, algbw, busbw, check) of ``ir`` (an IR, a DSL
    program or an IR file) over ``sizes`` (``"1KiB:1GiB"`` is every power of two between; or a list
    of sizes, each an integer number of bytes >= 1 or a string like ``"4KiB"``). ``backend``
    ``sim`` needs a ``topology``. A size the runtime would not select the IR for (its window, its
    chunks) or above the memory limit gets a ``skipped`` row with a ``note``; each row's ``check``
    is one of ``runtime.bench.CHECKS``.

    >>> report = bench(compile(synthesize("ring:4", "allgather", "ring")), "4KiB,64KiB", backend="numpy")
    >>> [row.check for row in report.rows]
    ['ok', 'ok']
    """
    from runtime.bench import bench as run_bench

    if isinstance(sizes, str):
        listed = parse_size_range(sizes)
    elif isinstance(sizes, list | tuple):
        listed = [parse_size(s) for s in sizes]
    else:
        raise SizeError(
            f"sizes {sizes!r} ({type(sizes).__name__}): expected a string like 1KiB:1MiB or a list"
        )
    chosen = best_backend() if backend == "auto" else backend
    target = _target(ir, chosen, dtype, op)
    topo = _load(topology) if topology is not None else None
    return run_bench(
        target.ir,
        listed,
        backend=chosen,
        dtype=dtype,
        op=op,
        inplace=_placement(target.ir, inplace),
        warmup=warmup,
        repeats=repeats,
        topology=topo,
        declared=target.declared,
        dialect=target.dialect,
    )


def lower_bound(
    topology: str | Path | Topology, collective: str | Collective, size: str | int = "1GiB"
) -> float:
    """The lower bound on the time of ``collective`` at ``size``, in microseconds (the larger of the
    latency bound and the min-cut bandwidth bound).

    >>> round(lower_bound("ring:4", "allgather", "1MiB"), 2)  # 3/4 MiB over 2 links of 25 GB/s
    15.73
    """
    topo = _load(topology)
    return lower_bound_us(topo, _collective_for(collective, topo, 1, None), _size_bytes(size))


def simulate(
    algorithm: Algorithm,
    topology: str | Path | Topology | None = None,
    size: str | int = "1MiB",
    model: str = "calibrated",
    protocol: str | None = None,
) -> SimResult:
    """The modeled time (and algbw, busbw) of ``algorithm`` at nccl-tests' ``size`` on ``topology``
    (default: the one it was made for, if shipped), by the event simulator of :mod:`synth.cost`
    under the timing ``model`` (``calibrated`` or ``ideal``, docs/nccl.md) and ``protocol``
    (``Simple``, ``LL128``, ``LL``; default Simple).

    >>> ring = synthesize("ring:4", "allgather", "ring")
    >>> round(simulate(ring, size="1MiB", model="ideal").time_us, 2)  # 3 x (1/4 MiB over 25 GB/s + 0.7 us)
    33.56
    >>> r = simulate(ring, size="1MiB")  # 4.64 us launch + 3 x (2.8 + 0.7 + 1/4 MiB over 80% of 25 GB/s)
    >>> round(r.time_us, 2), r.model
    (54.46, 'calibrated, Simple')
    """
    from synth.cost import simulate as simulate_algorithm
    from synth.timing import model_params

    if topology is None:
        try:
            topology = _load(algorithm.topology)
        except TopologyError:
            raise TopologyError(
                f"{algorithm.name}: topology {algorithm.topology!r} is not shipped; pass topology=(its file)"
            ) from None
    return simulate_algorithm(algorithm, _load(topology), _size_bytes(size), model_params(model, protocol))


def nccl_time(
    topology: str | Path | Topology,
    collective: str,
    size: str | int = "1GiB",
    version: str = "2.30.7",
    arch: str | None = None,
) -> Any:
    """NCCL's own modeled time of ``collective`` at nccl-tests' ``size`` on ``topology``: the
    algorithm, protocol and channels NCCL's tuning model picks with the constants of NCCL
    ``version`` (``2.30.7``, ``2.12.12``, or ``2.30``/``2.12``), for the GPU generation read from
    the topology (or ``arch``: ``sm70``, ``sm80``, ``sm90``, ``sm100``). See docs/nccl.md, "Model".

    >>> est = nccl_time("dgx-h100", "allreduce", "1GiB")
    >>> est.algorithm, est.protocol, round(est.busbw_GBps)
    ('NVLS', 'Simple', 473)
    """
    from synth.nccl import nccl_time as model_time

    return model_time(_load(topology), collective, _size_bytes(size), version, arch)
