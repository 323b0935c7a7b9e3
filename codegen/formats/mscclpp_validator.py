"""An independent validator of MSCCL++ execution plans (JSON): ``xccl check PLAN.json`` and the tests.

Written from the plan format as microsoft/mscclpp v0.8.0 to v0.10.0 parses and executes it
(shared/reference/mscclpp-plan-and-torch.md, sections 1 and 4.5: ``execution_plan.cc``,
``executor.cc``, ``execution_kernel.hpp``), it reads only the JSON text and shares no code with the
writer (``codegen.formats.mscclpp_plan``, ``mscclpp_json``) nor with the rest of xccl: its limits, collectives and
reference results are its own. ``violations(text)`` returns every problem as a string (empty: the
plan is accepted):

- structure: required keys and their types, ``gpus[r].id == r``, threadblock ids in order, chunk
  counts that fit the collective, every channel, remote buffer, semaphore and barrier reference
  resolving through the threadblock's lists, each op's operands of the kinds it takes, chunks
  inside the buffer of the rank that owns them, reductions that are sums;
- limits: 64 ops, 16 channels and 16 remote buffers per threadblock, 8 channels and 10 buffer
  references per op, 16 semaphores per op, 16 barriers, 1024 threads, 132 threadblocks (all
  resident on an H100), byte offsets below 2^32 at ``max_message_size``;
- channel pairing (as many channels from A to B as from B to A) and, per launch, as many signals
  on each channel as waits on its partner, releases as acquires on each semaphore, and barriers
  met by as many threadblocks as they name;
- races and deadlocks (:mod:`mscclpp_hb`), over two consecutive launches;
- the result (:mod:`mscclpp_interp`): the plan run on NumPy arrays under seeded random schedules,
  every output compared with the collective's result.

It covers the ops of the Simple protocol on memory channels (what an exporter of schedules needs):
packets (LL), port and switch channels, ``pipeline`` and ``reuse_resources`` are reported as not
covered rather than guessed at.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

__all__ = ["Op", "Plan", "Ref", "parse", "violations"]

MAX_OPS = 64
MAX_CHANNELS = 16
MAX_REMOTE_BUFFERS = 16
MAX_CHANNELS_PER_OP = 8
MAX_REFS = 10
MAX_SEMAPHORES_PER_OP = 16
MAX_BARRIERS = 16
MAX_THREADS = 1024
MAX_THREADBLOCKS = 132
OFFSET_LIMIT = 1 << 32
U64 = 1 << 64

SIGNALS = {"signal", "rlxsignal"}
WAITS = {"wait", "rlxwait"}
DATA = {"put", "get", "copy", "re", "res", "rre", "rres"}
COVERED = {"nop", "barrier", "sem_acquire", "sem_release", *SIGNALS, *WAITS, *DATA}
NOT_COVERED = {
    "pws", "pwsf", "flush", "ppkt", "rppkt", "cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt",
    "glres", "gstore", "gstorepkt", "pipeline",
}  # fmt: skip
RATIOS = {"allgather": "o", "gather": "o", "reducescatter": "i", "scatter": "i"}
"""Collectives whose larger buffer (``i`` or ``o``) holds one share per rank; the others: equal."""
KNOWN = {"allgather", "gather", "reducescatter", "scatter", "allreduce", "reduce", "broadcast", "alltoall"}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}


@dataclass(frozen=True)
class Ref:
    """Chunks ``index .. index+size`` of buffer ``buffer`` of rank ``owner``."""

    owner: int
    buffer: str
    index: int
    size: int
    remote: bool


@dataclass
class Op:
    name: str
    where: tuple[int, int, int]
    channels: tuple[int, ...] = ()  # gpu-level memory channel indices, in thread order
    semaphores: tuple[int, ...] = ()
    src: tuple[Ref, ...] = ()
    dst: tuple[Ref, ...] = ()
    barrier: tuple[int, int] | None = None  # (barrier id, threadblocks)
    tbg: tuple[int, int] | None = None  # (part, parts)


@dataclass
class Plan:
    name: str
    collective: str
    inplace: bool
    root: int | None
    min_bytes: int
    max_bytes: int
    alignment: int
    chunks: list[dict[str, int]] = field(default_factory=list)  # per rank: i, o, s
    peers: list[list[int]] = field(default_factory=list)  # per rank: memory channel -> peer
    semaphores: list[list[int]] = field(default_factory=list)  # per rank: init values
    tbs: list[list[list[Op]]] = field(default_factory=list)  # per rank, per threadblock: ops

    @property
    def ranks(self) -> int:
        return len(self.chunks)

    def partner(self, rank: int, channel: int) -> tuple[int, int]:
        """(peer, the peer's channel paired with ``channel`` of ``rank``): the j-th channel of A to
        B pairs with the j-th of B to A."""
        peer = self.peers[rank][channel]
        j = self.peers[rank][:channel].count(peer)
        mine = [k for k, p in enumerate(self.peers[peer]) if p == rank]
        return peer, mine[j]


class _Problems(list):
    def add(self, where: str, message: str) -> None:
        self.append(f"{where}: {message}" if where else message)


def _int(value, lo: int = 0, hi: int | None = None) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and value >= lo and (hi is None or value < hi)
    )


def parse(doc: object, out: _Problems) -> Plan | None:
    """The plan a JSON document describes, or None when its header or gpus cannot be read."""
    if not isinstance(doc, dict):
        out.add("", "the plan must be a JSON object")
        return None
    for key, kind in (
        ("name", str),
        ("collective", str),
        ("protocol", str),
        ("inplace", bool),
        ("gpus", list),
    ):
        if not isinstance(doc.get(key), kind):
            out.add("", f"{key}: required, a {kind.__name__}")
    if out:
        return None
    if not doc["name"]:
        out.add("", "name: empty (the executor caches a plan's resources by name)")
    if doc["protocol"] != "Simple":
        covered = (
            "LL packets are not covered by this validator"
            if doc["protocol"] == "LL"
            else "expected Simple or LL"
        )
        out.add("", f"protocol {doc['protocol']!r}: {covered}")
    for key in ("reuse_resources", "use_double_scratch_buffer"):
        if doc.get(key, False) is not False:
            out.add("", f"{key}: {doc[key]!r}: only false is covered by this validator")
    threads = doc.get("num_threads_per_block", 1024)
    if not _int(threads, 32, MAX_THREADS + 1) or threads % 32:
        out.add("", f"num_threads_per_block {threads!r}: expected a multiple of 32 up to {MAX_THREADS}")
    low, high = doc.get("min_message_size", 0), doc.get("max_message_size", U64 - 1)
    alignment = doc.get("buffer_alignment", 16)
    if not (_int(low, 0, U64) and _int(high, 0, U64) and low <= high):
        out.add("", f"message sizes {low!r}..{high!r}: expected 0 <= min <= max < 2^64")
    if not _int(alignment, 1):
        out.add("", f"buffer_alignment {alignment!r}: expected an integer >= 1")
    meta = doc.get("xccl") if isinstance(doc.get("xccl"), dict) else {}
    plan = Plan(doc["name"], doc["collective"], doc["inplace"], meta.get("root"), low, high, alignment)
    n = len(doc["gpus"])
    if doc["collective"] not in KNOWN:
        out.add("", f"collective {doc['collective']!r}: its result is not known to this validator")
    elif doc["collective"] in ROOTED and not _int(plan.root, 0, n):
        out.add("", f"xccl.root {plan.root!r}: a rooted collective's plan must say its root (0..{n - 1})")
    for r, gpu in enumerate(doc["gpus"]):
        _gpu_header(plan, r, gpu, n, out)
    if out:
        return None
    for r, gpu in enumerate(doc["gpus"]):
        plan.tbs.append(_threadblocks(plan, r, gpu, out))
    return plan


def _gpu_header(plan: Plan, r: int, gpu: object, n: int, out: _Problems) -> None:
    where = f"rank {r}"
    if not isinstance(gpu, dict) or gpu.get("id") != r:
        out.add(where, f"gpus[{r}] must be an object with id {r} (the executor reads gpus[rank])")
        return
    chunks = {
        b: gpu.get(k) for b, k in (("i", "input_chunks"), ("o", "output_chunks"), ("s", "scratch_chunks"))
    }
    if not (_int(chunks["i"], 1) and _int(chunks["o"], 1) and _int(chunks["s"], 0)):
        out.add(
            where,
            f"chunks {chunks}: expected input and output >= 1 (the executor divides by them), scratch >= 0",
        )
        return
    larger = RATIOS.get(plan.collective)
    small, big = ("i", "o") if larger == "o" else ("o", "i")
    if (larger and chunks[big] != n * chunks[small]) or (not larger and chunks["i"] != chunks["o"]):
        out.add(
            where,
            f"chunks {chunks} do not fit {plan.collective} on {n} ranks (one chunk size for all buffers)",
        )
    if plan.collective == "alltoall" and chunks["i"] % n:
        out.add(where, f"alltoall: input_chunks {chunks['i']} is not a multiple of the {n} ranks")
    peers: list[int] = []
    declared = gpu.get("channels")
    for ch in declared if isinstance(declared, list) else [None]:
        if (
            not isinstance(ch, dict)
            or ch.get("channel_type") != "memory"
            or not isinstance(ch.get("connected_to"), list)
        ):
            out.add(where, f"channel {ch!r}: only memory channels with a connected_to list are covered")
            continue
        for p in ch["connected_to"]:
            if not _int(p, 0, n) or p == r:
                out.add(where, f"channel to {p!r}: expected another rank in 0..{n - 1}")
            else:
                peers.append(p)
    sems = gpu.get("semaphores", [])
    if not isinstance(sems, list) or not all(
        isinstance(s, dict) and _int(s.get("init_value"), 0) for s in sems
    ):
        out.add(where, "semaphores: expected a list of {init_value: int >= 0}")
        sems = []
    plan.chunks.append(chunks)
    plan.peers.append(peers)
    plan.semaphores.append([s["init_value"] for s in sems])
    gpu["_remote"] = _remote_buffers(r, gpu.get("remote_buffers"), n, out)


def _remote_buffers(r: int, docs: object, n: int, out: _Problems) -> list[tuple[int, str] | None]:
    """gpu-level remote buffer -> (owner, type) where memory may access it (None otherwise)."""
    found: list[tuple[int, str] | None] = []
    for b, doc in enumerate(docs if isinstance(docs, list) else [None]):
        ok = isinstance(doc, dict) and _int(doc.get("rank"), 0, n) and doc.get("rank") != r
        if (
            not ok
            or doc.get("type") not in ("i", "o", "s")
            or not isinstance(doc.get("access_channel_types"), list)
        ):
            out.add(
                f"rank {r}", f"remote_buffers[{b}] {doc!r}: expected another rank, a type i/o/s, access types"
            )
            found.append(None)
            continue
        found.append((doc["rank"], doc["type"]) if "memory" in doc["access_channel_types"] else None)
    return found


def _threadblocks(plan: Plan, r: int, gpu: dict, out: _Problems) -> list[list[Op]]:
    tbs = gpu.get("threadblocks")
    if not isinstance(tbs, list) or not tbs:
        out.add(f"rank {r}", "threadblocks: expected a non-empty list (an empty grid is a launch error)")
        return []
    if len(tbs) > MAX_THREADBLOCKS:
        out.add(f"rank {r}", f"{len(tbs)} threadblocks: at most {MAX_THREADBLOCKS} are resident at once")
    result = []
    for t, tb in enumerate(tbs):
        where = f"rank {r} tb {t}"
        if not isinstance(tb, dict) or tb.get("id") != t or not isinstance(tb.get("ops"), list):
            out.add(where, "expected an object with id equal to its position and a list of ops")
            result.append([])
            continue
        channels = _tb_list(
            tb.get("channels", None), "channel_type", "channel_ids", len(plan.peers[r]), where, out
        )
        buffers = _tb_list(
            tb.get("remote_buffer_refs", []),
            "access_channel_type",
            "remote_buffer_ids",
            len(gpu["_remote"]),
            where,
            out,
        )
        for what, ids in (("channels", channels), ("remote buffers", buffers)):
            if len(ids) > MAX_CHANNELS:
                out.add(where, f"{len(ids)} memory {what}: at most {MAX_CHANNELS} per threadblock")
        if len(tb["ops"]) > MAX_OPS:
            out.add(where, f"{len(tb['ops'])} ops: the executor throws above {MAX_OPS}")
        context = (plan, r, t, channels, [gpu["_remote"][b] for b in buffers], len(tbs))
        result.append(
            [op for k, doc in enumerate(tb["ops"]) if (op := _op(context, k, doc, out)) is not None]
        )
    return result


def _tb_list(docs: object, type_key: str, ids_key: str, size: int, where: str, out: _Problems) -> list[int]:
    """A threadblock's memory channels (or remote buffers): its local ids, in order, as gpu-level ones."""
    ids: list[int] = []
    for doc in docs if isinstance(docs, list) else [None]:
        if (
            not isinstance(doc, dict)
            or doc.get(type_key) != "memory"
            or not isinstance(doc.get(ids_key), list)
        ):
            out.add(where, f"{doc!r}: expected a memory {type_key} with {ids_key} (others are not covered)")
            continue
        for i in doc[ids_key]:
            if not _int(i, 0, size):
                out.add(where, f"{ids_key} {i!r}: no such gpu-level entry (0..{size - 1})")
            ids.append(i if _int(i, 0, size) else -1)
    return ids


def _op(context: tuple, k: int, doc: object, out: _Problems) -> Op | None:
    plan, r, t, channels, buffers, ntbs = context
    where = f"rank {r} tb {t} op {k}"
    name = doc.get("name") if isinstance(doc, dict) else None
    if name not in COVERED:
        known = "not covered by this validator" if name in NOT_COVERED else "unknown (the parser throws)"
        out.add(where, f"op {name!r}: {known}")
        return None
    op = Op(name, (r, t, k))
    if doc.get("reduce_op", "sum") != "sum":
        out.add(where, f"reduce_op {doc['reduce_op']!r}: the executor ignores it and sums")
    if name in SIGNALS | WAITS:
        ids = doc.get("channel_ids")
        if (
            doc.get("channel_type") != "memory"
            or not isinstance(ids, list)
            or not 1 <= len(ids) <= MAX_CHANNELS_PER_OP
        ):
            out.add(where, f"{name}: expected channel_type memory and 1..{MAX_CHANNELS_PER_OP} channel_ids")
            return None
        if len(set(ids)) != len(ids) or not all(_int(i, 0, len(channels)) and channels[i] >= 0 for i in ids):
            out.add(
                where, f"channel_ids {ids}: distinct threadblock channels expected (it has {len(channels)})"
            )
            return None
        op.channels = tuple(channels[i] for i in ids)
    elif name in ("sem_acquire", "sem_release"):
        ids = doc.get("semaphore_ids")
        count = len(plan.semaphores[r])
        if (
            not isinstance(ids, list)
            or not 1 <= len(ids) <= MAX_SEMAPHORES_PER_OP
            or not all(_int(i, 0, count) for i in ids)
        ):
            out.add(
                where, f"semaphore_ids {ids!r}: expected 1..{MAX_SEMAPHORES_PER_OP} of the rank's {count}"
            )
            return None
        op.semaphores = tuple(ids)
    elif name == "barrier":
        bid, n = doc.get("barrier_id"), doc.get("num_threadblocks")
        if not _int(bid, 0, MAX_BARRIERS) or not _int(n, 1, ntbs + 1):
            out.add(
                where,
                f"barrier {bid!r} of {n!r}: expected an id below {MAX_BARRIERS} and 1..{ntbs} threadblocks",
            )
            return None
        op.barrier = (bid, n)
    elif name in DATA:
        return op if _data_op(plan, op, doc, buffers, where, out) else None
    return op


SHAPES = {
    # name: (source kinds, destination kinds): "L" local, "R" remote, "*" repeat the last kind
    "copy": ("L", "L"),
    "put": ("L*", "R*"),
    "get": ("R*", "L*"),
    "re": ("L*", "L"),
    "res": ("L*", "LR*"),
    "rre": ("LR*", "L"),
    "rres": ("LR*", "LR*"),
}


def _data_op(plan: Plan, op: Op, doc: dict, buffers: list, where: str, out: _Problems) -> bool:
    r = op.where[0]
    sides = []
    for key in ("src_buff", "dst_buff"):
        refs = doc.get(key)
        if not isinstance(refs, list) or not 1 <= len(refs) <= MAX_REFS:
            out.add(where, f"{op.name}: {key} must list 1..{MAX_REFS} buffers")
            return False
        sides.append([_ref(plan, r, ref, buffers, doc.get("channel_type"), where, out) for ref in refs])
    if any(ref is None for side in sides for ref in side):
        return False
    op.src, op.dst = tuple(sides[0]), tuple(sides[1])
    for side, pattern, key in (
        (op.src, SHAPES[op.name][0], "src_buff"),
        (op.dst, SHAPES[op.name][1], "dst_buff"),
    ):
        kinds = "".join("R" if ref.remote else "L" for ref in side)
        if not _matches(kinds, pattern):
            out.add(where, f"{op.name}: {key} is {kinds} (L local, R remote), expected {pattern}")
            return False
    if op.name in ("put", "get") and len(op.src) != len(op.dst):
        out.add(where, f"{op.name}: {len(op.src)} sources for {len(op.dst)} destinations")
    if op.name == "put" and len({ref.buffer for ref in op.src}) > 1:
        out.add(
            where, "put: sources of several buffer types (the executor reads all from src_buff[0]'s type)"
        )
    if op.name == "get" and any(s.index != d.index for s, d in zip(op.src, op.dst, strict=False)):
        out.add(where, "get: local and remote indices differ (the executor swaps their offsets)")
    sizes = {ref.size for ref in (*op.src, *op.dst)}
    if len(sizes) > 1:
        out.add(where, f"{op.name}: buffers of different sizes {sorted(sizes)}")
    tbg = doc.get("tbg_info")
    if tbg is not None:
        if (
            not isinstance(tbg, dict)
            or not _int(tbg.get("tbg_size"), 1)
            or not _int(tbg.get("tb_id"), 0, tbg.get("tbg_size"))
        ):
            out.add(where, f"tbg_info {tbg!r}: expected 0 <= tb_id < tbg_size")
            return False
        op.tbg = (tbg["tb_id"], tbg["tbg_size"])
    return True


def _matches(kinds: str, pattern: str) -> bool:
    fixed = pattern.rstrip("*")
    if not pattern.endswith("*"):
        return kinds == fixed
    return (
        kinds.startswith(fixed[:-1])
        and len(kinds) >= len(fixed)
        and set(kinds[len(fixed) - 1 :]) == {fixed[-1]}
    )


def _ref(plan, r, doc, buffers, channel_type, where, out) -> Ref | None:
    if not isinstance(doc, dict) or not _int(doc.get("index"), 0) or not _int(doc.get("size"), 1):
        out.add(where, f"buffer {doc!r}: expected index >= 0 and size >= 1")
        return None
    if "buffer_id" in doc:
        b = doc["buffer_id"]
        if channel_type != "memory" or not _int(b, 0, len(buffers)) or buffers[b] is None:
            out.add(
                where,
                f"buffer_id {b!r}: no memory-accessible remote buffer of the threadblock (it has {len(buffers)})",
            )
            return None
        (owner, kind), remote = buffers[b], True
    elif doc.get("type") in ("i", "o", "s"):
        owner, kind, remote = r, doc["type"], False
    else:
        out.add(where, f"buffer {doc!r}: expected a local type i/o/s or a buffer_id")
        return None
    held = plan.chunks[owner][kind]
    if doc["index"] + doc["size"] > held:
        out.add(
            where,
            f"{kind}[{doc['index']}..{doc['index'] + doc['size'] - 1}] of rank {owner}: the buffer has {held} chunk(s)",
        )
        return None
    return Ref(owner, kind, doc["index"], doc["size"], remote)


def limits(plan: Plan, out: _Problems) -> None:
    """Byte offsets at ``max_message_size``: every chunk of every buffer must lie below 2^32."""
    compared = plan.chunks[0]["o" if plan.collective == "allgather" else "i"]
    chunk = plan.max_bytes // compared // plan.alignment * plan.alignment
    for r, chunks in enumerate(plan.chunks):
        largest = max(chunks.values())
        if largest * chunk >= OFFSET_LIMIT:
            out.add(
                f"rank {r}",
                f"max_message_size {plan.max_bytes} makes chunks of {chunk} B: {largest} chunks reach byte "
                f"{largest * chunk}, past the executor's 32-bit offsets",
            )


def balance(plan: Plan, out: _Problems) -> None:
    """Pairing, and per launch: signals = waits on each channel pair, releases = acquires, barriers met."""
    for r, peers in enumerate(plan.peers):
        for p, n in Counter(peers).items():
            back = plan.peers[p].count(r)
            if r < p and back != n:
                out.add(
                    "",
                    f"ranks {r} and {p} declare {n} and {back} channels to each other: they pair one to one",
                )
    if out:
        return
    signals: Counter = Counter()
    waits: Counter = Counter()
    releases: Counter = Counter()
    acquires: Counter = Counter()
    barriers: dict[int, list] = defaultdict(list)
    for r, tbs in enumerate(plan.tbs):
        for t, ops in enumerate(tbs):
            for op in ops:
                for c in op.channels:
                    (signals if op.name in SIGNALS else waits)[
                        plan.partner(r, c) if op.name in SIGNALS else (r, c)
                    ] += 1
                for s in op.semaphores:
                    (releases if op.name == "sem_release" else acquires)[(r, s)] += 1
                if op.barrier:
                    barriers[(r, op.barrier[0])].append((t, op.barrier[1]))
    for key in sorted(set(signals) | set(waits)):
        if signals[key] != waits[key]:
            out.add(
                f"rank {key[0]}",
                f"channel {key[1]}: {signals[key]} signal(s) reach it per launch, {waits[key]} wait(s)",
            )
    for key in sorted(set(releases) | set(acquires)):
        if releases[key] != acquires[key]:
            out.add(
                f"rank {key[0]}",
                f"semaphore {key[1]}: {releases[key]} release(s), {acquires[key]} acquire(s) per launch",
            )
    for (r, bid), uses in sorted(barriers.items()):
        per_tb = Counter(t for t, _ in uses)
        sizes = {n for _, n in uses}
        if len(sizes) != 1 or len(per_tb) != next(iter(sizes)) or len(set(per_tb.values())) != 1:
            out.add(
                f"rank {r}", f"barrier {bid}: used by {dict(per_tb)} with num_threadblocks {sorted(sizes)}"
            )


def violations(text: str, seeds: tuple[int, ...] = (0, 1, 2)) -> list[str]:
    """Every problem of the plan ``text`` (empty: accepted)."""
    from codegen.formats.mscclpp_hb import races
    from codegen.formats.mscclpp_interp import run

    out = _Problems()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return [f"not JSON: {exc}"]
    plan = parse(doc, out)
    if plan is None or out:
        return list(out)
    limits(plan, out)
    balance(plan, out)
    if out:
        return list(out)
    out.extend(races(plan))
    if out:
        return list(out)
    for seed in seeds:
        out.extend(run(plan, seed))
        if out:
            break
    return list(out)
