"""How a value travels from vLLM's step file to the pipeline Buildkite runs: the one model of it.

Three programs read or write each value, and each has its own YAML rules (README "How values are read"):

1. minijinja-cli reads the step file with serde_yaml's rules (serde_yml at 2.3.1, the version
   bootstrap-amd.sh installs; same scalar rules). rocmci's step-file reader, yamldoc, follows them:
   `yes`/`on` stay text, `0100` (digits after a leading zero) is text, `0x1F`/`0b101` are integers.
2. The template prints values with `{{ }}` (amdsteps.rust_text; floats with `rust_float`) into YAML
   text, quoting only some of them: labels and commands inside "...", keys, `no_plugin` commands and
   env values, `timeout_in_minutes` and `parallelism` bare.
3. buildkite-agent parses the rendered text with gopkg.in/yaml.v3 (v3.0.1, through go-pipeline's
   ordered decoder) and types some fields: `env` values, `command`, `label` and `key` become Go
   strings (fmt.Sprint), mapping keys are canonicalised (`0x1F:` is the key "31"). yaml.v3 differs
   from both YAML 1.1 and 1.2: `yes`/`on`/`y` are text, `0777` and `010` are octal (511, 8), `1_000`
   is 1000, `2024-01-01` stays text when the field is untyped, `.nan`/`.inf` are floats.

Everything pasted into the template is re-read here with a reader bounded by construction: the text
is tokenised by libyaml's parser (events only, so an alias is never expanded) and a pasted value that
is more than one scalar is reported instead of built, so no input can grow in memory.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any, NamedTuple

import yaml

try:
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


class TemplateBreak(ValueError):
    """The text would make the template's output unparsable (or change its structure)."""


class GoUint64(int):
    """An integer yaml.v3 holds as uint64 (2**63 and up): go-pipeline cannot put it in a string field."""


# ------------------------------------------------------------------ stage 3: yaml.v3 plain scalars

_V3_MAP: dict[str, Any] = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_V3_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
# strconv.ParseInt(s, 0, 64) syntax: sign, then 0x/0o/0b prefix, a bare leading 0 (octal) or decimal.
_GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_GO_DATE = re.compile(r"[0-9]{4}-")  # parseTimestamp's quick check; the value then stays text (see below)
_INT64 = 2**63
_UINT64 = 2**64
_MAX_GO_DIGITS = 70  # longer digit runs overflow every Go integer and float parse, so they stay text


def _go_int(text: str) -> int | None:
    match = _GO_INT.fullmatch(text)
    if match is None:
        return None
    sign, body = match.groups()
    low = body.lower()
    if low[:2] in ("0x", "0o", "0b"):
        number = int(low[2:], {"x": 16, "o": 8, "b": 2}[low[1]])
    elif len(body) > 1 and body[0] == "0":
        number = int(body, 8)  # Go's base-0 parse: a leading 0 means octal
    else:
        number = int(body)
    return -number if sign == "-" else number


def agent_scalar(text: str) -> Any:
    """What yaml.v3 decodes a plain scalar to, into a Go `any` (go-pipeline's untyped fields).

    Timestamps are recognised by yaml.v3 but kept as the original text when decoded into `any`
    (its documented backward compatibility), so they are text here too.
    """
    if text in _V3_MAP:
        return _V3_MAP[text]
    first = text[0]
    if first == ".":
        try:
            return float(text) if _V3_FLOAT.fullmatch(text) else text
        except ValueError:  # pragma: no cover - the pattern admits only floats
            return text
    if not (first.isascii() and (first.isdigit() or first in "+-")):
        return text
    if len(text) > _MAX_GO_DIGITS:
        return text
    if _GO_DATE.match(text) and _looks_like_go_timestamp(text):
        return text
    plain = text.replace("_", "")
    number = _go_int(plain) if plain else None
    if number is not None:
        if -_INT64 <= number < _INT64:
            return number
        if 0 <= number < _UINT64:
            return GoUint64(number)
    if _V3_FLOAT.fullmatch(plain):
        value = float(plain)
        return value if not math.isinf(value) else text  # ParseFloat's range error: yaml.v3 keeps the text
    # yaml.v3's own 0b/0o handling (ParseInt on the digits after the prefix) covers what base 0 did not.
    for prefix, base in (("0b", 2), ("0o", 8), ("-0b", 2), ("-0o", 8)):
        if plain.startswith(prefix):
            digits = plain[len(prefix) :]
            if digits and all(c in "01234567"[:base] for c in digits):
                number = int(digits, base)
                return -number if prefix[0] == "-" else number
    return text


def _looks_like_go_timestamp(text: str) -> bool:
    # yaml.v3 tries "2006-1-2T15:4:5.999999999Z07:00", "2006-1-2 15:4:5.999999999" and "2006-1-2".
    return bool(
        re.fullmatch(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]+)?.*)?", text)
    )


def go_sprint(value: Any) -> str:
    """fmt.Sprint of a decoded scalar: what a Go string field (env, command, label, key) receives."""
    if value is None:
        return ""  # go-pipeline zeroes the field
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


def go_float(value: float) -> str:
    """Go's %v of a float64: shortest digits, exponent form below 1e-4 and from 1e21."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    from decimal import Decimal  # rare (a float pasted into a string field): not worth its import at start-up

    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    lead = len(text) + int(exponent) - 1  # the power of ten of the first digit
    minus = "-" if sign else ""
    if lead < -4 or lead >= 21:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if lead < 0 else '+'}{abs(lead):02d}"
    positional = format(Decimal(repr(abs(value))), "f")
    if "." in positional:
        positional = positional.rstrip("0").rstrip(".")
    return minus + positional


def rust_float(value: float) -> str:
    """A float printed by minijinja (Rust's Display): positional digits, always a decimal point."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    from decimal import Decimal

    text = format(Decimal(repr(value)), "f")
    return text if "." in text else text + ".0"


def rust_float_debug(value: float) -> str:
    """A float inside a printed list (Rust's `{:?}` of f64): exponent form below 1e-4 and from 1e16."""
    if math.isnan(value) or math.isinf(value) or value == 0 or 1e-4 <= abs(value) < 1e16:
        return rust_float(value)
    from decimal import Decimal

    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    lead = len(text) + int(exponent) - 1
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{lead}"


def canonical_key(text: str) -> str:
    """go-pipeline's canonicalMapKey: a plain key is decoded, then written back as text."""
    value = agent_scalar(text)
    if value is None:
        raise TemplateBreak("is an empty or null mapping key once pasted: buildkite-agent refuses the pipeline")
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_exp(value)
    return text


def _go_exp(value: float) -> str:
    # Go's %e: six digits after the point. Non-finite floats are written +Inf/NaN.
    if math.isnan(value) or math.isinf(value):
        return go_float(value)
    mantissa, _, exp = f"{value:.6e}".partition("e")
    return f"{mantissa}e{exp[0]}{int(exp[1:]):02d}"


# ------------------------------------------------------------------ writing: when plain text stays text

# Plain text every reader of the written pipeline takes as the same string: YAML 1.1 (PyYAML), 1.2
# (ruamel.yaml) and yaml.v3 (buildkite-agent). A letter, '_' or '/' first rules out numbers, dates,
# .nan, ~, = and <<; no ':', '#', quotes or brackets; no trailing space; then the words some reader
# makes a boolean or null. Everything else is written double-quoted (emit.py).
_PLAIN_TEXT = re.compile(r"[A-Za-z_/][A-Za-z0-9_./ ()$+=@,-]*(?<! )")
_BOOL_OR_NULL_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})


def plain_is_text(text: str) -> bool:
    """Whether `text` may be written without quotes and still read back as this text by every reader."""
    return _PLAIN_TEXT.fullmatch(text) is not None and text.lower() not in _BOOL_OR_NULL_WORDS


# ------------------------------------------------------------------ bounded re-reads of pasted text


def _events(text: str, what: str) -> list:
    """libyaml's events for `text`: never composes, so aliases are not expanded."""
    try:
        return list(yaml.parse(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TemplateBreak(f"not a valid {what} once pasted by the template: {problem}") from None


def _only_scalar(text: str, what: str) -> yaml.ScalarEvent:
    """The value of `k: <text>` as one scalar event; TemplateBreak when it is anything else."""
    events = _events(text, what)
    # StreamStart, DocumentStart, MappingStart, Scalar(k), <value>, MappingEnd, DocumentEnd, StreamEnd
    shape = len(events) == 8 and isinstance(events[4], yaml.ScalarEvent) and isinstance(events[5], yaml.MappingEndEvent)
    if not shape:
        kinds = {yaml.SequenceStartEvent: "a list", yaml.MappingStartEvent: "a mapping", yaml.AliasEvent: "an alias"}
        got = kinds.get(type(events[4]), "more than one value") if len(events) > 4 else "nothing"
        raise TemplateBreak(f"becomes {got} once pasted by the template, which writes it without quotes")
    event = events[4]
    if event.anchor is not None:
        raise TemplateBreak("starts with a YAML anchor (&) once pasted by the template, which writes it without quotes")
    if event.tag is not None and event.tag not in ("!", "tag:yaml.org,2002:str"):
        raise TemplateBreak(f"carries the YAML tag {event.tag} once pasted by the template")
    return event


@lru_cache(maxsize=4096)
def _double_quoted_event(body: str) -> str:
    events = _events(f'"{body}"', "double-quoted YAML string")
    if len(events) != 5 or not isinstance(events[2], yaml.ScalarEvent):  # pragma: no cover - quotes are checked first
        raise TemplateBreak("not a string once pasted by the template")
    return events[2].value


_SAFE_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_\-./]*")  # no ': ', ' #', leading indicator, no number
_UNESCAPED_QUOTE = re.compile(r'(?:^|[^\\])(?:\\\\)*"')  # a quote after an even number of backslashes
_V3_WORDS = frozenset(k for k in _V3_MAP if k and k[0].isalpha())


def _fold_like_sed(text: str) -> str:
    # bootstrap-amd.sh deletes whitespace-only lines from the rendered file, also inside a scalar.
    lines = text.split("\n")
    return "\n".join([lines[0], *(line for line in lines[1:] if line.strip())])


def reads_as_written(text: str) -> bool:
    """Whether a double-quoted YAML value holding `text` is `text` itself: printable ASCII with nothing to
    unescape. A carriage return or U+0085 is a line break there (folded into a space), a control character
    is refused: those take the parser's path (two C-speed scans here, for the hundreds of plain commands)."""
    return text.isascii() and text.isprintable() and "\\" not in text


def double_quoted(body: str) -> str:
    """The value of `"<body>"` as the template writes it (body pasted verbatim between the quotes)."""
    if reads_as_written(body) and '"' not in body:
        return body
    if _UNESCAPED_QUOTE.search(body):
        raise TemplateBreak("contains a double quote that the template does not escape: the YAML would break")
    return _double_quoted_event(_fold_like_sed(body))


def command_text(command: str) -> str:
    """`command | replace('"', '\\"')`: the template escapes quotes only, so backslashes are unescaped once."""
    if reads_as_written(command):
        return command  # the escaped quotes unescape back to themselves
    return double_quoted(command.replace('"', '\\"'))


@lru_cache(maxsize=4096)
def _plain_scalar(text: str) -> tuple[str, bool]:
    """(scalar text, plain?) of `k: <text>`: a quoted value (`'a'`, `"b"`) is a string, never resolved."""
    event = _only_scalar(f"k: {text}\n", "plain YAML value")
    return event.value, bool(event.implicit[0])  # plain and untagged


def plain(text: str) -> Any:
    """The value of `key: <text>` as buildkite-agent decodes it into an untyped field."""
    if "\n" in text:
        raise TemplateBreak("contains a line break: the template writes it as a plain YAML value")
    if _SAFE_PLAIN.fullmatch(text) and text not in _V3_WORDS:
        return text
    if text.isascii() and text.isdigit() and text[0] != "0" and len(text) < 19:
        return int(text)  # a decimal number (a timeout, a parallelism): the same in every reader
    value, is_plain = _plain_scalar(text)
    return agent_scalar(value) if is_plain else value


def plain_string(text: str) -> str:
    """The value of `key: <text>` in a Go string field (env values, command): fmt.Sprint of the decoded value."""
    value = plain(text)
    if isinstance(value, GoUint64):
        raise TemplateBreak(
            f"is the integer {value} once pasted, which buildkite-agent cannot read into a string field: "
            "the upload fails"
        )
    return value if isinstance(value, str) else go_sprint(value)


def plain_key(text: str) -> str:
    """A mapping key pasted bare (env names, agent tags), as go-pipeline canonicalises it."""
    if "\n" in text:
        raise TemplateBreak("contains a line break: the template writes it as a plain YAML key")
    if _SAFE_PLAIN.fullmatch(text) and text not in _V3_WORDS:
        return text
    value, is_plain = _plain_scalar(text)
    return canonical_key(value) if is_plain else value


def number(text: str) -> Any:
    """A number the template prints bare (`timeout_in_minutes: {{ t }}`), as the agent decodes it."""
    return plain(text)


# ------------------------------------------------------------------ stage 2: template arithmetic


def _kind(value: Any) -> int:
    # minijinja's ValueKind order: none < bool < number < string < sequences and maps
    if value is None:
        return 1
    if isinstance(value, bool):
        return 2
    if isinstance(value, (int, float)):
        return 3
    return 4 if isinstance(value, str) else 5


def jinja_le(a: Any, b: Any) -> bool:
    """`a <= b` in minijinja: numbers by value, text by text, different kinds by kind (text above numbers)."""
    ka, kb = _kind(a), _kind(b)
    if ka == kb == 3 or ka == kb == 4:
        return a <= b  # NaN compares false, as in Rust
    return ka < kb or (ka == kb and a == b)


def jinja_eq(value: Any, flag: bool) -> bool:
    """`value == true/false` in minijinja: a boolean equals the number 1/0 (`dind: 0` is `dind: false`)."""
    if isinstance(value, bool):
        return value is flag
    return isinstance(value, (int, float)) and value == int(flag)


def jinja_true(value: Any) -> bool:
    """minijinja truthiness: as Python's for the values a step file holds (NaN is true, as 0.0 is false)."""
    return bool(value)


# ------------------------------------------------------------------ meaning changes, for findings


class Change(NamedTuple):
    written: str  # the text the step file's value prints as
    received: Any  # what the CI gets

    def text(self) -> str:
        return (
            f"the CI receives {self.received!r}"
            if isinstance(self.received, str)
            else (f"the CI receives {go_sprint(self.received)}")
        )


def step_file_value(value: Any) -> str:
    """How the step file's value reads, quoted for a message: `0100` read as text is '0100'."""
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def change_message(what: str, written: str, received: Any) -> str:
    """A finding's text: the step file's value reaches the CI as something else, and why."""
    value = agent_scalar(written) if written else None
    if written == "":
        why = "is null to minijinja-cli, which prints a null as 'none' into the pipeline"
    elif isinstance(value, int) and not isinstance(value, bool) and re.fullmatch(r"[-+]?0[0-9_]+", written):
        why = "has a leading 0, which buildkite-agent's YAML reader (yaml.v3) reads as an octal number"
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and "_" in written:
        why = "is a number to buildkite-agent's YAML reader (yaml.v3), which drops the underscores"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        why = "is a number to buildkite-agent's YAML reader (yaml.v3), which writes it back its own way"
    elif isinstance(value, bool):
        why = "is a boolean to buildkite-agent's YAML reader (yaml.v3)"
    else:
        why = "changes once the template pastes it without quotes"
    shown = received if isinstance(received, str) else go_sprint(received)
    keep = written.replace("'", "''")
    return (
        f"{what} {written!r} {why}: the CI receives {shown!r}; to send {written!r}, write the YAML quotes into "
        f"the value (\"'{keep}'\"), since the template pastes it without quotes"
    )


def timeout_message(requested: str, timeout: Any) -> str:
    """timeout_in_minutes read as text: the template's cap compares text with a number."""
    return (
        f"timeout_in_minutes {requested!r} is text to minijinja-cli (serde_yaml reads a quoted value, or digits "
        f"after a leading 0, as text), and text never compares <= 180 in the template: the CI receives "
        f"timeout_in_minutes {timeout}; write a plain number"
    )


# ------------------------------------------------------------------ whole pipelines, as the agent reads them

_LONG_DIGITS = re.compile(r"[-+]?[0-9][0-9_]*")


def _bounded(fn):
    """`fn` for a pipeline file: a plain number past yamldoc's digit bound is unreadable input, as in every
    other file rocmci reads (one bounded integer rule), not text nobody meant."""
    from rocmci.yamldoc import MAX_INT_CHARS

    @lru_cache(maxsize=65536)
    def read(text: str) -> Any:
        if len(text) > MAX_INT_CHARS and _LONG_DIGITS.fullmatch(text):
            raise ValueError(f"a {len(text)}-character integer is too large (the limit is {MAX_INT_CHARS} characters)")
        return fn(text)

    return read


_agent_scalar = _bounded(agent_scalar)
_canonical_key = _bounded(canonical_key)
_NOT_COMMAND_STEPS = frozenset({"group", "block", "input", "wait", "waiter", "trigger"})
_STRING_FIELDS = ("label", "name", "key", "id", "identifier")


def read_pipeline(text: str | bytes, filename: str):
    """A pipeline's text as buildkite-agent reads it (yaml.v3 scalars, go-pipeline's string fields).

    Through yamldoc's bounded builder (aliases, depth, size), so positions and duplicate keys are kept.
    """
    from rocmci import yamldoc

    doc = yamldoc.parse(text, filename, plain=_agent_scalar, plain_key=_canonical_key)
    as_uploaded(doc.data)
    return doc


def as_uploaded(data: Any) -> Any:
    """go-pipeline's typing, in place: a command step's env values, command and label are Go strings."""
    steps = data.get("steps") if isinstance(data, dict) else data
    if isinstance(data, dict) and isinstance(data.get("env"), dict):
        _strings(data["env"])
    if isinstance(steps, list):
        for step in steps:
            if not isinstance(step, dict):
                continue
            if isinstance(step.get("steps"), list):
                as_uploaded(step["steps"])
            if _NOT_COMMAND_STEPS.isdisjoint(step):
                _command_step(step)
    return data


def _strings(mapping: dict) -> None:
    for key, value in mapping.items():
        if value is None or isinstance(value, (bool, int, float)) and not isinstance(value, GoUint64):
            mapping[key] = go_sprint(value)


def _command_step(step: dict) -> None:
    if isinstance(step.get("env"), dict):
        _strings(step["env"])
    for name in ("command", "commands", *_STRING_FIELDS):
        value = step.get(name)
        if isinstance(value, (bool, int, float)) and not isinstance(value, GoUint64):
            step[name] = go_sprint(value)
        elif isinstance(value, list) and name in ("command", "commands"):
            step[name] = [go_sprint(v) if isinstance(v, (bool, int, float)) and v is not None else v for v in value]
