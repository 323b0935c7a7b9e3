"""Read MSCCL algorithm XML, ours or other tools', into the IR.

The reader only parses. It accepts what the runtimes' tiny XML reader accepts (reference section
3.1) and refuses the rest with one :class:`XmlFormatError` naming the file and line: an XML
declaration, single quotes, attributes split over lines, tabs between elements, a missing
attribute, an unknown step type or buffer, integers that are not integers. Integers are read as
``strtol(s, 0)`` reads them (``0x10`` is 16, ``010`` is 8). Steps are numbered by position, as the
runtimes do. Unknown elements are skipped, as the runtimes skip them.

The dialect follows from the file: ``outofplace`` is written only for the Azure executor. What
other tools write is kept as written (usage-based ``i_chunks``, ``o_chunks="0"`` of in-place
programs; the static checker says which runtime rejects them), with two readings: a missing
``maxBytes`` means the research runtime's default (128 MiB) and the research dialect's "no limit"
value means no limit; an ``rrc`` whose local operand lies outside its buffer (the reference
compiler writes the *sender's* location there, e.g. ``srcbuf="s"`` on a GPU without scratch) is
read with its destination as local operand, which is what that compiler meant.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from codegen.dialects import DIALECTS
from codegen.errors import XmlFormatError
from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock

__all__ = ["read_xml", "strtol", "xml_dialect"]

MSCCL_DEFAULT_MAX_BYTES = 1 << 27
_SPACE = " \n\r"
_ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
_STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


@dataclass
class _Node:
    name: str
    line: int
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[_Node] = field(default_factory=list)


class _Lexer:
    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        self.i = 0

    @property
    def line(self) -> int:
        return self.text.count("\n", 0, self.i) + 1

    def fail(self, message: str, line: int | None = None) -> XmlFormatError:
        return XmlFormatError(f"{self.where}:{line or self.line}: {message}")

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def take(self) -> str:
        c = self.peek()
        if not c:
            raise self.fail("unexpected end of file")
        self.i += 1
        return c

    def skip_space(self) -> None:
        while True:
            while self.peek() and self.peek() in _SPACE:
                self.i += 1
            if self.text.startswith("<!--", self.i):
                end = self.text.find("-->", self.i + 4)
                if end < 0:
                    raise self.fail("unterminated comment")
                self.i = end + 3
                continue
            return

    def token(self, stops: str) -> str:
        start = self.i
        while self.peek() and self.peek() not in stops:
            self.i += 1
        return self.text[start : self.i]

    def element(self) -> tuple[_Node, bool] | None:
        """The next element start (node, self-closing), or None at a closing tag (consumed by caller)."""
        self.skip_space()
        if not self.peek():
            return None
        line = self.line
        if self.take() != "<":
            raise self.fail(
                f"expected '<', got {self.text[self.i - 1]!r} (only spaces and newlines may separate elements)"
            )
        if self.peek() == "?":
            raise self.fail("an XML declaration (<?xml ...?>) is not accepted by the MSCCL runtimes")
        if self.peek() == "/":
            return None
        name = self.token(" />\n\r\t")
        if not name:
            raise self.fail("expected an element name after '<'")
        node = _Node(name, line)
        while self.peek() == " ":
            self.i += 1
            if self.peek() in "/>":
                break
            if self.peek() == " ":
                continue  # the runtimes read a double space as an empty attribute
            key = self.token('="<> \n\r')
            if self.take() != "=":
                raise self.fail(f"<{name}>: expected '=' after attribute {key!r}")
            if self.take() != '"':
                raise self.fail(f"<{name}>: attribute {key}: expected a double-quoted value")
            end = self.text.find('"', self.i)
            if end < 0:
                raise self.fail(f"<{name}>: attribute {key}: unterminated value")
            value = self.text[self.i : end]
            if "\n" in value:
                raise self.fail(f"<{name}>: attribute {key}: a value may not span lines")
            self.i = end + 1
            if key in node.attrs:
                raise self.fail(f"<{name}>: attribute {key} given twice")
            node.attrs[key] = value
        c = self.take()
        if c == "/":
            if self.take() != ">":
                raise self.fail(f"<{name}>: expected '>' after '/'")
            return node, True
        if c != ">":
            what = "a newline" if c in "\n\r" else repr(c)
            raise self.fail(  # reported at the element's line: the attributes belong there
                f"<{name}>: expected ' ', '/>' or '>' after an attribute, got {what} "
                "(all attributes of an element go on its line, separated by single spaces)",
                line,
            )
        return node, False

    def children(self, parent: _Node) -> None:
        while True:
            got = self.element()
            if got is None:
                if not self.peek():
                    raise self.fail(f"<{parent.name}> (line {parent.line}) is never closed")
                self.i += 1  # '/'
                name = self.token(">")
                self.take()
                if name != parent.name:
                    raise self.fail(f"</{name}> closes <{parent.name}> (line {parent.line})")
                return
            node, single = got
            parent.children.append(node)
            if not single:
                self.children(node)


def strtol(text: str) -> int:
    """``strtol(text, NULL, 0)`` for a whole string: decimal, ``0x`` hex, leading-zero octal."""
    s = text.strip()
    sign = -1 if s.startswith("-") else 1
    body = s[1:] if s[:1] in "+-" else s
    if body.lower().startswith("0x"):
        value = int(body[2:], 16)
    elif len(body) > 1 and body.startswith("0"):
        value = int(body[1:], 8)
    else:
        if not body.isdigit():
            raise ValueError(text)
        value = int(body)
    return sign * value


class _Attrs:
    def __init__(self, lex: _Lexer, node: _Node) -> None:
        self.lex = lex
        self.node = node

    def str(self, key: str) -> str:
        if key not in self.node.attrs:
            raise self.lex.fail(f"<{self.node.name}>: attribute {key} is missing", self.node.line)
        return self.node.attrs[key]

    def int(self, key: str, lo: int | None = None) -> int:
        raw = self.str(key)
        try:
            value = strtol(raw)
        except ValueError:
            raise self.lex.fail(
                f"<{self.node.name}>: attribute {key}: expected an integer, got {raw!r}", self.node.line
            ) from None
        if lo is not None and value < lo:
            raise self.lex.fail(
                f"<{self.node.name}>: attribute {key}: expected >= {lo}, got {value}", self.node.line
            )
        return value


def _collective(coll: str, lex: _Lexer, node: _Node) -> str:
    for d in DIALECTS.values():
        ours = d.our_collective(coll)
        if ours is not None:
            return ours
    raise lex.fail(f"<algo>: coll {coll!r} is not a collective either runtime runs", node.line)


def xml_dialect(text: str, where: str = "<xml>") -> str:
    """The dialect a file is written in: ``azure`` if ``<algo>`` carries ``outofplace``."""
    got = _Lexer(text, where).element()
    if got is None or got[0].name != "algo":
        raise XmlFormatError(f"{where}:1: the first element must be <algo ...>")
    return "azure" if "outofplace" in got[0].attrs else "msccl"


def read_xml(text: str, where: str = "<xml>") -> IR:
    """The IR an MSCCL XML text describes (see the module docstring for what is read how)."""
    lex = _Lexer(text, where)
    got = lex.element()
    if got is None or got[0].name != "algo":
        raise lex.fail("the first element must be <algo ...>")
    root, single = got
    if not single:
        lex.children(root)
    lex.skip_space()
    if lex.peek():
        raise lex.fail("unexpected content after </algo>")
    a = _Attrs(lex, root)
    azure = "outofplace" in root.attrs
    dialect = DIALECTS["azure" if azure else "msccl"]
    ngpus = a.int("ngpus", 1)
    inplace = bool(a.int("inplace", 0))
    max_bytes = a.int("maxBytes", 0) if "maxBytes" in root.attrs else MSCCL_DEFAULT_MAX_BYTES
    if max_bytes == dialect.unlimited_max_bytes:
        max_bytes = 0
    gpus: dict[int, Gpu] = {}
    for node in root.children:
        if node.name != "gpu":
            continue
        g = _Attrs(lex, node)
        rank = g.int("id", 0)
        if rank >= ngpus or rank in gpus:
            raise lex.fail(f"<gpu>: id {rank}: expected each of 0..{ngpus - 1} once", node.line)
        sizes = {
            Buffer.INPUT: g.int("i_chunks", 0),
            Buffer.OUTPUT: g.int("o_chunks", 0),
            Buffer.SCRATCH: g.int("s_chunks", 0),
        }
        tbs = [_threadblock(lex, t, sizes) for t in node.children if t.name == "tb"]
        gpus[rank] = Gpu(rank, sizes[Buffer.INPUT], sizes[Buffer.OUTPUT], sizes[Buffer.SCRATCH], tuple(tbs))
    if sorted(gpus) != list(range(ngpus)):
        missing = sorted(set(range(ngpus)) - set(gpus))
        raise lex.fail(f"<algo>: ngpus={ngpus} but there is no <gpu> with id {missing[0]}", root.line)
    collective = _collective(a.str("coll"), lex, root)
    ir = IR(
        name=a.str("name"),
        collective=collective,
        num_ranks=ngpus,
        nchunksperloop=a.int("nchunksperloop", 1),
        gpus=tuple(gpus[r] for r in range(ngpus)),
        protocol=a.str("proto"),
        inplace=inplace,
        outofplace=bool(a.int("outofplace", 0)) if azure else not inplace,
        root=a.int("root", 0) if "root" in root.attrs else None,
        min_bytes=a.int("minBytes", 0) if "minBytes" in root.attrs else 0,
        max_bytes=max_bytes,
    )
    a.int("nchannels", 1)
    if ir.collective in _ROOTED and ir.root is None:
        ir = _infer_root(ir)
    return ir


def _threadblock(lex: _Lexer, node: _Node, sizes: dict[Buffer, int]) -> Threadblock:
    t = _Attrs(lex, node)
    send, recv = t.int("send", -1), t.int("recv", -1)
    ops = []
    for step in node.children:
        if step.name != "step":
            continue
        s = _Attrs(lex, step)
        for key in _STEP_ATTRS:
            s.str(key)
        kind = s.str("type")
        try:
            op_type = OpType(kind)
        except ValueError:
            hint = " (ra is parsed but never executed by the research runtime)" if kind == "ra" else ""
            raise lex.fail(
                f"<step>: type {kind!r} is not a step type the runtimes execute{hint}", step.line
            ) from None
        refs = []
        for buf_key, off_key in (("srcbuf", "srcoff"), ("dstbuf", "dstoff")):
            try:
                buffer = Buffer(s.str(buf_key))
            except ValueError:
                raise lex.fail(
                    f"<step>: {buf_key} {s.str(buf_key)!r}: expected i, o or s", step.line
                ) from None
            refs.append(Ref(buffer, s.int(off_key, -1)))
        src, dst = refs
        hasdep = s.int("hasdep", 0)
        if hasdep not in (0, 1):
            raise lex.fail(f"<step>: hasdep must be 0 or 1, got {hasdep}", step.line)
        depid, deps = s.int("depid", -1), s.int("deps", -1)
        if depid >= 0 and deps < 0:
            raise lex.fail(f"<step>: depid {depid} needs deps >= 0", step.line)
        if (
            op_type is OpType.RECV_REDUCE_COPY
            and not 0 <= src.index < sizes[src.buffer]
            and 0 <= dst.index < sizes[dst.buffer]
        ):
            src = dst  # the reference compiler's srcbuf: the sender's location; it meant the local one
        ops.append(
            Op(
                op_type,
                src if op_type.reads_src else None,
                dst if op_type.writes_dst else None,
                s.int("cnt", 0),
                (Dep(depid, deps),) if depid >= 0 else (),
                bool(hasdep),
            )
        )
    return Threadblock(
        t.int("id", 0), None if send < 0 else send, None if recv < 0 else recv, t.int("chan", 0), tuple(ops)
    )


def _infer_root(ir: IR) -> IR:
    """Rooted collectives written without ``root``: broadcast's/scatter's root never receives,
    reduce's/gather's never sends; use it when exactly one rank fits."""
    sends = ir.collective in ("broadcast", "scatter")
    fits = [
        g.rank
        for g in ir.gpus
        if not any((op.type.receives if sends else op.type.sends) for tb in g.threadblocks for op in tb.ops)
    ]
    return replace(ir, root=fits[0]) if len(fits) == 1 else ir
