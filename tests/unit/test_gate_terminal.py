"""Issue 32, class 3: terminal safety. What rocmci prints from labels, paths and test ids goes through one
terminal escaper (report.safe, report.shell_word for command lines): no control character, bidi override
(U+202E) or line separator reaches the terminal raw, one record stays one line, and a field is bounded."""

from __future__ import annotations

import json
import subprocess
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from rocmci import report
from tests.unit.gate_cli import outside_any_workspace_fixture, rocmci_fixture  # noqa: F401 - fixtures

BIDI = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI", "LRM", "RLM", "ALM"}
TRICKY = "\u202e\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u200b\u2028\u2029\x85\x1b\x07\r\n\t\x0b\x0c\x1c\x00"
# lists, not st.text(alphabet=...): hypothesis' text() shrinks towards ASCII and rarely drew U+202E
TEXT = st.lists(st.sampled_from(list(TRICKY)) | st.characters(blacklist_categories=("Cs",)), max_size=60).map("".join)


def _raw(text: str) -> list[str]:
    """The characters of `text` that reorder or break what a terminal shows."""
    return [c for c in text if unicodedata.bidirectional(c) in BIDI or unicodedata.category(c) in ("Cc", "Zl", "Zp")
            or c in "\u200b\u2060\ufeff"]  # fmt: skip


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(TEXT)
def test_safe_text_holds_no_bidi_control_or_line_separator(text):
    shown = report.safe(text)
    assert _raw(shown) == [] and len(shown.splitlines()) <= 1


def test_a_bidi_override_is_shown_as_an_escape():
    assert report.safe("invoice\u202etxt.exe") == "invoice\\u202etxt.exe"
    assert report.safe("a\u2028b", one_line=False) == "a\\u2028b"  # not a line of its own, even in a block


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(st.lists(TEXT.map(lambda t: t.replace("\x00", "")), min_size=1, max_size=4))
def test_a_printed_command_is_one_line_per_word_and_pastes_exactly(words):
    """Dry runs print commands with shell_lines: escaped for the terminal, and bash still reads each word back
    exactly as rocmci would pass it (a real bash, not a model of one)."""
    text = report.shell_lines(["printf", "%s\\0", *words])
    assert _raw(text.replace("\n", "")) == []
    assert all(line.endswith(" \\") for line in text.splitlines()[:-1])  # each line break is the layout's
    done = subprocess.run(["bash", "-c", text], capture_output=True, check=True)
    assert done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == words


def test_a_huge_word_of_a_command_is_cut_and_says_so():
    text = report.shell_lines(["docker", "run", "--label", "x" * 1_000_000])
    assert len(text) < 2 * report.MAX_WORD and "more characters" in text


LABEL = "evil\u202eexe.txt\nsecond line\x1b[2J" + "L" * 1_000_000


def test_keep_going_prints_a_held_step_on_one_escaped_bounded_line(rocmci, outside_any_workspace):
    """A label with a bidi override, a line break and ESC, a megabyte long, and an --out path with the same:
    each stderr record is one line, nothing raw, nothing near a megabyte."""
    source = outside_any_workspace / "steps.yaml"
    source.write_text(
        f"steps:\n- label: {json.dumps(LABEL)}\n  agent_pool: mi300_1\n  mirror_hardwares: [amdproduction]\n"
        "  commands: [echo hi]\n- label: fine\n  agent_pool: mi300_1\n  mirror_hardwares: [amdproduction]\n"
        "  commands: [echo ok]\n"
    )
    out = outside_any_workspace / "pipe\u202eline\n.yaml"
    code, stdout, err = rocmci("pipeline.generate", "--source", str(source), "--keep-going", "--out", str(out))
    assert code == 0, err[-2000:]
    lines = err.splitlines()
    assert _raw(err.replace("\n", "")) == []
    held = [line for line in lines if line.startswith("--keep-going: ")]
    wrote = [line for line in lines if line.startswith("wrote ")]
    assert len(held) == 1 and held[0].endswith(": held behind a block step") and "\\u202e" in held[0]
    assert len(wrote) == 1 and "pipe\\u202eline\\n.yaml" in wrote[0]
    assert max(map(len, lines)) < 10_000
