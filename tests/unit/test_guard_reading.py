"""Reading step files (issue 35): as the CI's YAML reader reads them, and a huge integer as one line.

The CI reads a step file with minijinja-cli, whose YAML reader is serde_yaml 0.9's (serde_yml): the YAML 1.2
core schema with serde's own number rules. `serde_plain` below is that reader's typing of an untagged plain
scalar, written from serde_yaml's de.rs (`visit_untagged_scalar`, `parse_bool`, `parse_unsigned_int`,
`parse_negative_int`, `digits_but_not_number`, `parse_f64`), not from rocmci's code; yamldoc must agree with
it on every plain scalar made of the characters numbers, nulls and booleans are written with. docs/guards.md
maps each test to the mutation it was watched to kill.
"""

from __future__ import annotations

import math
import re
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocmci import hook, yamldoc
from rocmci.errors import InputError
from rocmci.pipeline import source

_TEXT = object()  # serde reads the scalar as a string


def _rust_f64(text: str) -> float | None:
    """Rust's `str::parse::<f64>` for the texts the generator makes (no `inf`/`nan` words reach it finite)."""
    if not re.fullmatch(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", text):
        return None
    return float(text)


_DIGITS = {16: "0123456789abcdefABCDEF", 8: "01234567", 2: "01"}


def _prefixed(text: str) -> int | None:
    """parse_unsigned_int / parse_negative_int on `0x`, `0o`, `0b`: one optional sign, then digits of the base."""
    sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if body.startswith(prefix):
            digits = body[2:]
            return sign * int(digits, base) if digits and all(c in _DIGITS[base] for c in digits) else None
    return None


def serde_plain(text: str):
    """serde_yaml 0.9's value of an untagged plain scalar: None, a bool, an int, a float or _TEXT."""
    if text in ("~", "null", "Null", "NULL", ""):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    number = _prefixed(text)
    if number is not None:
        return number
    body = text[1:] if text[:1] in "+-" else text
    if body.isascii() and body.isdigit():
        # digits_but_not_number: a redundant leading zero makes the digits text, not a number
        return _TEXT if len(body) > 1 and body[0] == "0" else int(text)
    unsigned = text[1:] if text[:1] == "+" else text
    if unsigned[:1] in ("+", "-") and text[:1] == "+":
        return _TEXT  # parse_f64: no second sign after '+'
    if unsigned in (".inf", ".Inf", ".INF"):
        return math.inf
    if text in ("-.inf", "-.Inf", "-.INF"):
        return -math.inf
    if text in (".nan", ".NaN", ".NAN"):
        return math.nan
    number = _rust_f64(unsigned)
    if number is not None and math.isfinite(number):
        return number
    return _TEXT


def read(text: str):
    return yamldoc.parse(f"v: {text}\n", "f.yaml").data["v"]


def _same(ours, theirs, text: str) -> bool:
    if theirs is _TEXT:
        return ours == text and type(ours) is str
    if isinstance(theirs, float) and math.isnan(theirs):
        return isinstance(ours, float) and math.isnan(ours)
    return ours == theirs and type(ours) is type(theirs)


# Every spelling of the core schema's nulls and booleans, and serde's signed and prefixed integers.
SPELLINGS = [
    *("~", "null", "Null", "NULL"),
    *("true", "True", "TRUE", "false", "False", "FALSE"),
    *("tRUE", "nULL", "FaLsE", "NUll"),  # not core spellings: text
    *("0o17", "+0o17", "-0o17", "0x1F", "+0x1F", "-0x1f", "0b101", "+0b101", "-0b101", "0X1F", "0O17", "0B1"),
    *("0", "-0", "+0", "07", "-07", "+007", "01.5", "1e5", "1E5", "-1.5e-3", "+.5", ".inf", "+.Inf", "-.INF", ".NaN"),
    *("inf", "nan", "Infinity", "+-1", "--1", "+", "1_000", "0x", "0b2", "0o8", "1e400", "-1e400"),
]


@pytest.mark.parametrize("text", SPELLINGS)
def test_each_spelling_reads_as_serde_yaml_reads_it(text):
    ours, theirs = read(text), serde_plain(text)
    assert _same(ours, theirs, text), (text, ours, theirs)


NUMBERISH = st.text(alphabet="0123456789+-.xobeEaAfFnNlLuUrRsStT_~ X", min_size=0, max_size=10).map(str.strip)


@settings(derandomize=True, max_examples=3000, deadline=None, database=None)
@given(NUMBERISH)
@example("NULL")
@example("FALSE")
@example("-0o17")
def test_any_plain_scalar_reads_as_serde_yaml_reads_it(text):
    if text and (text[0] in "-" and text[1:2] in " " or text.startswith(("- ", "-\t"))):
        return  # a block sequence entry, not a scalar
    try:
        ours = read(text)
    except InputError:
        return  # not a plain scalar in a flow context (`v: - x`, `v: ~x: y`): no reader takes it as a value
    if not isinstance(ours, (str, int, float, bool, type(None))):
        return  # YAML structure, not one scalar
    assert _same(ours, serde_plain(text), text), (text, ours, serde_plain(text))


STEP_FILE = """\
steps:
- label: Typed as the CI types them
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  optional: TRUE
  no_gpu: False
  num_gpus: 0x2
  timeout_in_minutes: +0o17
  parallelism: 2
  working_dir: 2024-01-01
  env:
    A: NULL
    B: 0100
    C: on
  commands: [pytest -v]
"""


def test_a_step_file_is_read_with_the_ci_readers_types(tmp_path):
    path = tmp_path / "test-amd.yaml"
    path.write_text(STEP_FILE)
    (step,) = source.load_source(path, "test-amd.yaml").steps
    data = step.data
    assert (data["optional"], data["no_gpu"], data["num_gpus"], data["timeout_in_minutes"]) == (True, False, 2, 15)
    assert [type(data[k]) for k in ("optional", "no_gpu", "num_gpus", "timeout_in_minutes")] == [bool, bool, int, int]
    assert data["working_dir"] == "2024-01-01"  # no dates
    assert data["env"] == {"A": None, "B": "0100", "C": "on"}  # no YAML 1.1 octal or booleans


# --- a huge integer is a one-line error ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    [
        "9" * 22,
        "-" + "9" * 21,
        "0x" + "f" * 20,
        "0b" + "1" * 70,
        "9" * 5000,
        "!!int " + "9" * 5000,
        "!!int 0x" + "f" * 30,
    ],
    ids=["22-digits", "signed-22", "hex", "binary", "5000-digits", "tagged", "tagged-hex"],
)
def test_a_huge_integer_is_one_line_with_its_position(number):
    with pytest.raises(InputError) as err:
        yamldoc.parse(f"steps:\n- num_gpus: {number}\n", "s.yaml")
    line = err.value.one_line()
    assert line.startswith("s.yaml:2:13: a ") and "-character integer is too large" in line and "quote it" in line
    assert "\n" not in line and err.value.exit_code == 2


def test_the_integer_bound_is_21_characters():
    assert read("9" * 20) == int("9" * 20) and read("-" + "9" * 20) == -int("9" * 20)
    with pytest.raises(InputError, match="a 22-character integer is too large"):
        read("1" + "0" * 21)


def test_a_huge_integer_is_one_line_under_a_lowered_int_string_limit():
    """PYTHONINTMAXSTRDIGITS can lower int()'s limit to 640 digits: yamldoc's own bound still speaks first."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        for text in ("9" * 700, "!!int " + "9" * 700):
            with pytest.raises(InputError, match="a 700-character integer is too large"):
                read(text)
    finally:
        sys.set_int_max_str_digits(before)


def test_a_huge_integer_in_a_step_file_fails_the_hook_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in list(__import__("os").environ):
        if name.startswith("ROCMCI_"):
            monkeypatch.delenv(name)
    (tmp_path / "test-amd.yaml").write_text(STEP_FILE.replace("num_gpus: 0x2", "num_gpus: " + "9" * 5000))
    assert hook.main(["--arch", "gfx942", "test-amd.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rocmci-validate: test-amd.yaml:7:13: a 5000-character integer")
