"""Write a pipeline as YAML text: block mappings and sequences, scalars quoted by the one YAML model.

A small writer for the shapes a pipeline has (mappings, lists, strings, numbers, booleans, null),
about twenty times faster than PyYAML's Python representer, which cost two thirds of
`pipeline.generate`. What it writes reads back identically under buildkite-agent's reader
(scalars.read_pipeline), PyYAML (YAML 1.1), ruamel.yaml (YAML 1.2) and, with `--format json`, json
(tests/unit/test_properties.py and tests/unit/test_yaml_model.py hold it to that).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rocmci.pipeline.scalars import plain_is_text

# Characters a YAML reader refuses, or (YAML 1.1) reads as line breaks or a byte-order mark, inside a
# double-quoted scalar: written as \u escapes, which JSON and YAML both read.
_NOT_YAML_PRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def quoted(text: str) -> str:
    """A double-quoted scalar: JSON's escapes are a subset of YAML's."""
    out = json.dumps(text, ensure_ascii=False)
    return _NOT_YAML_PRINTABLE.sub(_escape, out) if _NOT_YAML_PRINTABLE.search(out) else out


class _Writer:
    def __init__(self) -> None:
        self.parts: list[str] = []
        # text -> how it is written; most keys and many values repeat thousands of times
        self._strings: dict[str, str] = {}
        # (id, indent) of a nested block -> its text. A generated pipeline shares the blocks every step
        # repeats (the pod patch, the retry rules: generate.test_step): the second time one is met its text
        # is kept, and from the third on it is reused. The data is not changed while it is written, and
        # every object stays alive (so no id is reused) until dump() returns.
        self._blocks: dict[tuple[int, str], str] = {}
        self._met: set[tuple[int, str]] = set()

    def string(self, text: str) -> str:
        out = self._strings.get(text)
        if out is None:
            out = text if plain_is_text(text) else quoted(text)
            if len(self._strings) < 100_000:
                self._strings[text] = out
        return out

    def scalar(self, value: Any) -> str:
        if isinstance(value, str):
            return self.string(value)
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            return _float(value)
        raise TypeError(f"cannot write a {type(value).__name__} into a pipeline")  # pragma: no cover - a bug

    def flow(self, value: Any) -> str:
        """A nested list (or an empty collection) in flow style: [a, b], {}."""
        if isinstance(value, list):
            return "[" + ", ".join(self.flow(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self.string(str(k))}: {self.flow(v)}" for k, v in value.items()) + "}"
        text = self.scalar(value)
        # In flow context ',', '[', ']', '{', '}' end a plain scalar: quote any text holding them.
        return quoted(value) if isinstance(value, str) and text == value and _FLOW_SPECIAL.search(value) else text

    def mapping(self, value: dict, indent: str, first: str) -> None:
        """Block mapping; `first` starts the first line (the indent, or the indent and "- " of a list item)."""
        append = self.parts.append
        strings = self._strings
        inner = indent + "  "
        head = first
        for key, item in value.items():
            name = strings.get(key) if type(key) is str else None
            if name is None:
                name = self.string(key if isinstance(key, str) else str(key))
            kind = type(item)
            if kind is str:
                text = strings.get(item)
                append(f"{head}{name}: {text if text is not None else self.string(item)}\n")
            elif (kind is dict or kind is list) and item:
                append(f"{head}{name}:\n")
                block = (id(item), indent)
                text = self._blocks.get(block)
                if text is not None:
                    append(text)
                else:
                    start = len(self.parts)
                    if kind is dict:
                        self.mapping(item, inner, inner)
                    else:
                        self.sequence(item, indent)
                    if block in self._met:
                        self._blocks[block] = "".join(self.parts[start:])
                    self._met.add(block)
            elif kind is dict or kind is list:
                append(f"{head}{name}: {'{}' if kind is dict else '[]'}\n")
            else:
                append(f"{head}{name}: {self.scalar(item)}\n")
            head = indent

    def sequence(self, value: list, indent: str) -> None:
        append = self.parts.append
        strings = self._strings
        dash = indent + "- "
        inner = indent + "  "
        for item in value:
            kind = type(item)
            if kind is str:
                text = strings.get(item)
                append(f"{dash}{text if text is not None else self.string(item)}\n")
            elif kind is dict and item:
                self.mapping(item, inner, dash)
            elif kind is dict or kind is list:
                append(f"{dash}{self.flow(item)}\n")
            else:
                append(f"{dash}{self.scalar(item)}\n")


_FLOW_SPECIAL = re.compile(r"[,\[\]{}]")


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    # YAML 1.1 (PyYAML) reads a float only with a '.' and a signed exponent: 1e+20 -> 1.0e+20.
    if "e" in text and "." not in text:
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def dump(data: dict) -> str:
    """`data` (a mapping) as block-style YAML text."""
    writer = _Writer()
    writer.mapping(data, "", "")
    return "".join(writer.parts)
