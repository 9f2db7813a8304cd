"""YAML with positions: libyaml composes the node tree, we build plain data from it.

Building the data ourselves lets us keep the line and column of every key and item, reject
duplicate keys (PyYAML keeps the last one silently, as Buildkite does), and bound what YAML
aliases may expand to, so a "billion laughs" document fails fast instead of eating memory.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rocmci.errors import InputError

try:  # the C parser is about ten times faster; fall back where libyaml is missing
    from yaml import CSafeLoader as _Base
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Base  # type: ignore[assignment]


class _Loader(_Base):
    """The safe loader with a memo in front of the implicit-tag resolver.

    libyaml composes in C but asks the Python resolver about every scalar; step files repeat the
    same keys and values thousands of times, so remembering answers saves most of that work.
    """

    _memo: dict = {}

    def resolve(self, kind, value, implicit):
        key = (kind, value, implicit)
        tag = self._memo.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(self._memo) < 50_000:
                self._memo[key] = tag
        return tag


Path_ = tuple[Any, ...]  # keys and indices from the document root

MAX_DEPTH = 100
MAX_ALIAS_NODES = 100_000  # nodes reached through aliases; real step files use none
MAX_BYTES = 16 * 2**20

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_MERGE = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Pos:
    line: int  # 1-based
    col: int  # 1-based


@dataclass
class DuplicateKey:
    path: Path_
    key: Any
    pos: Pos
    first: Pos


@dataclass
class Document:
    filename: str
    data: Any
    # path -> the YAML node (or key node) there; turned into a Pos only when a finding needs one
    positions: dict[Path_, yaml.Node] = field(default_factory=dict)
    duplicates: list[DuplicateKey] = field(default_factory=list)

    def pos(self, path: Path_) -> Pos:
        """Position of the node at path, or of its nearest ancestor that has one."""
        while True:
            found = self.positions.get(path)
            if found is not None:
                return _pos(found)
            if not path:
                return Pos(1, 1)
            path = path[:-1]

    def refuse_duplicates(self) -> None:
        """For files where a duplicate key is unreadable input rather than a finding (inventory, registry)."""
        if self.duplicates:
            d = self.duplicates[0]
            raise InputError(f"duplicate key '{d.key}' (first at line {d.first.line})", where=self.where(d.path))

    def where(self, path: Path_) -> str:
        p = self.pos(path)
        return f"{self.filename}:{p.line}:{p.col}"


class _Builder:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.alias_nodes = 0
        self._scalars = yaml.constructor.SafeConstructor()
        self._seen: set[int] = set()  # ids of collections built so far

    def build(self, node: yaml.Node, path: Path_, depth: int, via_alias: bool) -> Any:
        cls = node.__class__
        if cls is yaml.ScalarNode:  # most nodes: keep this path short
            if via_alias:
                self._count_alias(node)
            return node.value if node.tag == _STR else self.scalar(node)
        if depth > MAX_DEPTH:
            raise InputError(
                f"nested deeper than {MAX_DEPTH} levels", where=self._where(node), hint="flatten the document"
            )
        # A collection met twice is reached through an alias; only collections can multiply a document.
        ident = id(node)
        if ident in self._seen:
            via_alias = True
        else:
            self._seen.add(ident)
        if via_alias:
            self._count_alias(node)
        if cls is yaml.SequenceNode:
            out = []
            positions = self.doc.positions
            for i, item in enumerate(node.value):
                child = (*path, i)
                positions[child] = item
                out.append(self.build(item, child, depth + 1, via_alias))
            return out
        if cls is yaml.MappingNode:
            return self.mapping(node, path, depth, via_alias)
        raise InputError(f"unsupported YAML node {node.tag}", where=self._where(node))  # pragma: no cover

    def _count_alias(self, node: yaml.Node) -> None:
        self.alias_nodes += 1
        if self.alias_nodes > MAX_ALIAS_NODES:
            raise InputError(
                f"YAML aliases expand to more than {MAX_ALIAS_NODES} nodes",
                where=self._where(node),
                hint="an alias bomb? write the values out or use fewer nested aliases",
            )

    def mapping(self, node: yaml.MappingNode, path: Path_, depth: int, via_alias: bool) -> dict:
        out: dict[Any, Any] = {}
        key_pos: dict[Any, yaml.Node] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    value = self.build(source, path, depth + 1, True)
                    if not isinstance(value, dict):
                        raise InputError("'<<' must merge a mapping", where=self._where(source))
                    for k, v in value.items():
                        merged.setdefault(k, v)
                continue
            key = self.build(key_node, path, depth + 1, via_alias)
            if isinstance(key, list | dict):
                raise InputError("a mapping key must be a scalar", where=self._where(key_node))
            if key in out:
                self.doc.duplicates.append(DuplicateKey((*path, key), key, _pos(key_node), _pos(key_pos[key])))
            key_pos[key] = key_node
            child = (*path, key)
            self.doc.positions[child] = key_node
            out[key] = self.build(value_node, child, depth + 1, via_alias)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out

    def scalar(self, node: yaml.ScalarNode) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return node.value.lower() in ("true", "yes", "on", "y")
        if tag == _INT and node.value.isdigit():
            return int(node.value)
        try:
            return self._scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise InputError(f"bad value: {getattr(exc, 'problem', exc)}", where=self._where(node)) from None

    def _where(self, node: yaml.Node) -> str:
        p = _pos(node)
        return f"{self.doc.filename}:{p.line}:{p.col}"


def _pos(node: yaml.Node) -> Pos:
    mark = node.start_mark
    return Pos(mark.line + 1, mark.column + 1)


def parse(text: str | bytes, filename: str) -> Document:
    """Parse one YAML document; InputError (exit 2) for anything that is not readable YAML."""
    if isinstance(text, bytes):
        if text.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise InputError("UTF-16 text, not UTF-8", where=filename, hint="save the file as UTF-8")
        if b"\0" in text[:8192]:
            raise InputError("binary file, not YAML", where=filename)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 (byte {exc.start})", where=filename, hint="save the file as UTF-8") from None
    doc = Document(filename=filename, data=None)
    # Composing allocates many small objects that form no cycles; collecting during it only costs.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(text, filename, doc)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse(text: str, filename: str, doc: Document) -> Document:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        what = ", ".join(part for part in (exc.context, exc.problem) if part)
        raise InputError(f"invalid YAML: {what}", where=where) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError(
            f"invalid YAML: control character #x{code:04x} is not allowed", where=f"{filename}:{line}:{col}"
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", where=filename) from None
    except RecursionError:
        raise InputError("nested too deeply to parse", where=filename) from None
    finally:
        loader.dispose()
    if root is None:
        return doc
    doc.positions[()] = root
    try:
        doc.data = _Builder(doc).build(root, (), 0, False)
    except RecursionError:
        raise InputError("nested too deeply", where=filename) from None
    return doc


def load(path: Path, display: str | None = None) -> Document:
    name = display or str(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise InputError(f"file is {size} bytes; the limit is {MAX_BYTES}", where=name)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", where=name) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", where=name) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=name) from None
    return parse(raw, name)
