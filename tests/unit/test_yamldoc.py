"""The positioned YAML loader: YAML 1.2 core types only, explicit tags and huge numbers as one-line errors."""

from __future__ import annotations

import math
import os
import re
import signal
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmci import yamldoc
from rocmci.errors import InputError
from tests.conftest import SHARED_VLLM


def value(text: str):
    return yamldoc.parse(f"v: {text}\n", "f.yaml").data["v"]


@pytest.mark.parametrize(
    "text",
    [
        "2024-13-45",  # an impossible date: PyYAML's timestamp resolver would raise
        "2024-01-01",
        "2001-12-14t21:59:43.10-05:00",
        "no",
        "yes",
        "on",
        "off",
        "y",
        "1_000",
        "1:20",  # YAML 1.1 sexagesimal
        "0100",  # serde_yaml (minijinja-cli): digits after a leading zero are text
        "-007",
        "=",
        "+.5e",
        "0x",
        "1e",
        ".",
        "nan",
        "inf",
        "٣",  # Arabic-Indic digit: Python's int() would take it
    ],
)
def test_yaml_11_extras_stay_text(text):
    assert value(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12", 12),
        ("-3", -3),
        ("+7", 7),
        ("0o17", 15),
        ("0x1F", 31),
        ("0b101", 5),  # serde_yaml reads binary, and signed prefixed integers
        ("-0x1F", -31),
        ("0", 0),
        ("1.5", 1.5),
        ("-2e3", -2000.0),
        (".5", 0.5),
        ("1.", 1.0),
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("null", None),
        ("~", None),
        ("", None),
        ('"12"', "12"),
        ("'true'", "true"),
        ("!!str 12", "12"),
        ("!!int 12", 12),
        ("!!float 2", 2.0),
        ("!!bool false", False),
        ("!!null ''", None),
    ],
)
def test_core_schema_values(text, expected):
    got = value(text)
    assert got == expected and type(got) is type(expected)


def test_infinities_and_nan():
    assert value(".inf") == math.inf
    assert value("-.Inf") == -math.inf
    assert math.isnan(value(".NaN"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("!!int two", "'two' is not a valid !!int value"),
        ("!!float two", "'two' is not a valid !!float value"),
        ("!!int ²", "'²' is not a valid !!int value"),
        ("!!bool yes", "'yes' is not a valid !!bool value"),
        ("!!timestamp yesterday", "the YAML tag !!timestamp is not supported"),
        ("!!timestamp 2024-01-01", "the YAML tag !!timestamp is not supported"),
        ("!!binary aGVsbG8=", "the YAML tag !!binary is not supported"),
        ("!!set {a, b}", "the YAML tag !!set is not supported"),
        ("!!omap [a: 1]", "the YAML tag !!omap is not supported"),
        ("!!python/object:os.system x", "the YAML tag !!python/object:os.system is not supported"),
        ("!!python/name:os.system ''", "the YAML tag !!python/name:os.system is not supported"),
        ("!custom [1]", "the YAML tag !custom is not supported"),
        ("!env HOME", "the YAML tag !env is not supported"),
    ],
)
def test_explicit_tags_are_one_line_errors_with_a_position(text, message):
    with pytest.raises(InputError) as err:
        yamldoc.parse(f"a: 1\nv: {text}\n", "f.yaml")
    line = err.value.one_line()
    assert line.startswith("f.yaml:2:4: ") and message in line, line
    assert err.value.exit_code == 2 and "\n" not in line


def test_a_huge_integer_is_an_error_not_the_int_string_limit():
    with pytest.raises(InputError, match=r"f.yaml:2:14: a 5000-character integer is too large.*quote it"):
        yamldoc.parse("a: 1\nnum_gpus:    " + "9" * 5000 + "\n", "f.yaml")
    assert value("1" * 20) == int("1" * 20)  # 20 digits: still a number
    assert value("'" + "9" * 5000 + "'") == "9" * 5000  # quoted: text, whatever its length


def test_huge_floats_are_text_as_serde_yaml_keeps_them_and_never_crash():
    # serde_yaml keeps a float that overflows f64 as text (it reads only finite floats and .inf spelled out)
    assert value("9" * 5000 + ".5") == "9" * 5000 + ".5"
    assert value("1e999") == "1e999"
    assert value(".inf") == math.inf


def test_keys_are_always_text():
    doc = yamldoc.parse("1: a\ntrue: b\n~: c\n1.5: d\nno: e\n2024-01-01: f\n", "f.yaml")
    assert doc.data == {"1": "a", "true": "b", "~": "c", "1.5": "d", "no": "e", "2024-01-01": "f"}
    assert doc.where(("no",)) == "f.yaml:5:1"


def test_a_number_key_and_its_quoted_twin_are_duplicates():
    doc = yamldoc.parse("1: a\n'1': b\n", "f.yaml")
    assert [(d.key, d.pos.line, d.first.line) for d in doc.duplicates] == [("1", 2, 1)]


def test_tagged_keys_are_errors():
    assert yamldoc.parse("!!str 1: a\n", "f.yaml").data == {"1": "a"}
    with pytest.raises(InputError, match="f.yaml:2:1: the YAML tag !!binary is not supported"):
        yamldoc.parse("a: 1\n!!binary aGk=: a\n", "f.yaml")


def test_merge_keys_still_merge():
    doc = yamldoc.parse("base: &b {x: 1, y: 2}\nstep:\n  <<: *b\n  y: 3\n  '<<': literal\n", "f.yaml")
    assert doc.data["step"] == {"x": 1, "y": 3, "<<": "literal"}


def _fixture_files() -> list[Path]:
    root = SHARED_VLLM.parent
    return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def test_real_upstream_files_read_the_same_as_pyyaml():
    """Differential: upstream's YAML uses no YAML 1.1 extras, so the core schema changes nothing there."""
    files = _fixture_files()
    if not files:
        pytest.skip(f"fixtures not found beside the checkout ({SHARED_VLLM.parent})")
    compared = 0
    for path in files:
        raw = path.read_bytes()
        try:
            expected = yaml.safe_load(raw)
        except yaml.YAMLError:
            continue  # templates that are not YAML until rendered
        assert yamldoc.parse(raw, path.name).data == expected, path
        compared += 1
    assert compared >= 2


def test_load_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("reading a FIFO hung"))
    signal.alarm(10)
    try:
        for path, message in (
            (fifo, "is a FIFO (named pipe), not a regular file"),
            (tmp_path, "is a directory, not a regular file"),
            (Path("/dev/zero"), "is a character device, not a regular file"),
            (loop, "is a symlink loop"),
            (tmp_path / "none.yaml", "no such file"),
        ):
            with pytest.raises(InputError, match=re.escape(message)) as err:
                yamldoc.load(path, what="env ROCMCI_INVENTORY")
            assert err.value.one_line().startswith(f"{path}: ") and "(from env ROCMCI_INVENTORY)" in str(err.value)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_load_is_bounded_by_bytes_read(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text("a: 1\n" * 100)
    monkeypatch.setattr(yamldoc, "MAX_BYTES", 64)
    with pytest.raises(InputError, match="is larger than the limit of 64 bytes"):
        yamldoc.load(path)


SCALAR_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)  # the same examples in every run
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "!!int ", "!!float ", "!!str ", "!!bool ", "!!null ", "!x "]), SCALAR_TEXT),
        max_size=5,
    )
)
def test_any_scalar_text_reads_or_is_one_line_error(items):
    text = "".join(
        f"k{i}: {tag}{yaml.safe_dump(s, default_style=None).strip().removesuffix('...').strip()}\n"
        for i, (tag, s) in enumerate(items)
    )
    try:
        doc = yamldoc.parse(text, "f.yaml")
    except InputError as exc:
        assert exc.one_line().startswith("f.yaml") and "\n" not in exc.one_line()
        return
    for v in (doc.data or {}).values():
        assert v is None or isinstance(v, str | int | float | bool)


# --- issue 22: nesting past what libyaml's recursive composer survives -------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # flow lists: 80 KB. The column is the 101st level's, or where the libyaml of PyYAML 6.0.4's wheels
        # stops on its own 1,000-level limit while scanning ahead: either is past the bound.
        ("steps: " + "[" * 40_000 + "]" * 40_000, "deep.yaml:1:"),
        ("steps:\n" + "- " * 40_000 + "x\n", "deep.yaml:2:201"),  # compact block lists on one line
        ("a: " + "{b: " * 40_000 + "1" + "}" * 40_000, "deep.yaml:1:"),  # flow mappings
        ("a: " + "[" * 1_000_000, "deep.yaml:1:"),  # never closed: the depth is found before the syntax error
    ],
    ids=["flow-lists", "block-lists", "flow-mappings", "unclosed"],
)
def test_nesting_that_would_overflow_the_c_stack_is_one_line(text, where):
    """In a child process: without the bound, libyaml's composer recursed ~30,000 levels deep and the
    process died with SIGSEGV (no exception to catch, no message)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom rocmci import yamldoc\nfrom rocmci.errors import InputError\n"
        "try:\n    yamldoc.parse(sys.stdin.read(), 'deep.yaml')\nexcept InputError as exc:\n    print(exc.one_line())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-500:]}"
    assert done.stdout.startswith(where) and "nested deeper than 100 levels" in done.stdout, done.stdout


def test_the_nesting_bound_is_the_same_with_or_without_the_event_pass(monkeypatch):
    """A document is refused at the same place whether the cheap bound sends it through the event pass or not."""
    for text in ("v: " + "[" * 101 + "]" * 101, "- " * 102 + "x", "v: " + "[" * 100 + "]" * 100):
        outcomes = []
        for could in (False, True):
            monkeypatch.setattr(yamldoc, "_could_nest_deeply", lambda t, could=could: could)
            try:
                yamldoc.parse(text, "f.yaml")
                outcomes.append("parsed")
            except InputError as exc:
                outcomes.append(exc.one_line())
        assert outcomes[0] == outcomes[1], outcomes


def test_real_step_files_never_take_the_event_pass():
    for path in sorted(SHARED_VLLM.glob("test-amd*.yaml")):
        assert not yamldoc._could_nest_deeply(path.read_text()), path
