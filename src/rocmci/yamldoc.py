"""YAML with positions: libyaml composes the node tree, we build plain data from it.

Building the data ourselves lets us keep the line and column of every key and item, reject
duplicate keys (PyYAML keeps the last one silently, as Buildkite does), and bound what YAML
aliases may expand to, so a "billion laughs" document fails fast instead of eating memory.

Values are read by the YAML 1.2 core schema as serde_yaml (minijinja-cli's reader) applies it: a
plain scalar is null, true/false, an integer or a float when it looks exactly like one, and text
otherwise. PyYAML's YAML 1.1 extras never apply: `2024-13-45` and `2024-01-01` stay text (no dates),
`no`/`on` stay text (no booleans), `1_000`, `1:20` and `0100` (a redundant leading zero) stay text.
Explicit tags other than the core ones (`!!timestamp`, `!!binary`, `!!set`, `!!python/...`,
`!custom`) and core tags on values that do not fit them (`!!int two`) are unreadable input with
file:line. Mapping keys are always text (`1:` is the key "1"): every file rocmci reads uses keys as
names. `parse(..., plain=...)` reads a document the way another program does instead
(buildkite-agent, pipeline/scalars.py): every plain scalar and key goes through the given
functions, with the same bounds. Integers are bounded (MAX_INT_CHARS) so a huge number is a
one-line error, not Python's int-string limit.
"""

from __future__ import annotations

import gc
import math
import re
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

# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), one pattern per type. Plain
# scalars are typed by the one combined pattern below; each type's own pattern is compiled (and cached by
# `re`) only when an explicit tag (`!!int 0x1F`) asks for it, which real step files never do.
_CORE_NULL = r"~|null|Null|NULL|"
_CORE_BOOL = r"true|True|TRUE|false|False|FALSE"
# serde_yaml's integers (what minijinja-cli reads; see pipeline/scalars.py): 0x/0o/0b with an optional sign,
# and decimals without a redundant leading zero -- `0100` and `-007` are text, not numbers.
_CORE_INT = r"[-+]?(?:0|[1-9][0-9]*)|[-+]?0o[0-7]+|[-+]?0x[0-9a-fA-F]+|[-+]?0b[01]+"
_LEADING_ZERO = r"[-+]?0[0-9]+"
_CORE_FLOAT = r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
_CORE = re.compile(
    rf"(?P<text>{_LEADING_ZERO})|(?P<null>{_CORE_NULL})|(?P<bool>{_CORE_BOOL})"
    rf"|(?P<int>{_CORE_INT})|(?P<float>{_CORE_FLOAT})"
)
_CORE_TAG = {
    "text": "tag:yaml.org,2002:str",
    "null": _PLAIN_NULL,
    "bool": _PLAIN_BOOL,
    "int": _PLAIN_INT,
    "float": _PLAIN_FLOAT,
}
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


class _PlainLoader(_Loader):
    """Leaves plain scalars unresolved (a private tag), for a caller that types them itself."""

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return _MERGE if value == "<<" else _AS_WRITTEN
        return super().resolve(kind, value, implicit)


_AS_WRITTEN = "rocmci:plain"

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
_SCALAR = yaml.ScalarNode


class Pos(NamedTuple):
    line: int  # 1-based
    col: int  # 1-based


class DuplicateKey(NamedTuple):
    path: Path_
    key: Any
    pos: Pos
    first: Pos


class Document:
    """A parsed document: its data, and where each part of it was written."""

    __slots__ = ("filename", "data", "positions", "duplicates")

    def __init__(self, filename: str, data: Any = None) -> None:
        self.filename = filename
        self.data = data
        # path -> the YAML node (or key node) there; turned into a Pos only when a finding needs one
        self.positions: dict[Path_, yaml.Node] = {}
        self.duplicates: list[DuplicateKey] = []

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
    def __init__(self, doc: Document, plain=None, plain_key=None) -> None:
        self.doc = doc
        self.plain, self.plain_key = plain, plain_key
        self.alias_nodes = 0
        self._seen: set[int] = set()  # ids of collections built so far

    def build(self, node: yaml.Node, path: Path_, depth: int, via_alias: bool) -> Any:
        cls = node.__class__
        if cls is yaml.ScalarNode:  # most nodes: keep this path short
            if via_alias:
                self._count_alias(node)
            if node.tag == _STR:
                return node.value
            return self._typed(node, self.plain) if node.tag == _AS_WRITTEN else self.scalar(node)
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
                if item.__class__ is _SCALAR and item.tag == _STR and not via_alias:
                    out.append(item.value)  # most items: text, built here without a call
                else:
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
        positions = self.doc.positions
        for key_node, value_node in node.value:
            if key_node.__class__ is _SCALAR and key_node.tag == _STR and not via_alias:
                key = key_node.value  # most keys: text, read here without a call
            elif key_node.tag == _MERGE:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    # `*anchor` was built where the anchor stands, so build() counts it as an alias; a
                    # mapping written here is read once, and counts only when all of this is an alias's
                    value = self.build(source, path, depth + 1, via_alias)
                    if not isinstance(value, dict):
                        raise InputError("'<<' must merge a mapping", where=self._where(source))
                    for k, v in value.items():
                        merged.setdefault(k, v)
                continue
            else:
                key = self.key(key_node, via_alias)
            if key in out:
                self.doc.duplicates.append(DuplicateKey((*path, key), key, _pos(key_node), _pos(key_pos[key])))
            key_pos[key] = key_node
            child = (*path, key)
            positions[child] = key_node
            if value_node.__class__ is _SCALAR and value_node.tag == _STR and not via_alias:
                out[key] = value_node.value
            else:
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
        if node.tag == _AS_WRITTEN:
            return self._typed(node, self.plain_key)
        if node.tag != _STR and node.tag not in _PLAIN_TAGS:
            raise self._tag_error(node)
        return node.value

    def _typed(self, node: yaml.ScalarNode, fn) -> Any:
        try:
            return fn(node.value)
        except ValueError as exc:
            raise InputError(str(exc), where=self._where(node)) from None

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
        if tag == _MERGE:
            return value  # a `<<` value (label: <<) is text, as serde_yaml reads it; only a `<<` key merges
        # An explicit tag: only the core ones, and only on a value that is one of them.
        pattern = _CORE_TAGS.get(tag)
        if pattern is None or not re.fullmatch(pattern, value):  # a decimal integer is a float's spelling too
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
        body = value.lstrip("+-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(body[:2])
        if base is None:
            return int(value)
        return -int(body[2:], base) if value[0] == "-" else int(body[2:], base)

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


def _float(value: str) -> float | str:
    special = value.lstrip("+-").lower()
    if special == ".inf":
        return -math.inf if value[0] == "-" else math.inf
    if special == ".nan":
        return math.nan
    number = float(value)
    return value if math.isinf(number) else number  # serde_yaml keeps a float that overflows (1e400) as text


def _pos(node: yaml.Node) -> Pos:
    mark = node.start_mark
    return Pos(mark.line + 1, mark.column + 1)


def parse(text: str | bytes, filename: str, *, plain=None, plain_key=None) -> Document:
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
        return _parse(text, filename, doc, plain, plain_key)
    finally:
        if gc_was_enabled:
            gc.enable()


# libyaml's composer (the C extension) recurses once per nesting level with no limit of its own: about
# 30,000 levels ('[' * 40_000, an 80 KB file) overflow the C stack and kill the process with SIGSEGV before
# _Builder can count levels. Depth is proven below this bound cheaply, or by a pass over the events.
_COMPOSE_SAFE_DEPTH = 2000


def _could_nest_deeply(text: str) -> bool:
    """An upper bound on nesting, in one C-speed pass: flow levels need a '[' or '{' each, and block levels
    a column more each (at most the longest line). Real step files stay far below the bound."""
    flow = text.count("[") + text.count("{")
    return flow + max(map(len, text.split("\n"))) > _COMPOSE_SAFE_DEPTH


def _refuse_deep_nesting(text: str, filename: str) -> None:
    """Walk the parser's events (libyaml's parser keeps an explicit stack) and refuse nesting past
    MAX_DEPTH before the recursive composer sees it. Syntax errors are left to the composing pass."""
    events = _Base(text)
    depth = 0
    try:
        while events.check_event():
            event = events.get_event()
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH + 1:  # the root collection is level 0, as _Builder counts
                    mark = event.start_mark
                    raise InputError(
                        f"nested deeper than {MAX_DEPTH} levels",
                        where=f"{filename}:{mark.line + 1}:{mark.column + 1}",
                        hint="flatten the document",
                    )
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        # The libyaml that PyYAML 6.0.4's wheels bundle has a nesting limit of its own (1,000 levels), and
        # its scanner reaches it while looking ahead, before this pass has counted MAX_DEPTH events.
        if "maximum nesting depth" in (exc.problem or "") and exc.problem_mark is not None:
            mark = exc.problem_mark
            raise InputError(
                f"nested deeper than {MAX_DEPTH} levels",
                where=f"{filename}:{mark.line + 1}:{mark.column + 1}",
                hint="flatten the document",
            ) from None
        return
    except yaml.YAMLError:
        return
    finally:
        events.dispose()


def _parse(text: str, filename: str, doc: Document, plain=None, plain_key=None) -> Document:
    if _could_nest_deeply(text):
        _refuse_deep_nesting(text, filename)
    loader = _PlainLoader(text) if plain is not None else _Loader(text)
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
        doc.data = _Builder(doc, plain, plain_key).build(root, (), 0, False)
    except RecursionError:
        raise InputError("nested too deeply", where=filename) from None
    return doc


def load(path: Path, display: str | None = None, *, what: str | None = None) -> Document:
    """Read and parse a YAML file. `what` names the flag or setting the path came from, for errors."""
    from rocmci.files import read_bytes

    name = display or str(path)
    return parse(read_bytes(path, what=what, limit=MAX_BYTES, display=name), name)
