"""The sketch JSON format (docs/sketch-format.md): a reader that checks every field, and a writer.

The reader checks only what a sketch says on its own (known keys, types, ranges); whether it fits a
topology is :func:`sketches.restrict.restrict`'s job. Shipped sketches are found by name.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from common.files import read_json_file
from sketches.model import (
    CONNECTION_KINDS,
    HYPEREDGE_POLICIES,
    INTRANODE_STRATEGIES,
    InterNode,
    IntraNode,
    Sketch,
    SketchError,
)

__all__ = ["FORMAT", "load_sketch", "shipped_sketches", "sketch_from_dict", "sketch_to_dict"]

FORMAT = "xccl-sketch/1"
_TOP = (
    "format",
    "name",
    "comment",
    "topology",
    "intranode",
    "internode",
    "symmetry_offsets",
    "chunkup",
    "target_size",
)
_INTRA = ("strategy", "switches", "hyperedge")
_SIZE = re.compile(r"^(\d+)\s*(B|KiB|MiB|GiB)?$")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_INTER = ("strategy", "connections", "senders")


class _Reader:
    """Typed field access raising ``SketchError("<where>: <field>: expected ...")``."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, field: str, expected: str, got: Any = ...) -> SketchError:
        tail = "" if got is ... else f", got {json.dumps(got)}"
        return SketchError(f"{self.where}: {field}: expected {expected}{tail}")

    def obj(self, value: Any, field: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(field or "(top level)", "an object", value)
        for key in value:
            if key not in allowed:
                name = f"{field}.{key}" if field else key
                raise self.fail(name, f"one of the known keys ({', '.join(allowed)})", key)
        for key in required:
            if key not in value:
                raise self.fail(f"{field}.{key}" if field else key, "a value (required)")
        return value

    def integer(self, value: Any, field: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(field, f"an integer >= {minimum}", value)
        return value

    def gpus(self, value: Any, field: str) -> tuple[int, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(field, "a non-empty list of machine-local GPU indices", value)
        out = tuple(self.integer(v, f"{field}[{i}]") for i, v in enumerate(value))
        if len(set(out)) != len(out):
            raise self.fail(field, "distinct GPU indices", value)
        return out

    def gpu_map(self, value: Any, field: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """``{"0": [1, 2]}`` -> ``((0, (1, 2)),)``, keys as machine-local GPU indices."""
        if not isinstance(value, dict) or not value:
            raise self.fail(field, 'a non-empty object {"GPU": [GPUs]}', value)
        out = []
        for key, gpus in value.items():
            if not key.isdigit():
                raise self.fail(f"{field}.{key}", "a machine-local GPU index as key", key)
            out.append((int(key), self.gpus(gpus, f"{field}.{key}")))
        return tuple(sorted(out))


def _intranode(r: _Reader, data: Any) -> IntraNode:
    data = r.obj(data, "intranode", _INTRA, ("strategy",))
    strategy = data["strategy"]
    if strategy not in INTRANODE_STRATEGIES:
        raise r.fail("intranode.strategy", f"one of {', '.join(INTRANODE_STRATEGIES)}", strategy)
    if strategy == "none":
        for key in ("switches", "hyperedge"):
            if key in data:
                raise r.fail(f"intranode.{key}", 'nothing with strategy "none" (only "switch" has it)')
        return IntraNode("none")
    for key in ("switches", "hyperedge"):
        if key not in data:
            raise r.fail(f"intranode.{key}", 'a value (required with strategy "switch")')
    groups = data["switches"]
    if not isinstance(groups, list) or not groups:
        raise r.fail("intranode.switches", "a non-empty list of GPU groups", groups)
    switches = tuple(r.gpus(g, f"intranode.switches[{i}]") for i, g in enumerate(groups))
    for i, group in enumerate(switches):
        if len(group) < 2:
            raise r.fail(f"intranode.switches[{i}]", "at least 2 GPUs in a switch group", list(group))
    policy = data["hyperedge"]
    if policy not in HYPEREDGE_POLICIES:
        raise r.fail("intranode.hyperedge", f"one of {', '.join(HYPEREDGE_POLICIES)}", policy)
    return IntraNode("switch", switches, policy)


def _internode(r: _Reader, data: Any) -> InterNode | None:
    if data is None:
        return None
    data = r.obj(data, "internode", _INTER, ("strategy", "connections"))
    if data["strategy"] != "relay":
        raise r.fail("internode.strategy", '"relay" (the only inter-node strategy)', data["strategy"])
    conn = data["connections"]
    if isinstance(conn, str):
        if conn not in CONNECTION_KINDS:
            raise r.fail(
                "internode.connections", f'{" or ".join(CONNECTION_KINDS)} or {{"GPU": [GPUs]}}', conn
            )
        connections: Any = conn
    else:
        connections = r.gpu_map(conn, "internode.connections")
    senders = r.gpu_map(data["senders"], "internode.senders") if "senders" in data else ()
    seen: dict[int, int] = {}
    for sender, gpus in senders:
        for gpu in gpus:
            if gpu in seen:
                raise r.fail(
                    f"internode.senders.{sender}",
                    f"each GPU under one sender (GPU {gpu} is also under {seen[gpu]})",
                )
            seen[gpu] = sender
    return InterNode("relay", connections, senders)


def _symmetry(r: _Reader, data: Any) -> tuple[tuple[int, int], ...]:
    if not isinstance(data, list):
        raise r.fail("symmetry_offsets", "a list of [offset, group size] pairs", data)
    out = []
    for i, pair in enumerate(data):
        field = f"symmetry_offsets[{i}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise r.fail(field, "an [offset, group size] pair", pair)
        offset = r.integer(pair[0], f"{field}[0]", 1)
        size = r.integer(pair[1], f"{field}[1]", 2)
        if offset % size == 0:
            raise r.fail(
                field, "an offset that is not a multiple of the group size (that is no rotation)", pair
            )
        out.append((offset, size))
    return tuple(out)


def sketch_from_dict(data: Any, where: str = "<sketch>") -> Sketch:
    """Parse a sketch document, checking keys, types and ranges (not the topology)."""
    r = _Reader(where)
    data = r.obj(data, "", _TOP, ("format", "name"))
    if data["format"] != FORMAT:
        raise r.fail("format", f'"{FORMAT}"', data["format"])
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise r.fail("name", "a non-empty string", name)
    comment = data.get("comment", "")
    if not isinstance(comment, str):
        raise r.fail("comment", "a string", comment)
    topology = data.get("topology")
    if topology is not None and (not isinstance(topology, str) or not topology):
        raise r.fail("topology", "a topology name", topology)
    chunkup: int | None = None
    if "chunkup" in data and data["chunkup"] != "auto":
        chunkup = r.integer(data["chunkup"], "chunkup", 1)
    target: int | None = None
    if "target_size" in data:
        value = data["target_size"]
        match = _SIZE.match(value) if isinstance(value, str) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            target = value
        elif match and int(match[1]) >= 1:
            target = int(match[1]) * _UNITS[match[2] or "B"]
        else:
            raise r.fail("target_size", "a size in bytes or like 1GiB (B, KiB, MiB, GiB)", value)
    return Sketch(
        name=name,
        intranode=_intranode(r, data.get("intranode", {"strategy": "none"})),
        internode=_internode(r, data.get("internode")),
        symmetry_offsets=_symmetry(r, data.get("symmetry_offsets", [])),
        chunkup=chunkup,
        target_size_bytes=target,
        topology=topology,
        comment=comment,
        source=where,
    )


def sketch_to_dict(sketch: Sketch) -> dict[str, Any]:
    """The JSON document of a sketch (the reader's inverse)."""
    out: dict[str, Any] = {"format": FORMAT, "name": sketch.name}
    if sketch.comment:
        out["comment"] = sketch.comment
    if sketch.topology:
        out["topology"] = sketch.topology
    intra: dict[str, Any] = {"strategy": sketch.intranode.strategy}
    if sketch.intranode.strategy == "switch":
        intra["switches"] = [list(g) for g in sketch.intranode.switches]
        intra["hyperedge"] = sketch.intranode.hyperedge
    out["intranode"] = intra
    if sketch.internode is not None:
        conn = sketch.internode.connections
        inter: dict[str, Any] = {
            "strategy": sketch.internode.strategy,
            "connections": conn if isinstance(conn, str) else {str(s): list(r) for s, r in conn},
        }
        if sketch.internode.senders:
            inter["senders"] = {str(s): list(g) for s, g in sketch.internode.senders}
        out["internode"] = inter
    out["symmetry_offsets"] = [list(p) for p in sketch.symmetry_offsets]
    out["chunkup"] = sketch.chunkup if sketch.chunkup is not None else "auto"
    if sketch.target_size_bytes is not None:
        out["target_size"] = sketch.target_size_bytes
    return out


def shipped_sketches() -> list[str]:
    """Names of the sketches shipped in ``sketches/shipped``."""
    folder = resources.files("sketches") / "shipped"
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def load_sketch(name_or_path: str | Path | Sketch) -> Sketch:
    """A shipped sketch by name (``ndv2x2-relay``) or a JSON file; a Sketch passes through."""
    if isinstance(name_or_path, Sketch):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".json") or path.exists():
        if not path.exists():
            raise SketchError(f"{path}: no such sketch file")
        return sketch_from_dict(read_json_file(path, SketchError), where=str(path))
    if text in shipped_sketches():
        where = f"sketches/shipped/{text}.json"
        doc = json.loads((resources.files("sketches") / "shipped" / f"{text}.json").read_text())
        return sketch_from_dict(doc, where=where)
    raise SketchError(
        f"unknown sketch {text!r}: expected a shipped sketch ({', '.join(shipped_sketches())}) or a JSON file"
    )
