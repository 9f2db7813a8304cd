"""What a value written into ci-infra's template text becomes once Buildkite parses the YAML.

The template pastes step-file text into YAML without quoting it for YAML: labels and commands inside
double-quoted scalars (so a backslash is unescaped once more, and a bad escape breaks the upload), keys,
`no_plugin` commands and env values as plain scalars (so `true` becomes a boolean, ': ' breaks the
mapping). rocmci produces the same values, and says when the text would not parse at all.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import yaml

try:
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

_SAFE_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_\-:./]*")  # no ': ', ' #', leading indicator
_UNESCAPED_QUOTE = re.compile(r'(?:^|[^\\])(?:\\\\)*"')  # a quote after an even number of backslashes
_NOT_PLAIN_SCALAR_WORDS = re.compile(r"(?i)(true|false|yes|no|on|off|y|n|null|~|[-+.0-9].*)")


class TemplateBreak(ValueError):
    """The text would make the template's output unparsable (or change its structure)."""


def _fold_like_sed(text: str) -> str:
    # bootstrap-amd.sh deletes whitespace-only lines from the rendered file, also inside a scalar.
    lines = text.split("\n")
    return "\n".join([lines[0], *(line for line in lines[1:] if line.strip())])


def _load(text: str, what: str) -> Any:
    """`text` as the YAML reader of the uploaded pipeline reads it; TemplateBreak when it cannot."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - safe loader
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TemplateBreak(f"not a valid {what} once pasted by the template: {problem}") from None


@lru_cache(maxsize=4096)
def _parse_double_quoted(body: str) -> str:
    value = _load(f'"{body}"', "double-quoted YAML string")
    if not isinstance(value, str):  # pragma: no cover - a quoted scalar is always a string
        raise TemplateBreak("not a string once pasted by the template")
    return value


def double_quoted(body: str) -> str:
    """The value of `"<body>"` as the template writes it (body pasted verbatim between the quotes)."""
    if "\\" not in body and '"' not in body and "\n" not in body:
        return body
    if _UNESCAPED_QUOTE.search(body):
        raise TemplateBreak("contains a double quote that the template does not escape: the YAML would break")
    return _parse_double_quoted(_fold_like_sed(body))


def command_text(command: str) -> str:
    """`command | replace('"', '\\"')`: the template escapes quotes only, so backslashes are unescaped once."""
    if "\\" not in command and "\n" not in command:
        return command  # the escaped quotes unescape back to themselves
    return double_quoted(command.replace('"', '\\"'))


@lru_cache(maxsize=4096)
def _parse_plain(text: str) -> Any:
    data = _load(f"k: {text}\n", "plain YAML value")
    if not isinstance(data, dict) or list(data) != ["k"]:
        raise TemplateBreak("changes the structure of the YAML once pasted by the template")
    return data["k"]


def plain(text: str) -> Any:
    """The value of `key: <text>` (a plain scalar, as the template writes keys and no_plugin values)."""
    if "\n" in text:
        raise TemplateBreak("contains a line break: the template writes it as a plain YAML value")
    if _SAFE_PLAIN.fullmatch(text) and not _NOT_PLAIN_SCALAR_WORDS.fullmatch(text) and not text.endswith(":"):
        return text
    return _parse_plain(text)
