"""An independent validator of MSCCL algorithm XML, written from the runtimes' documented behaviour
(shared/reference/msccl-xml.md, sections 3 and 8), for the tests.

It shares no code with codegen: its reader follows NCCL's tiny XML parser character by character
(names end at space, '>', '/', newline; attributes only while the character after a value is a
space; values start with a quote and end at the next double quote; only space, newline and
carriage return between elements; at most 16 attributes kept, 1024 children, 255-character
names and values), then it applies the load-time rules of each runtime and the checklist.
``violations(text, runtime)`` returns every broken rule as a string (empty: accepted).
"""

from __future__ import annotations

from collections import defaultdict

__all__ = ["violations"]

MAX_ATTRS = 16
MAX_SUBS = 1024
MAX_NODES = 4096
MAX_STR = 255
RUNTIMES = {
    "msccl": {
        "colls": {"allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter", "custom"},
        "algo_attrs": ("name", "ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace"),
        "max_tb": 216,
        "max_steps": 256,
    },
    "azure": {
        "colls": {
            "reduce",
            "broadcast",
            "allreduce",
            "reducescatter",
            "allgather",
            "send",
            "recv",
            "gather",
            "scatter",
            "alltoall",
            "alltoallv",
        },
        "algo_attrs": (
            "nchunksperloop",
            "nchannels",
            "ngpus",
            "proto",
            "coll",
            "minBytes",
            "maxBytes",
            "inplace",
            "outofplace",
        ),
        "max_tb": 1024,
        "max_steps": 64,
    },
}
SENDS = {"s", "rcs", "rrs", "rrcs"}
RECVS = {"r", "rcs", "rrs", "rrc", "rrcs"}
CHECK_SRC = {"s", "rrs", "rrcs", "cpy", "re"}
CHECK_DST = {"r", "rcs", "rrcs", "cpy", "re"}


class ParseError(Exception):
    pass


class Node:
    def __init__(self, name: str, line: int) -> None:
        self.name = name
        self.line = line
        self.attrs: list[tuple[str, str]] = []
        self.subs: list[Node] = []

    def get(self, key: str) -> str | None:
        for k, v in self.attrs[:MAX_ATTRS]:
            if k == key:
                return v
        return None


class Reader:
    """NCCL's xmlGetNode / xmlLoadSub, over a string."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def char(self) -> str:
        if self.pos >= len(self.text):
            raise ParseError("unexpected EOF")
        c = self.text[self.pos]
        self.pos += 1
        return c

    def line(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def token(self, want_value: bool) -> tuple[str, str | None, str]:
        name = ""
        while True:
            c = self.char()
            if c == "=":
                if not want_value:
                    raise ParseError(f"unexpected value with name {name}")
                return name, self.value(), self.last
            name += c
            if len(name) >= MAX_STR:
                raise ParseError(f"name {name[:20]}... too long")
            if c in " >/\n\r":
                return name[:-1], None, c

    def value(self) -> str:
        c = self.char()
        if c not in "\"'":
            raise ParseError("expected (double) quote")
        out = ""
        while True:
            c = self.char()
            if c == '"':
                break
            out += c
            if len(out) > MAX_STR:
                raise ParseError("value too long")
        self.last = self.char()
        return out

    def node(self) -> tuple[str, Node | None]:
        """(kind, node) with kind in none, open, single, close."""
        c = " "
        while c in " \n\r":
            if self.pos >= len(self.text):
                return "none", None
            c = self.char()
        if c != "<":
            raise ParseError(f"line {self.line()}: expecting '<', got {c!r}")
        line = self.line()
        name, _, c = self.token(False)
        if name.startswith("!--"):
            end = self.text.find("-->", self.pos - 3 if name.endswith("--") else self.pos)
            if end < 0:
                raise ParseError("unterminated comment")
            self.pos = end + 3
            return self.node()
        if name == "" and c == "/":
            name, _, c = self.token(False)
            if c != ">":
                raise ParseError(f"line {line}: unexpected trailing {c!r} in closing tag {name}")
            return "close", Node(name, line)
        node = Node(name, line)
        while c == " ":
            key, value, c = self.token(True)
            node.attrs.append((key, value or ""))
        kind = "open"
        if c == "/":
            kind = "single"
            _, _, c = self.token(False)
        if c != ">":
            raise ParseError(f"line {line}: <{name}>: expected >, got {c!r}")
        return kind, node

    def load(self, head: Node | None) -> list[Node]:
        out: list[Node] = []
        while True:
            kind, node = self.node()
            if kind == "none":
                if head is not None:
                    raise ParseError(f"unterminated {head.name}")
                return out
            if kind == "close":
                if head is None or node.name != head.name:
                    raise ParseError(f"mismatch {head.name if head else None} / {node.name}")
                return out
            out.append(node)
            if len(out) > MAX_SUBS:
                raise ParseError(f"more than {MAX_SUBS} children")
            if kind == "open":
                node.subs = self.load(node)


SCRATCH_AT_INIT_LIMIT = 1 << 40
"""Bytes of scratch no GPU has (1 TiB): init.cc allocates ``maxBytes * s_chunks / nchunksperloop``
(as ``size_t``) for every algorithm when the communicator starts, and fails init if it cannot."""


def _preallocated_scratch(algo, high: int | None) -> list[str]:
    """The research runtime's scratch for ``maxBytes`` (``strtoll``: saturates at INT64_MAX)."""
    ncpl = _int(algo.get("nchunksperloop"))
    if high is None or not ncpl or ncpl < 1:
        return []
    high = min(high, (1 << 63) - 1)
    for g in algo.subs:
        s = _int(g.get("s_chunks")) if g.name == "gpu" else None
        if s and s > 0 and (high * s % (1 << 64)) // ncpl > SCRATCH_AT_INIT_LIMIT:
            return [f"gpu {g.get('id')}: maxBytes {high} x s_chunks {s} / {ncpl}: scratch no GPU can allocate at init"]
    return []


def _int(text: str | None) -> int | None:
    """strtol(text, NULL, 0) of a whole attribute, None if it is not an integer."""
    if text is None:
        return None
    s = text
    neg = s.startswith("-")
    s = s.lstrip("+-")
    try:
        if s[:2].lower() == "0x":
            v = int(s[2:], 16)
        elif len(s) > 1 and s[0] == "0":
            v = int(s[1:], 8)
        else:
            v = int(s, 10) if s.isdigit() else None
    except ValueError:
        v = None
    return None if v is None else (-v if neg else v)


def violations(text: str, runtime: str) -> list[str]:
    rt = RUNTIMES[runtime]
    out: list[str] = []
    if text.lstrip(" \n\r").startswith("<?"):
        return ["an XML declaration is not accepted"]
    try:
        top = Reader(text).load(None)
    except ParseError as exc:
        return [f"parse error: {exc}"]
    if not top or top[0].name != "algo":
        return ["the first element must be <algo>"]
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.count("<") > 1:
            out.append(f"line {n}: more than one element on a line")
        if "\t" in line:
            out.append(f"line {n}: a tab")
    algo = top[0]
    for key in rt["algo_attrs"]:
        if algo.get(key) is None:
            out.append(f"<algo>: attribute {key} not found")
    if out:
        return out
    ngpus = _int(algo.get("ngpus"))
    ncpl = _int(algo.get("nchunksperloop"))
    nchannels = _int(algo.get("nchannels"))
    coll = algo.get("coll")
    if algo.get("proto") not in ("Simple", "LL128", "LL"):
        out.append(f"proto {algo.get('proto')!r} unsupported")
    if coll not in rt["colls"]:
        out.append(f"coll {coll!r} unsupported by {runtime}")
    for key in ("minBytes", "maxBytes"):
        if algo.get(key) is not None and (_int(algo.get(key)) is None or _int(algo.get(key)) < 0):
            out.append(f"{key} must be a non-negative integer")
    if runtime == "msccl" and algo.get("maxBytes") is not None and _int(algo.get("maxBytes")) == 0:
        out.append("maxBytes=0 would make the research runtime never select the algorithm")
    if runtime == "msccl":  # topo.cc: maxBytes defaults to 128 MiB; nthreads must fill whole warps
        low, high = _int(algo.get("minBytes") or "0"), _int(algo.get("maxBytes") or str(1 << 27))
        if low is not None and high is not None and low > high:
            out.append("minBytes cannot be greater than maxBytes")
        if algo.get("nthreads") is not None and (_int(algo.get("nthreads")) or 0) % 32:
            out.append("nthreads must be a multiple of 32")
        out.extend(_preallocated_scratch(algo, high))
    if None in (ngpus, ncpl, nchannels) or not 0 < nchannels <= 32:
        return [*out, "ngpus, nchunksperloop, nchannels must be integers, 1 <= nchannels <= 32"]
    gpus = [g for g in algo.subs if g.name == "gpu"]
    if any(_int(g.get("id")) is None for g in gpus):
        return [*out, "<gpu>: attribute id not found"]
    ids = sorted(_int(g.get("id")) for g in gpus)
    if ids != list(range(ngpus)):
        out.append(f"gpu ids {ids} are not 0..{ngpus - 1}")
    conns: dict[tuple[int, int, int], dict[str, list[int]]] = defaultdict(lambda: {"send": [], "recv": []})
    for g in gpus:
        out.extend(_gpu(g, rt, runtime, ngpus, ncpl, nchannels, coll, conns))
        tbs = [t for t in g.subs if t.name == "tb"]
        nodes = 1 + len(gpus) + len(tbs) + sum(1 for t in tbs for s in t.subs if s.name == "step")
        if nodes >= MAX_NODES:  # the load of rank g (its own tbs and steps) fails on reaching it
            out.append(f"gpu {g.get('id')}: {nodes} nodes to load, the parser holds fewer than {MAX_NODES}")
    for (a, b, ch), seqs in sorted(conns.items()):
        if seqs["send"] != seqs["recv"]:
            out.append(
                f"connection {a}->{b} channel {ch}: sent counts {seqs['send']} != received {seqs['recv']}"
            )
    return out


def _gpu(
    g: Node, rt: dict, runtime: str, ngpus: int, ncpl: int, nchannels: int, coll: str, conns
) -> list[str]:
    out = []
    gid = _int(g.get("id"))
    where = f"gpu {gid}"
    sizes = {}
    for key, buf in (("i_chunks", "i"), ("o_chunks", "o"), ("s_chunks", "s")):
        v = _int(g.get(key))
        if v is None or v < 0:
            out.append(f"{where}: {key} missing or negative")
            v = 0
        sizes[buf] = v
    if runtime == "msccl":
        mi = ngpus if coll == "allgather" else 1
        mo = ngpus if coll == "reduce_scatter" else 1
        if (sizes["i"] and sizes["i"] * mi != ncpl) or (sizes["o"] and sizes["o"] * mo != ncpl):
            out.append(f"{where}: inconsistent i_chunks/o_chunks and nchunksperloop")
    tbs = [t for t in g.subs if t.name == "tb"]
    if not tbs:
        out.append(f"{where}: no threadblock")
    if any(_int(t.get("id")) is None for t in tbs):
        return [*out, f"{where}: <tb> attribute id not found"]
    tb_ids = sorted(_int(t.get("id")) for t in tbs)
    if tb_ids != list(range(len(tbs))) or len(tbs) > rt["max_tb"]:
        out.append(f"{where}: threadblock ids {tb_ids[:5]}... not contiguous from 0 or over {rt['max_tb']}")
    steps_of: dict[int, list[Node]] = {}
    peers = defaultdict(int)
    for t in tbs:
        tid, send, recv, chan = (_int(t.get(k)) for k in ("id", "send", "recv", "chan"))
        if None in (tid, send, recv, chan):
            out.append(f"{where}: <tb> needs integer id, send, recv, chan")
            continue
        tw = f"{where} tb {tid}"
        if send < -1 or recv < -1 or send == gid or recv == gid or send >= ngpus or recv >= ngpus:
            out.append(f"{tw}: bad peers send={send} recv={recv}")
        if not 0 <= chan < nchannels:
            out.append(f"{tw}: chan {chan} not below nchannels {nchannels}")
        for kind, peer in (("send", send), ("recv", recv)):
            if peer >= 0:
                peers[(chan, kind, peer)] += 1
                peers[(chan, kind)] += 1
        steps = [s for s in t.subs if s.name == "step"]
        steps_of[tid] = steps
        if len(steps) > rt["max_steps"]:
            out.append(f"{tw}: {len(steps)} steps over {rt['max_steps']}")
        pending = False
        for k, s in enumerate(steps):
            sw = f"{tw} step {k}"
            vals = {
                a: s.get(a)
                for a in (
                    "s",
                    "type",
                    "srcbuf",
                    "srcoff",
                    "dstbuf",
                    "dstoff",
                    "cnt",
                    "depid",
                    "deps",
                    "hasdep",
                )
            }
            if None in vals.values():
                out.append(f"{sw}: missing attribute")
                continue
            num = {a: _int(vals[a]) for a in ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")}
            if None in num.values():
                out.append(f"{sw}: a numeric attribute is not an integer")
                continue
            typ = vals["type"]
            if num["s"] != k:
                out.append(f"{sw}: s={num['s']} is not positional")
            if typ not in SENDS | RECVS | {"cpy", "re", "nop"}:
                out.append(f"{sw}: type {typ!r} not executable")
                continue
            if vals["srcbuf"] not in sizes or vals["dstbuf"] not in sizes:
                out.append(f"{sw}: buffer must be i, o or s")
                continue
            if not 0 <= num["cnt"] < 72 or (typ != "nop" and num["cnt"] == 0):
                out.append(f"{sw}: cnt {num['cnt']} out of range")
            if num["hasdep"] not in (0, 1):
                out.append(f"{sw}: hasdep must be 0 or 1")
            if typ in SENDS and send < 0:
                out.append(f"{sw}: {typ} without a send peer")
            if typ in RECVS and recv < 0:
                out.append(f"{sw}: {typ} without a recv peer")
            checks = [("src", vals["srcbuf"], num["srcoff"])] if typ in CHECK_SRC else []
            checks += [("dst", vals["dstbuf"], num["dstoff"])] if typ in CHECK_DST else []
            if typ in ("rrc", "rrs", "rrcs"):  # the local operand is read: it must be a real chunk
                checks.append(("local src", vals["srcbuf"], num["srcoff"]))
            for what, buf, off in checks:
                if not off >= 0 or off + max(num["cnt"], 1) > sizes[buf]:
                    out.append(f"{sw}: {what} {buf}[{off}] x{num['cnt']} outside {sizes[buf]} chunks")
            if num["depid"] >= 0:
                if num["depid"] > 127:
                    out.append(f"{sw}: depid {num['depid']} does not fit int8")
                if num["deps"] < 0:
                    out.append(f"{sw}: depid without deps")
            if typ == "nop":
                pending = pending or num["depid"] >= 0
            else:
                if pending and num["depid"] < 0:
                    out.append(f"{sw}: follows nops with dependencies but has no depid")
                pending = False
            if typ in SENDS:
                conns[(gid, send, chan)]["send"].append(num["cnt"])
            if typ in RECVS:
                conns[(recv, gid, chan)]["recv"].append(num["cnt"])
    for key, count in peers.items():
        if len(key) == 3 and count > 1:
            out.append(f"{where}: {count} threadblocks on channel {key[0]} {key[1]} peer {key[2]}")
        if len(key) == 2 and count > 32:
            out.append(f"{where}: over 32 {key[1]} threadblocks on channel {key[0]}")
    for tid, steps in steps_of.items():
        for k, s in enumerate(steps):
            d, ds = _int(s.get("depid")), _int(s.get("deps"))
            if d is None or ds is None or d < 0:
                continue
            target = steps_of.get(d)
            if target is None or not 0 <= ds < len(target):
                out.append(f"{where} tb {tid} step {k}: depends on missing tb {d} step {ds}")
            elif _int(target[ds].get("hasdep")) != 1:
                out.append(f"{where} tb {tid} step {k}: waits for tb {d} step {ds}, which has hasdep=0")
    return out
