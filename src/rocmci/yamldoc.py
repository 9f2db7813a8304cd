"""YAML with positions: libyaml composes the node tree, we build plain data from it.

Building the data ourselves lets us keep the line and column of every key and item, reject
duplicate keys (PyYAML keeps the last one silently, as Buildkite does), and bound what YAML
aliases may expand to, so a "billion laughs" document fails fast instead of eating memory.

Values are read by the YAML 1.2 core schema only: a plain scalar is null, true/false, an integer
or a float when it looks exactly like one, and text otherwise. PyYAML's YAML 1.1 extras never
apply: `2024-13-45` and `2024-01-01` stay text (no dates), `no`/`on` stay text (no booleans),
`1_000` and `1:20` stay text. Explicit tags other than the core ones (`!!timestamp`, `!!binary`,
`!!set`, `!!python/...`, `!custom`) and core tags on values that do not fit them (`!!int two`) are
unreadable input with file:line. Mapping keys are always text (`1:` is the key "1"): every file
rocmci reads uses keys as names. Integers are bounded (MAX_INT_CHARS) so a huge number is a
one-line error, not Python's int-string limit.
"""

from __future__ import annotations

import gc
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from rocmci.errors import InputError

try:  # the C parser is about ten times faster; fall back where libyaml is missing
    from yaml import CSafeLoader as _Base
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Base  # type: ignore[assignment]


# Tags the resolver gives plain scalars. They are private names, so a value tagged explicitly in the
# text (`!!int two`) is told apart from one that merely looks like a number and is checked on its own.
_PLAIN_NULL = "rocmci:null"
_PLAIN_BOOL = "rocmci:bool"
_PLAIN_INT = "rocmci:int"
_PLAIN_FLOAT = "rocmci:float"
_PLAIN_TAGS = frozenset({_PLAIN_NULL, _PLAIN_BOOL, _PLAIN_INT, _PLAIN_FLOAT})

# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), one pattern per type.
_CORE_NULL = re.compile(r"~|null|Null|NULL|")
_CORE_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_CORE_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(
    r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)
_CORE = re.compile(
    rf"(?P<null>{_CORE_NULL.pattern})|(?P<bool>{_CORE_BOOL.pattern})"
    rf"|(?P<int>{_CORE_INT.pattern})|(?P<float>{_CORE_FLOAT.pattern})"
)
_CORE_TAG = {"null": _PLAIN_NULL, "bool": _PLAIN_BOOL, "int": _PLAIN_INT, "float": _PLAIN_FLOAT}
_MAYBE_TYPED = frozenset("0123456789+-.~nNtTfF<")  # first characters of anything that is not plain text


class _Loader(_Base):
    """The safe parser with the YAML 1.2 core resolver in place of PyYAML's YAML 1.1 one.

    libyaml composes in C but asks the Python resolver about every scalar; step files repeat the
    same keys and values thousands of times, so remembering answers saves most of that work.
    """

    _memo: dict = {}

    def resolve(self, kind, value, implicit):
        if kind is not yaml.ScalarNode:
            return _SEQ if kind is yaml.SequenceNode else _MAP
        if not implicit[0] or (value and value[0] not in _MAYBE_TYPED):
            return _STR  # quoted, or plain text that cannot be a null, boolean or number
        key = value
        tag = self._memo.get(key)
        if tag is None:
            if value == "<<":
                tag = _MERGE
            else:
                match = _CORE.fullmatch(value)
                tag = _CORE_TAG[match.lastgroup] if match else _STR
            if len(self._memo) < 50_000:
                self._memo[key] = tag
        return tag


Path_ = tuple[Any, ...]  # keys and indices from the document root

MAX_DEPTH = 100
MAX_ALIAS_NODES = 100_000  # nodes reached through aliases; real step files use none
MAX_BYTES = 16 * 2**20
MAX_INT_CHARS = 21  # sign and 20 digits: more than any count, size or timeout; avoids int('9' * 5000)

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"
_CORE_TAGS = {_NULL: _CORE_NULL, _BOOL: _CORE_BOOL, _INT: _CORE_INT, _FLOAT: _CORE_FLOAT}


class Pos(NamedTuple):
    line: int  # 1-based
    col: int  # 1-based


class DuplicateKey(NamedTuple):
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
        self._seen: set[int] = set()  # ids of collections built so far

    def build(self, node: yaml.Node, path: Path_, depth: int, via_alias: bool) -> Any:
        cls = node.__class__
        if cls is yaml.ScalarNode:  # most nodes: keep this path short
            if via_alias:
                self._count_alias(node)
            return node.value if node.tag == _STR else self.scalar(node)
        if node.tag != _SEQ and node.tag != _MAP:
            raise self._tag_error(node)
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
            key = self.key(key_node, via_alias)
            if key in out:
                self.doc.duplicates.append(DuplicateKey((*path, key), key, _pos(key_node), _pos(key_pos[key])))
            key_pos[key] = key_node
            child = (*path, key)
            self.doc.positions[child] = key_node
            out[key] = self.build(value_node, child, depth + 1, via_alias)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out

    def key(self, node: yaml.Node, via_alias: bool) -> str:
        """Keys are names in every file rocmci reads: kept as the text written, never typed."""
        if node.__class__ is not yaml.ScalarNode:
            raise InputError("a mapping key must be a scalar", where=self._where(node))
        if via_alias:
            self._count_alias(node)
        if node.tag != _STR and node.tag not in _PLAIN_TAGS:
            raise self._tag_error(node)
        return node.value

    def scalar(self, node: yaml.ScalarNode) -> Any:
        tag = node.tag
        value = node.value
        if tag == _PLAIN_INT:
            return self._int(node, value)
        if tag == _PLAIN_NULL:
            return None
        if tag == _PLAIN_BOOL:
            return value[0] in "tT"
        if tag == _PLAIN_FLOAT:
            return _float(value)
        if tag == _STR:
            return value
        # An explicit tag: only the core ones, and only on a value that is one of them.
        pattern = _CORE_TAGS.get(tag)
        if pattern is None or not pattern.fullmatch(value):
            if not (tag == _FLOAT and _CORE_INT.fullmatch(value)):
                raise self._tag_error(node)
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return value[0] in "tT"
        if tag == _INT:
            return self._int(node, value)
        return _float(value)

    def _int(self, node: yaml.ScalarNode, value: str) -> int:
        if len(value) > MAX_INT_CHARS:
            raise InputError(
                f"a {len(value)}-character integer is too large (the limit is {MAX_INT_CHARS} characters)",
                where=self._where(node),
                hint="quote it to keep it as text",
            )
        if value[:2] == "0x":
            return int(value[2:], 16)
        if value[:2] == "0o":
            return int(value[2:], 8)
        return int(value)

    def _tag_error(self, node: yaml.Node) -> InputError:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        if isinstance(node, yaml.ScalarNode) and node.tag in _CORE_TAGS:
            shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
            return InputError(
                f"{shown!r} is not a valid {tag} value",
                where=self._where(node),
                hint="fix the value or remove the tag",
            )
        return InputError(
            f"the YAML tag {tag} is not supported",
            where=self._where(node),
            hint="remove the tag: values are read as text, numbers, true/false or null",
        )

    def _where(self, node: yaml.Node) -> str:
        p = _pos(node)
        return f"{self.doc.filename}:{p.line}:{p.col}"


def _float(value: str) -> float:
    special = value.lstrip("+-").lower()
    if special == ".inf":
        return -math.inf if value[0] == "-" else math.inf
    if special == ".nan":
        return math.nan
    return float(value)


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


def load(path: Path, display: str | None = None, *, what: str | None = None) -> Document:
    """Read and parse a YAML file. `what` names the flag or setting the path came from, for errors."""
    from rocmci.files import read_bytes

    name = display or str(path)
    return parse(read_bytes(path, what=what, limit=MAX_BYTES, display=name), name)
