"""Read MSCCL algorithm XML, ours or other tools', into the IR.

The reader only parses. It accepts what the runtimes' tiny XML reader accepts (reference section
3.1) and refuses the rest with one :class:`XmlFormatError` naming the file and line: an XML
declaration, single quotes, attributes split over lines, tabs between elements, names and values
longer than the reader's buffers, a missing attribute (only the first 16 of an element count, as
in the runtimes), an unknown step type or buffer, integers that are not integers, counts over
xccl's limits (:mod:`codegen.limits`, checked before anything is built for them); the reader's own
limits are the runtimes' (:mod:`codegen.rules.xml_file`). Integers are read
as ``strtol(s, 0)`` reads them (``0x10`` is 16, ``010`` is 8). Steps are numbered by position, as
the runtimes do. Unknown elements are skipped, as the runtimes skip them; elements may nest to any
depth (the reader keeps a stack, not a recursion), and it takes time linear in the text.

The dialect follows from the file: ``outofplace`` is written only for the Azure executor. What
other tools write is kept as written (usage-based ``i_chunks``, ``o_chunks="0"`` of in-place
programs, a missing ``name``: the file's stem; the static checker says which runtime rejects them),
with two readings: a missing ``maxBytes`` means the research runtime's default (128 MiB) and the
research dialect's "no limit" value means no limit; an ``rrc`` whose local operand lies outside its
buffer (the reference compiler writes the *sender's* location there, e.g. ``srcbuf="s"`` on a GPU
without scratch) is read with its destination as local operand, which is what that compiler meant.
:func:`read_xml_facts` also returns what the file says beyond the IR (:class:`XmlFacts`: the
``<algo>`` attributes as written, the step numbers), for the rules of each runtime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from codegen.errors import XmlFormatError
from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock, made
from codegen.limits import CHUNKS, RANKS
from codegen.rules import DIALECTS, MAX_ATTRIBUTES, MAX_NAME, MAX_VALUE, file_dialect, strtol
from synth.collectives import ROOTED

__all__ = ["XmlFacts", "read_xml", "read_xml_facts", "strtol", "xml_dialect"]

_STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
_SPACE = re.compile(r"[ \n\r]*")
_NAME = re.compile(r"[^ />\n\r\t]*")
_KEY = re.compile(r'[^="<> \n\r]*')
_ATTR = re.compile(r'([^="<> \n\r]*)="([^"\n]*)"')
_PAIR = re.compile(r' ([^="<> \n\r]+)="([^"\n]*)"')
_ELEMENT = re.compile(r'<([^ />\n\r\t?!]+)((?: [^="<> \n\r]+="[^"\n]*")*)(/?)>')
_INT = r"-?(?:0|[1-9][0-9]{0,17}+)"
_FROM = r"(?:-1|0|[1-9][0-9]{0,17}+)"
_VALUES = (
    rf'type="(s|r|rcs|rrs|rrc|rrcs|cpy|re|nop)" srcbuf="([ios])" srcoff="({_FROM})" dstbuf="([ios])" '
    rf'dstoff="({_FROM})" cnt="(0|[1-9][0-9]{{0,17}}+)" depid="({_FROM})" deps="({_FROM})" hasdep="([01])"'
)
_STEP_VALUES = re.compile(_VALUES)
"""A step's attributes after ``s``, as xccl writes them (in the writer's order, decimal integers
in range, short values), each value a group."""


def _bare(pattern: str) -> str:
    """``pattern`` with its groups made non-capturing (to match the same text as part of another)."""
    return re.sub(r"\((?!\?)", "(?:", pattern)


_STEP = re.compile(rf'[ \n\r]*+<step s="({_INT})" ({_bare(_VALUES)})/>')
"""A ``<step>`` as xccl writes it, after the spaces before it: its ``s``, then the rest of its
attributes as one string (:data:`_STEP_VALUES` splits it). Its repetitions below are possessive
(``*+``, ``{0,17}+``): giving a step or a digit back never lets what follows match, and the
matcher keeps no state to give them back (a fourth less time over a 512-rank file's steps)."""
_STEP_TEXT = re.compile(r'<step s="([^"]*)" ([^/]*)/>')
""":data:`_STEP`'s two groups, read out of a run of steps :data:`_STEPS` or :data:`_TB` matched
(each as :data:`_STEP` reads it there; twice as fast as it)."""
_STEPS = re.compile(rf"(?:{_bare(_STEP.pattern)})++")
"""A run of :data:`_STEP` steps, read in one match (:class:`_Steps`); any other step is read by
:meth:`_Lexer.element` as any element."""
_NAT = r"(?:0|[1-9][0-9]{0,17}+)"
_TB = re.compile(
    rf'[ \n\r]*+()<tb id="({_NAT})" send="({_FROM})" recv="({_FROM})" chan="({_NAT})">'
    rf"((?:{_bare(_STEP.pattern)})*+)[ \n\r]*+</tb>"
)
"""A whole ``<tb>`` as xccl writes it, read in one match (:class:`_Tb`): where it starts (the empty
group), its id, peers and channel, and its steps (a run of :data:`_STEP`)."""
_OP_TYPES = {t.value: t for t in OpType}
_BUFFERS = {b.value: b for b in Buffer}


@dataclass
class _Node:
    name: str
    pos: int
    """Offset of its ``<`` in the text (lines are counted only for messages)."""
    attrs: dict[str, str] = field(default_factory=dict)
    """The attributes the runtimes read: the first ``MAX_ATTRIBUTES``."""
    ignored: list[str] = field(default_factory=list)
    """Attributes past those, which the runtimes skip."""
    children: list[_Node | _Tb | _Steps] = field(default_factory=list)


class _Steps:
    """Consecutive ``<step>`` elements read in one :data:`_STEPS` match, from ``pos`` to ``end`` of
    the text (half a million steps at 512 ranks, where a :class:`_Node` per step, with its
    attribute dictionary, each value checked and converted by name, was most of the reading); the
    threadblock splits them with :data:`_STEP_TEXT`."""

    __slots__ = ("end", "pos")
    name = "step"
    children: tuple[()] = ()

    def __init__(self, pos: int, end: int) -> None:
        self.pos = pos
        self.end = end


class _Tb:
    """A ``<tb>`` read in one :data:`_TB` match: its attributes, valid as they are, and its steps."""

    __slots__ = ("children", "pos", "values")
    name = "tb"

    def __init__(self, pos: int, values: tuple[str, str, str, str], steps: _Steps) -> None:
        self.pos = pos
        self.values = values
        self.children = (steps,)


@dataclass(frozen=True)
class XmlFacts:
    """What a file says that its IR does not keep, for the rules of each runtime
    (:func:`codegen.rules.file_problems`)."""

    algo: dict[str, str]
    """``<algo>``'s attributes as the runtimes read them (the first ``MAX_ATTRIBUTES``)."""
    algo_ignored: tuple[str, ...]
    """``<algo>``'s attributes past those."""
    step_numbers: dict[tuple[int, int], tuple[int, ...]]
    """The ``s`` of every step, per (rank, threadblock id)."""

    @property
    def dialect(self) -> str:
        """The dialect the file is written in (:func:`codegen.rules.file_dialect`)."""
        return file_dialect(self.algo)


class _Lexer:
    """The runtimes' tiny XML reader (reference section 3.1), over a string, without recursion."""

    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        self.i = 0

    def line(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def fail(self, message: str, pos: int | None = None) -> XmlFormatError:
        return XmlFormatError(f"{self.where}:{self.line(self.i if pos is None else pos)}: {message}")

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
            self.i = _SPACE.match(self.text, self.i).end()
            if self.text.startswith("<!--", self.i):
                end = self.text.find("-->", self.i + 4)
                if end < 0:
                    raise self.fail("unterminated comment")
                self.i = end + 3
                continue
            return

    def name(self, what: str) -> str:
        end = _NAME.match(self.text, self.i).end()
        name = self.text[self.i : end]
        if len(name) > MAX_NAME:
            raise self.fail(
                f"{what} {name[:20]}... is longer than {MAX_NAME} characters, the runtimes' limit"
            )
        self.i = end
        return name

    def element(self) -> tuple[_Node, bool] | None:
        """The next element start (node, self-closing), or None at a closing tag (consumed by caller)."""
        self.skip_space()
        if not self.peek():
            return None
        if self.text.startswith("</", self.i):  # as element_by_char reads it: past its '<'
            self.i += 1
            return None
        m = _ELEMENT.match(self.text, self.i)
        if m is not None:  # the common case in one match; anything unusual is read char by char
            name, attrs, slash = m.groups()
            pairs = _PAIR.findall(attrs)
            if (
                len(name) <= MAX_NAME
                and len(pairs) <= MAX_ATTRIBUTES
                and all(len(k) <= MAX_NAME and len(v) <= MAX_VALUE for k, v in pairs)
                and len({k for k, _ in pairs}) == len(pairs)
            ):
                node = _Node(name, self.i, dict(pairs))
                self.i = m.end()
                return node, bool(slash)
        return self.element_by_char()

    def element_by_char(self) -> tuple[_Node, bool] | None:
        """:meth:`element` one character at a time, saying what is wrong where."""
        pos = self.i
        if self.take() != "<":
            raise self.fail(
                f"expected '<', got {self.text[self.i - 1]!r} (only spaces and newlines may separate elements)"
            )
        if self.peek() == "?":
            raise self.fail("an XML declaration (<?xml ...?>) is not accepted by the MSCCL runtimes")
        if self.peek() == "/":
            return None
        name = self.name("element name")
        if not name:
            raise self.fail("expected an element name after '<'")
        node = _Node(name, pos)
        read = 0
        while self.peek() == " ":
            self.i += 1
            if self.peek() in "/>":
                break
            if self.peek() == " ":
                read += 1  # the runtimes read a double space as an empty attribute
                continue
            self.attribute(node, read < MAX_ATTRIBUTES)
            read += 1
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
                pos,
            )
        return node, False

    def attribute(self, node: _Node, kept: bool) -> None:
        m = _ATTR.match(self.text, self.i)
        if m is None:  # say what is wrong
            key = self.text[self.i : _KEY.match(self.text, self.i).end()]
            self.i += len(key)
            if self.take() != "=":
                raise self.fail(f"<{node.name}>: expected '=' after attribute {key!r}")
            if self.take() != '"':
                raise self.fail(f"<{node.name}>: attribute {key}: expected a double-quoted value")
            end = self.text.find('"', self.i)
            if end < 0:
                raise self.fail(f"<{node.name}>: attribute {key}: unterminated value")
            raise self.fail(f"<{node.name}>: attribute {key}: a value may not span lines")
        key, value = m.groups()
        if len(key) > MAX_NAME or len(value) > MAX_VALUE:
            what, limit = ("name", MAX_NAME) if len(key) > MAX_NAME else ("value", MAX_VALUE)
            raise self.fail(
                f"<{node.name}>: attribute {key[:20]}: its {what} is longer than {limit} characters, "
                "the runtimes' limit"
            )
        if key in node.attrs or key in node.ignored:
            raise self.fail(f"<{node.name}>: attribute {key} given twice")
        if kept:
            node.attrs[key] = value
        else:
            node.ignored.append(key)
        self.i = m.end()

    def document(self) -> _Node:
        """The ``<algo>`` element with everything inside it; nothing may follow it."""
        got = self.element()
        if got is None or got[0].name != "algo":
            raise self.fail("the first element must be <algo ...>", 0)
        root, single = got
        open_ = [] if single else [root]
        text, tbs, steps = self.text, _TB.match, _STEPS.match
        while open_:  # a stack, not recursion: any depth of nesting reads in constant stack
            m = tbs(text, self.i)
            if m is not None:  # most threadblocks: in one match
                open_[-1].children.append(_Tb(m.start(1), m.group(2, 3, 4, 5), _Steps(*m.span(6))))
                self.i = m.end()
                continue
            m = steps(text, self.i)
            if m is not None:  # most elements: a threadblock's steps in one match
                open_[-1].children.append(_Steps(m.start(), m.end()))
                self.i = m.end()
                continue
            got = self.element()
            if got is not None:
                node, single = got
                open_[-1].children.append(node)
                if not single:
                    open_.append(node)
                continue
            parent = open_.pop()
            if not self.peek():
                raise self.fail(f"<{parent.name}> (line {self.line(parent.pos)}) is never closed")
            self.i += 1  # '/'
            end = self.text.find(">", self.i)
            name = self.text[self.i : end if end >= 0 else len(self.text)]
            self.i += len(name)
            self.take()
            if name != parent.name:
                raise self.fail(f"</{name[:40]}> closes <{parent.name}> (line {self.line(parent.pos)})")
        self.skip_space()
        if self.peek():
            raise self.fail("unexpected content after </algo>")
        return root


class _Attrs:
    def __init__(self, lex: _Lexer, node: _Node) -> None:
        self.lex = lex
        self.node = node

    def at(self, key: str) -> str:
        """``file:line: <element>: key``, for messages."""
        return f"{self.lex.where}:{self.lex.line(self.node.pos)}: <{self.node.name}>: {key}"

    def fail(self, message: str) -> XmlFormatError:
        return self.lex.fail(f"<{self.node.name}>: {message}", self.node.pos)

    def str(self, key: str) -> str:
        if key not in self.node.attrs:
            late = (
                f" (it comes after the first {MAX_ATTRIBUTES} attributes, all that the runtimes read)"
                if key in self.node.ignored
                else ""
            )
            raise self.fail(f"attribute {key} is missing{late}")
        return self.node.attrs[key]

    def int(self, key: str, lo: int | None = None) -> int:
        raw = self.str(key)
        try:
            value = strtol(raw)
        except ValueError:
            raise self.fail(f"attribute {key}: expected an integer, got {raw!r}") from None
        if lo is not None and value < lo:
            raise self.fail(f"attribute {key}: expected >= {lo}, got {value}")
        return value

    def chunks(self, key: str) -> int:
        value = self.int(key, 0)
        CHUNKS.check(value, lambda: self.at(key), XmlFormatError)
        return value


def _collective(a: _Attrs) -> str:
    coll = a.str("coll")
    xml = [d for d in DIALECTS.values() if d.xml is not None]
    for d in xml:
        ours = d.our_collective(coll)
        if ours is not None:
            return ours
    known = sorted({spelled for d in xml for _, spelled in d.collectives})
    raise a.fail(f"coll {coll!r}: expected one of {', '.join(known)}")


def xml_dialect(text: str, where: str = "<xml>") -> str:
    """The dialect a file is written in (:func:`codegen.rules.file_dialect`)."""
    got = _Lexer(text, where).element()
    if got is None or got[0].name != "algo":
        raise XmlFormatError(f"{where}:1: the first element must be <algo ...>")
    return file_dialect(got[0].attrs)


def read_xml(text: str, where: str = "<xml>") -> IR:
    """The IR an MSCCL XML text describes (see the module docstring for what is read how)."""
    return read_xml_facts(text, where)[0]


def read_xml_facts(text: str, where: str = "<xml>") -> tuple[IR, XmlFacts]:
    """The IR and what else the file says that the runtimes' rules need (:class:`XmlFacts`)."""
    lex = _Lexer(text, where)
    root = lex.document()
    a = _Attrs(lex, root)
    ngpus = a.int("ngpus", 1)
    RANKS.check(ngpus, lambda: a.at("ngpus"), XmlFormatError)
    ncpl = a.chunks("nchunksperloop")
    if ncpl < 1:
        raise a.fail(f"attribute nchunksperloop: expected >= 1, got {ncpl}")
    a.int("nchannels", 1)
    spelling = DIALECTS[file_dialect(root.attrs)].xml
    inplace = bool(a.int("inplace", 0))
    # absent: the research runtime's default (the executor requires the attribute)
    max_bytes = a.int("maxBytes", 0) if "maxBytes" in root.attrs else DIALECTS["msccl"].xml.default_max_bytes
    if max_bytes == spelling.unlimited_max_bytes or 0 < spelling.unlimited_max_bytes < max_bytes:
        max_bytes = 0  # "no limit" as written; the research runtime's strtoll saturates above it
    read = _Read()
    gpus: dict[int, Gpu] = {}
    for node in root.children:
        if node.name == "gpu":
            gpu = _gpu(lex, node, ngpus, read)
            if gpu.rank in gpus:
                raise lex.fail(f"<gpu>: id {gpu.rank}: expected each of 0..{ngpus - 1} once", node.pos)
            gpus[gpu.rank] = gpu
    if len(gpus) != ngpus:
        missing = next(r for r in range(ngpus) if r not in gpus)
        raise a.fail(f"ngpus={ngpus} but there is no <gpu> with id {missing}")
    ir = IR(
        name=a.str("name")
        if "name" in root.attrs
        else (re.sub(r"[^\w.-]", "", PurePath(where).stem) or "algo"),
        collective=_collective(a),
        num_ranks=ngpus,
        nchunksperloop=ncpl,
        gpus=tuple(gpus[r] for r in range(ngpus)),
        protocol=a.str("proto"),
        inplace=inplace,
        outofplace=bool(a.int("outofplace", 0)) if spelling.writes_outofplace else not inplace,
        root=a.int("root", 0) if "root" in root.attrs else None,
        min_bytes=a.int("minBytes", 0) if "minBytes" in root.attrs else 0,
        max_bytes=max_bytes,
    )
    if ir.collective in ROOTED and ir.root is None:
        ir = _infer_root(ir)
    return ir, XmlFacts(dict(root.attrs), tuple(root.ignored), read.steps)


@dataclass
class _Read:
    """What the reading of one file has built so far."""

    steps: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    """The ``s`` of every step, per (rank, threadblock id) (:attr:`XmlFacts.step_numbers`)."""
    refs: dict[tuple[str, str], Ref] = field(default_factory=dict)
    """Each location read, by its ``buf`` and ``off`` as written (one ``Ref`` for all its uses)."""
    ops: dict[tuple[int, ...], dict[str, Op]] = field(default_factory=dict)
    """Per buffer sizes (an ``rrc``'s operand is read against them), each op read, by its
    attributes after ``s`` as written (:data:`_STEP`): a 512-rank schedule's half a million steps
    are some 30,000 distinct ops."""


def _gpu(lex: _Lexer, node: _Node, ngpus: int, read: _Read) -> Gpu:
    g = _Attrs(lex, node)
    rank = g.int("id", 0)
    if rank >= ngpus:
        raise g.fail(f"id {rank}: expected each of 0..{ngpus - 1} once")
    sizes = {Buffer.INPUT: g.chunks("i_chunks"), Buffer.OUTPUT: g.chunks("o_chunks")}
    sizes[Buffer.SCRATCH] = g.chunks("s_chunks")
    known = read.ops.setdefault(tuple(sizes.values()), {})
    tbs = []
    for t in node.children:
        if type(t) is _Tb:
            tb, numbers = _matched(lex, t, sizes, read, known)
        elif t.name == "tb":
            tb, numbers = _threadblock(lex, t, sizes, read)
        else:
            continue
        tbs.append(tb)
        read.steps[(rank, tb.id)] = numbers
    return Gpu(rank, sizes[Buffer.INPUT], sizes[Buffer.OUTPUT], sizes[Buffer.SCRATCH], tuple(tbs))


def _matched(
    lex: _Lexer, node: _Tb, sizes: dict[Buffer, int], read: _Read, known: dict[str, Op]
) -> tuple[Threadblock, tuple[int, ...]]:
    """:func:`_threadblock` of a ``<tb>`` read in one match: its steps' attributes split out by
    :data:`_STEP_TEXT`, and their ops looked up in ``known`` (the ops read so far for these buffer
    sizes) in C, each op not seen before read first, in the order of the steps (a 512-rank file's
    80,000 threadblocks, where a Python loop over their million steps was a third of the reading)."""
    steps = node.children[0]
    found = _STEP_TEXT.findall(lex.text, steps.pos, steps.end)
    tb_id, send, recv, chan = map(int, node.values)
    numbers, values = zip(*found, strict=True) if found else ((), ())
    if not all(map(known.__contains__, values)):
        for v in values:
            if v not in known:
                _read_op(lex, steps, v, sizes, read)
    fields = {"id": tb_id, "send": None if send < 0 else send, "recv": None if recv < 0 else recv}
    fields.update(channel=chan, ops=tuple(map(known.__getitem__, values)))
    return made(Threadblock, fields), tuple(map(int, numbers))


def _threadblock(
    lex: _Lexer, node: _Node, sizes: dict[Buffer, int], read: _Read
) -> tuple[Threadblock, tuple[int, ...]]:
    """The threadblock and the ``s`` of each of its steps (one not read in one match)."""
    known = read.ops.setdefault(tuple(sizes.values()), {})
    t = _Attrs(lex, node)
    send, recv = t.int("send", -1), t.int("recv", -1)
    ops = []
    numbers = []
    for step in node.children:
        if step.name != "step":
            continue
        if type(step) is _Steps:  # a step written as another was is the same (frozen) op
            found = _STEP_TEXT.findall(lex.text, step.pos, step.end)
            numbers += [int(number) for number, _ in found]
            ops += [
                known[values] if values in known else _read_op(lex, step, values, sizes, read)
                for _, values in found
            ]
            continue
        s = _Attrs(lex, step)
        for key in _STEP_ATTRS:
            s.str(key)
        numbers.append(s.int("s"))
        ops.append(_op(s, sizes))
    tb_id, chan = t.int("id", 0), t.int("chan", 0)  # read after the steps: a wrong step is reported first
    tb = Threadblock(tb_id, None if send < 0 else send, None if recv < 0 else recv, chan, tuple(ops))
    return tb, tuple(numbers)


def _op(s: _Attrs, sizes: dict[Buffer, int]) -> Op:
    kind = s.str("type")
    try:
        op_type = OpType(kind)
    except ValueError:
        hint = " (ra is parsed but never executed by the research runtime)" if kind == "ra" else ""
        raise s.fail(f"type {kind!r} is not a step type the runtimes execute{hint}") from None
    refs = []
    for buf_key, off_key in (("srcbuf", "srcoff"), ("dstbuf", "dstoff")):
        try:
            buffer = Buffer(s.str(buf_key))
        except ValueError:
            raise s.fail(f"{buf_key} {s.str(buf_key)!r}: expected i, o or s") from None
        refs.append(Ref(buffer, s.int(off_key, -1)))
    src, dst = refs
    hasdep = s.int("hasdep", 0)
    if hasdep not in (0, 1):
        raise s.fail(f"hasdep must be 0 or 1, got {hasdep}")
    depid, deps = s.int("depid", -1), s.int("deps", -1)
    if depid >= 0 and deps < 0:
        raise s.fail(f"depid {depid} needs deps >= 0")
    if (
        op_type is OpType.RECV_REDUCE_COPY
        and not 0 <= src.index < sizes[src.buffer]
        and 0 <= dst.index < sizes[dst.buffer]
    ):
        src = dst  # the reference compiler's srcbuf: the sender's location; it meant the local one
    return Op(
        op_type,
        src if op_type.reads_src else None,
        dst if op_type.writes_dst else None,
        s.int("cnt", 0),
        (Dep(depid, deps),) if depid >= 0 else (),
        bool(hasdep),
    )


def _read_op(lex: _Lexer, run: _Steps, values: str, sizes: dict[Buffer, int], read: _Read) -> Op:
    """:func:`_op` of a step in ``run`` whose attributes after ``s`` are ``values``, which need no
    more checks than its dependency's, kept in ``read`` for the steps written as it is."""
    kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep = _STEP_VALUES.fullmatch(values).groups()
    op_type, refs = _OP_TYPES[kind], read.refs
    if depid != "-1" and deps == "-1":
        at = next(m.start(2) for m in _STEP.finditer(lex.text, run.pos, run.end) if m[2] == values)
        raise lex.fail(f"<step>: depid {depid} needs deps >= 0", at)  # the line of its first such step
    src = refs.get((srcbuf, srcoff))
    if src is None:
        src = refs[(srcbuf, srcoff)] = Ref(_BUFFERS[srcbuf], int(srcoff))
    dst = refs.get((dstbuf, dstoff))
    if dst is None:
        dst = refs[(dstbuf, dstoff)] = Ref(_BUFFERS[dstbuf], int(dstoff))
    if (
        op_type is OpType.RECV_REDUCE_COPY
        and not 0 <= src.index < sizes[src.buffer]
        and 0 <= dst.index < sizes[dst.buffer]
    ):
        src = dst  # as _op reads it
    op = Op(
        op_type,
        src if op_type.reads_src else None,
        dst if op_type.writes_dst else None,
        int(cnt),
        (Dep(int(depid), int(deps)),) if depid != "-1" else (),
        hasdep == "1",
    )
    read.ops[tuple(sizes.values())][values] = op
    return op


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
