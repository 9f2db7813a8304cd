"""report.py: the terminal/pipe decision, width fitting without breaking words, findings, plurals."""

from __future__ import annotations

import io
import os
import re
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmci import doctor as doc
from rocmci import report, report_findings
from rocmci.findings import Finding

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def _not_in_ci(monkeypatch):
    """These tests are about a person's terminal; under CI=true (as .ci/run sets it) output is plain by design."""
    for name in ("CI", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tty():
    """A real pseudo-terminal to write to, sized 80 columns."""
    import fcntl
    import struct
    import termios

    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    stream = os.fdopen(follower, "w")
    yield stream
    stream.close()
    os.close(leader)


def test_a_pipe_gets_plain_lines():
    assert report.terminal_mode(io.StringIO(), {}) == report.Mode(False, False, None)


def test_a_terminal_gets_its_width_and_colour(tty):
    assert report.terminal_mode(tty, {"TERM": "xterm"}) == report.Mode(True, True, 80)


@pytest.mark.parametrize("env", [{"NO_COLOR": ""}, {"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_no_color_and_dumb_terminals_keep_the_layout_without_colour(tty, env):
    assert report.terminal_mode(tty, env) == report.Mode(True, False, 80)


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_ci_gets_plain_lines_even_in_a_pseudo_terminal(tty, value):
    assert report.terminal_mode(tty, {"CI": value, "TERM": "xterm"}) == report.Mode(False, False, None)


def test_ci_false_is_not_ci(tty):
    assert report.terminal_mode(tty, {"CI": "false"}).interactive


def test_piped_table_is_the_plain_format():
    text = report.table(("check", "status"), [("docker engine", "ok"), ("/dev/kfd", "no")], stream=io.StringIO())
    assert text == "check          status\n-------------  ------\ndocker engine  ok\n/dev/kfd       no"
    assert not ANSI.search(text)


def test_table_on_a_terminal_is_coloured_and_fits(tty, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    rows = [("docker engine", "ok", "server 20.10 " * 12), ("/dev/kfd", "MISSING", "absent")]
    text = report.table(("check", "status", "detail"), rows, styles=doc.STATUS_STYLES, stream=tty)
    assert ANSI.search(text)
    plain = ANSI.sub("", text)
    assert max(len(line) for line in plain.splitlines()) <= 80
    assert " ".join(plain.split()).count("server 20.10") == 12


def _words_kept(text: str, rows, width: int) -> list[str]:
    """Words of the cells that do not appear whole in `text` (words wider than the screen excused)."""
    screen = set(text.split())
    return [w for row in rows for cell in row for w in str(cell).split() if len(w) < width - 8 and w not in screen]


SETTINGS_LIKE = [
    ("arch", "gfx942;gfx950", "docker/Dockerfile.rocm:476 (ARG DEEPEP_ROCM_ARCH)"),
    ("rocshmem_repo", "https://github.com/ROCm/rocm-systems.git", "docker/Dockerfile.rocm:473 (ARG ROCSHMEM_REPO)"),
    ("ci_image", "rocm/vllm-ci:$BUILDKITE_COMMIT", "default"),
    ("image", "", "default"),
]


@pytest.mark.parametrize("width", [30, 50, 80, 81, 100, 120, 200])
def test_tables_never_break_a_word_that_fits(width):
    mode = report.Mode(True, False, width)
    text = report._render(report.table_renderable(("setting", "value", "source"), SETTINGS_LIKE, width), mode)
    assert max(len(line) for line in text.splitlines()) <= width
    assert _words_kept(text, SETTINGS_LIKE, width) == []
    if width >= 50:
        assert text.count("https://github.com/ROCm/rocm-systems.git") == 1


def test_the_layout_steps_down_as_the_width_shrinks():
    headers = ("setting", "value", "source")
    wide = report.Mode(True, False, 200)
    one_row_per_line = report._render(report.table_renderable(headers, SETTINGS_LIKE, 200), wide)
    assert "rocshmem_repo  https://github.com/ROCm/rocm-systems.git  docker/Dockerfile.rocm:473" in one_row_per_line
    folded = report._render(report.table_renderable(headers, SETTINGS_LIKE, 80), report.Mode(True, False, 80))
    assert re.search(r"^rocshmem_repo\s+https://github.com/ROCm/rocm-systems.git$", folded, re.M)
    assert re.search(r"^\s+source\s+docker/Dockerfile.rocm:473 \(ARG ROCSHMEM_REPO\)$", folded, re.M)
    stacked = report._render(report.table_renderable(headers, SETTINGS_LIKE, 50), report.Mode(True, False, 50))
    assert re.search(r"^rocshmem_repo$", stacked, re.M)
    assert re.search(r"^\s+value\s+https://github.com/ROCm/rocm-systems.git$", stacked, re.M)


cell = st.text(alphabet="abc /:-", min_size=0, max_size=40)


@given(rows=st.lists(st.tuples(cell, cell, cell), min_size=1, max_size=6), width=st.integers(20, 160))
def test_column_widths_fit_and_keep_words(rows, width):
    headers = ("a", "bb", "ccc")
    widths = report.column_widths(headers, rows, width)
    longest = [max(len(w) for r in [headers, *rows] for w in (r[i].split() or [""])) for i in range(3)]
    if widths is None:
        assert sum(longest) + 2 * report.GAP > width
    else:
        assert sum(widths) + 2 * report.GAP <= width
        assert all(w >= m for w, m in zip(widths, longest, strict=True))


FINDINGS = [
    Finding(
        ".buildkite/test-amd.yaml",
        6,
        3,
        "deepep-arch",
        "error",
        "runs DeepEP on mi250_2 (gfx90a) but the image's DeepEP is built for gfx942;gfx950; move the step to a "
        "gfx942 or gfx950 pool or add the arch to DEEPEP_ROCM_ARCH",
        ".buildkite/test-amd.yaml:2",
    ),
    Finding(".buildkite/test-amd.yaml", 40, 5, "timeout", "warning", "timeout_in_minutes 300 is capped at 180"),
    Finding("other.yaml", 1, 1, "yaml", "error", "message with [brackets] that is not markup"),
]


def _printed(findings, mode: report.Mode) -> str:
    buffer = io.StringIO()
    report_findings.render_findings(findings, report.console(buffer, mode))
    return buffer.getvalue()


def test_piped_findings_are_compiler_lines_one_each():
    text = _printed(FINDINGS, report.Mode(False, False, None))
    assert text.splitlines() == [f.text() for f in FINDINGS]


@pytest.mark.parametrize("width", [60, 80, 200])
def test_terminal_findings_are_grouped_under_their_file_and_fit(width):
    text = _printed(FINDINGS, report.Mode(True, False, width))
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines.count(".buildkite/test-amd.yaml") == 1  # the path as a heading, once
    assert ".buildkite/test-amd.yaml" not in "\n".join(lines[1:])  # not repeated in the origin either
    assert "(from line 2)" in " ".join(text.split())
    assert "[brackets]" in text
    assert max(len(line) for line in lines) <= width
    assert _words_kept(text, [[f.message] for f in FINDINGS], width) == []
    assert re.search(r"^\s+6:3\s+error\s+runs DeepEP", text, re.M)


def test_findings_take_path_or_file():
    duck = SimpleNamespace(path="a.yaml", line=3, col=1, severity="warning", rule="r", message="m")
    assert report_findings.finding_line(duck) == "a.yaml:3:1: warning [r] m"
    assert report_findings.finding_dict(duck)["file"] == "a.yaml"


def test_colour_only_when_the_mode_says_so():
    assert ANSI.search(_printed(FINDINGS, report.Mode(True, True, 80)))
    assert not ANSI.search(_printed(FINDINGS, report.Mode(True, False, 80)))


@pytest.mark.parametrize(
    ("counts", "subject", "line"),
    [
        ((1, 0, 1), "generated steps", "f.yaml: 1 error, 0 warnings in 1 generated step"),
        ((2, 1, 324), "generated steps", "f.yaml: 2 errors, 1 warning in 324 generated steps"),
        ((0, 0, 1), "steps", "f.yaml: 0 errors, 0 warnings in 1 step"),
        ((0, 2, 2), "step", "f.yaml: 0 errors, 2 warnings in 2 steps"),
    ],
)
def test_summary_line_counts_in_words(counts, subject, line):
    assert report_findings.summary_line("f.yaml", *counts, subject) == line


def _check(name: str, ok: bool, fix: str = "") -> doc.Check:
    return doc.Check(name, ok, "detail", fix)


ALL_NAMES = ("/dev/kfd", "render nodes", "AMD GPUs", "docker engine", "buildkit", "image", "free disk")


def test_doctor_never_says_builds_work_when_the_engine_is_missing():
    checks = [_check(n, n not in ("docker engine", "buildkit", "image")) for n in ALL_NAMES]
    checks += [_check("step file", True), _check("inventory", True)]
    lines = doc.verdict(checks)
    assert lines[0] == "pipeline tasks: ready"
    assert lines[1].startswith("image builds: not here, missing docker engine, buildkit")
    assert "ready" not in lines[1] and "ready" not in lines[2]


def test_doctor_verdict_matches_the_table():
    checks = [_check(n, True) for n in ALL_NAMES] + [_check("step file", False, "create it"), _check("inventory", True)]
    assert doc.verdict(checks) == [
        "pipeline tasks: not here, missing step file (create it)",
        "image builds: ready",
        "DeepEP workloads: ready",
    ]
    assert [status for _, status, _ in doc.rows(checks, "pipeline")][-2:] == ["MISSING", "ok"]
    assert [status for _, status, _ in doc.rows(checks, None)][-2:] == ["no", "ok"]


# --- terminal safety: what came from files, labels and engines is escaped and bounded ----------------------

CONTROL = "\x1b]0;title\x07\x1b[2J\x00\x9b31m\x7f"


def test_control_characters_are_shown_as_escapes_never_sent():
    shown = report.safe(f"a{CONTROL}b\nc\td")
    assert shown == "a\\e]0;title\\x07\\e[2J\\x00\\x9b31m\\x7fb\\nc\\td"
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", shown)
    assert report.safe("two\nlines", one_line=False) == "two\nlines"  # multi-line text keeps its lines


@given(st.text(max_size=300))
def test_safe_text_never_holds_a_control_character(text):
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", report.safe(text))


def test_findings_with_control_characters_print_escaped_in_every_layout(tty):
    bad = Finding(f"evil{CONTROL}.yaml", 1, 2, "rule", "error", f"label {CONTROL} here", origin=f"o{CONTROL}:3")
    for mode in (report.Mode(False, False, None), report.Mode(True, True, 80)):
        text = ANSI.sub("", _printed([bad], mode))
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), (mode, text)
        assert "\\e]0;title\\x07" in text


def test_a_huge_label_makes_a_bounded_finding_line():
    huge = Finding("f.yaml", 1, 1, "rule", "error", "label " + "x" * 1_000_000, origin="f.yaml:1")
    line = report_findings.finding_line(huge)
    assert len(line) < 2 * report.MAX_FIELD
    assert line.endswith("... (999006 more characters) (from f.yaml:1)")
    printed = _printed([huge], report.Mode(True, False, 80))
    assert len(printed) < 4 * report.MAX_FIELD


def test_table_cells_and_lines_are_escaped():
    assert "\x1b" not in report.table(("a", "b"), [(f"x{CONTROL}", "y")], stream=io.StringIO())
    assert "\x1b" not in report.lines([f"x{CONTROL}"], stream=io.StringIO())


def test_columns_align_and_fit_a_terminal(tty):
    rows = [("--tag IMAGE", "the tag " * 20), ("--json", "print JSON")]
    plain = report.columns(rows, indent=2, stream=io.StringIO())
    assert plain.splitlines()[1] == "  --json       print JSON"
    fitted = ANSI.sub("", report.columns(rows, indent=2, stream=tty))
    assert max(len(line.rstrip()) for line in fitted.splitlines()) <= 80
    assert fitted.splitlines()[1].startswith("               the tag")  # wrapped under its own column


def test_records_plain_and_fitted(tty):
    evidence = "a.py:3 " + " ".join(["word"] * 30)
    items = [("w: APPLIES  (sets X=1; moe-tests)", [("evidence", evidence), ("ref", "r#1")])]
    assert report.records(items, stream=io.StringIO()).splitlines()[:2] == [
        "w: APPLIES  (sets X=1; moe-tests)",
        f"    evidence: {evidence}",
    ]
    fitted = ANSI.sub("", report.records(items, stream=tty, styles={"APPLIES": "green"}))
    assert max(len(line.rstrip()) for line in fitted.splitlines()) <= 80
    assert _words_kept(fitted, [[evidence]], 80) == []


def test_error_line_is_plain_piped_and_wrapped_in_red_on_a_terminal(tty):
    text = "rocmci: no vLLM checkout to read docker/Dockerfile.rocm from; " + " ".join(["pass --vllm-src PATH"] * 6)
    assert report.error_line(text, stream=io.StringIO()) == text
    shown = report.error_line(text + CONTROL, stream=tty)
    assert "\x1b[1;31mrocmci:" in shown or "\x1b[31mrocmci:" in shown.replace("\x1b[1m", "")
    lines = ANSI.sub("", shown).splitlines()
    assert len(lines) > 1 and max(len(line.rstrip()) for line in lines) <= 80
    assert all(line.startswith(" " * len("rocmci: ")) for line in lines[1:])  # continued under the message
    assert "\\e]0;title" in ANSI.sub("", shown)
