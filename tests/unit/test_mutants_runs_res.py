"""Exact behaviour of the run-result modules (runs/results, runs/outcomes, runs/workarounds), in process.

Written for issue 24's mutation score: each test pins what a person, a file or Buildkite sees (the
outcome and its words, exit codes, the JUnit, JSON and Markdown written, the agent's argv), or what a
workaround decision rests on, so a changed condition, number or message turns it red. No rocmci code
is replaced: the Buildkite agent and git are real processes (a stand-in agent script on PATH, the
real git on a repository made here).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from rocmci import workaround_registry as wr
from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.runs import container as ctr
from rocmci.runs import outcomes
from rocmci.runs import results as res
from rocmci.runs import workarounds as wa
from rocmci.runs.types import PlannedRun, Prepared, RunOptions
from rocmci.runs.workloads import Workload
from tests.conftest import REPO

OC = res.Outcome
REGISTRY = REPO / "src" / "rocmci" / "data" / "workarounds.yaml"


# --- results: outcome names, exit codes, severity ----------------------------------------------------------


def test_outcome_words_and_exit_codes_are_the_documented_ones():
    """README "Exit codes": 10 no tests (strict), 11 teardown, 12 crashed, 13 timed out, 14 infra."""
    assert [o.value for o in OC] == [
        "passed", "failed", "no tests collected", "crashed at teardown", "crashed", "timed out",
        "infrastructure error",
    ]  # fmt: skip
    assert res.EXIT_CODES == {
        OC.PASSED: 0, OC.FAILED: 1, OC.NO_TESTS: 10, OC.CRASHED_AT_TEARDOWN: 11, OC.CRASHED: 12, OC.TIMED_OUT: 13,
        OC.INFRA: 14,
    }  # fmt: skip
    assert res.PYTEST_NO_TESTS == 5


def test_the_worst_outcome_decides_in_severity_order():
    """One run's result is its worst part: each outcome outranks every one before it."""
    order = [OC.PASSED, OC.NO_TESTS, OC.FAILED, OC.CRASHED_AT_TEARDOWN, OC.CRASHED, OC.TIMED_OUT, OC.INFRA]
    for i, lower in enumerate(order):
        for higher in order[i + 1 :]:
            assert res.worst([lower, higher]) is higher
            assert res.worst([higher, lower]) is higher
    assert res.worst([]) is OC.NO_TESTS
    assert res.worst([OC.PASSED]) is OC.PASSED


def _r(outcome: OC, **kw) -> res.Result:
    return res.Result(kw.pop("workload", "w"), outcome, kw.pop("exit_code", 0), kw.pop("seconds", 1.0),
                      kw.pop("detail", "d"), **kw)  # fmt: skip


@pytest.mark.parametrize(
    ("outcomes_", "strict", "code"),
    [
        ([], False, 14), ([], True, 14),
        ([OC.PASSED], False, 0), ([OC.PASSED], True, 0),
        ([OC.NO_TESTS], False, 0), ([OC.NO_TESTS], True, 10),
        ([OC.PASSED, OC.NO_TESTS], True, 10),
        ([OC.FAILED, OC.NO_TESTS], False, 1),
        ([OC.CRASHED_AT_TEARDOWN], False, 11), ([OC.CRASHED], False, 12), ([OC.TIMED_OUT], False, 13),
        ([OC.INFRA, OC.PASSED], False, 14),
    ],
)  # fmt: skip
def test_the_exit_code_of_a_run(outcomes_, strict, code):
    """A run with no result never exits 0; no tests collected passes unless --strict (vLLM's runner)."""
    assert res.exit_code([_r(o) for o in outcomes_], strict=strict) == code


def test_exit_code_is_not_strict_unless_asked():
    """`strict` defaults to off: no tests collected passes as in vLLM's runner."""
    assert res.exit_code([_r(OC.NO_TESTS)]) == 0


# --- results: JUnit XML ------------------------------------------------------------------------------------


def test_junit_counts_names_and_passed(tmp_path):
    """Cases are counted from <testcase>; failed ids read classname::name, or the name alone."""
    path = tmp_path / "j.xml"
    path.write_text(
        "<testsuite>"
        '<testcase classname="m.c" name="ok"/>'
        '<testcase classname="m.c" name="f"><failure/></testcase>'
        '<testcase name="e"><error/></testcase>'
        '<testcase classname="m.c"><failure/><error/></testcase>'
        '<testcase name="s"><skipped/></testcase>'
        '<testcase name="both"><error/><skipped/></testcase>'
        '<testcase classname="t" name="s2"><skipped/></testcase>'
        '<testcase classname="XLA.Test" name="x"><failure/></testcase>'
        "</testsuite>"
    )
    s = res.parse_junit(path)
    assert (s.tests, s.failures, s.errors, s.skipped, s.passed) == (8, 3, 2, 2, 1)
    assert s.failed_cases == ["m.c::f", "e", "m.c::?", "both", "XLA.Test::x"]


def test_junit_in_a_testsuites_root_counts_every_suite(tmp_path):
    """pytest writes <testsuites><testsuite>: every case of every suite counts."""
    path = tmp_path / "j.xml"
    path.write_text('<testsuites><testsuite><testcase name="a"/></testsuite>'
                    '<testsuite><testcase name="b"><skipped/></testcase></testsuite></testsuites>')  # fmt: skip
    assert res.parse_junit(path) == res.JUnitSummary(tests=2, skipped=1)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("<testsuite><testcase>", "j.xml:1:22: malformed JUnit XML: no element found"),
        ("<testsuite>\n  <x></y>", "j.xml:2:8: malformed JUnit XML: mismatched tag"),
        ("<html/>", "j.xml: not JUnit XML: root element is <html>"),
    ],
)
def test_unreadable_junit_is_one_line_with_its_position(tmp_path, text, line):
    """Bad input: file:line:column (1-based, as editors count) and what is wrong."""
    path = tmp_path / "j.xml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        res.parse_junit(path)
    assert err.value.one_line() == f"{tmp_path}/{line}"


def test_a_missing_junit_is_named_by_who_asked_for_it(tmp_path):
    """A run that wrote no report says so; a --junit flag's missing file is that flag's error."""
    path = tmp_path / "none.xml"
    with pytest.raises(InputError) as err:
        res.parse_junit(path)
    assert err.value.one_line() == f"{path}: no JUnit XML was written"
    with pytest.raises(InputError) as err:
        res.parse_junit(path, what="--junit")
    assert err.value.one_line() == f"{path}: no such file (from --junit)"


def test_junit_summaries_merge_field_by_field():
    """Shards' reports add up: every count and every failed case."""
    a = res.JUnitSummary(tests=5, failures=1, errors=2, skipped=1, failed_cases=["a", "b", "c"])
    b = res.JUnitSummary(tests=7, failures=3, errors=1, skipped=2, failed_cases=["d", "e", "f", "g"])
    assert a.merge(b) == res.JUnitSummary(12, 4, 3, 3, ["a", "b", "c", "d", "e", "f", "g"])
    assert a.merge(b).passed == 2
    assert res.JUnitSummary() == res.JUnitSummary(0, 0, 0, 0, [])


def test_redacted_junit_keeps_markup_and_ends_with_a_newline():
    """Every text, tail and attribute value is redacted; tags, attribute names and the declaration stay."""
    data = b'<testsuite name="S"><testcase name="t[S]">S<failure message="S">S</failure>S</testcase></testsuite>'
    out = res.redact_junit(data, lambda t: t.replace("S", "*"))
    assert out == (
        b"<?xml version='1.0' encoding='utf-8'?>\n"
        b'<testsuite name="*"><testcase name="t[*]">*<failure message="*">*</failure>*</testcase></testsuite>\n'
    )


def test_redacting_a_missing_or_malformed_junit_file(tmp_path):
    """Nothing to redact is no error; a report that is not XML is removed, never kept unredacted."""
    res.redact_junit_file(tmp_path / "none.xml", str.upper)
    (tmp_path / "folder.xml").mkdir()
    res.redact_junit_file(tmp_path / "folder.xml", str.upper)
    assert (tmp_path / "folder.xml").is_dir()
    bad = tmp_path / "bad.xml"
    bad.write_text("<testsuite>secret")
    res.redact_junit_file(bad, str.upper)
    assert not bad.exists()
    good = tmp_path / "good.xml"
    good.write_text('<testsuite name="x"/>')
    res.redact_junit_file(good, str.upper)
    assert good.read_text() == "<?xml version='1.0' encoding='utf-8'?>\n<testsuite name=\"X\" />\n"


def test_shard_junit_files_merge_into_one_testsuites_file(tmp_path):
    """Each shard's suites, in order; a missing or malformed shard file is skipped, not fatal."""
    (tmp_path / "a.xml").write_text('<testsuite name="a"><testcase name="1"/></testsuite>')
    (tmp_path / "b.xml").write_text('<testsuites><testsuite name="b1"/><testsuite name="b2"/></testsuites>')
    (tmp_path / "c.xml").write_text("<testsuite")
    out = tmp_path / "out.xml"
    res.merge_junit_files([tmp_path / "a.xml", tmp_path / "none.xml", tmp_path / "c.xml", tmp_path / "b.xml"], out)
    text = out.read_text()
    assert text == (
        '<testsuites><testsuite name="a"><testcase name="1" /></testsuite>'
        '<testsuite name="b1" /><testsuite name="b2" /></testsuites>\n'
    )
    assert res.parse_junit(out).tests == 1


def test_a_nested_testsuite_is_merged_once(tmp_path):
    """A shard whose <testsuite> nests suites (allowed by the JUnit schema) is taken whole, not twice."""
    shard = tmp_path / "a.xml"
    shard.write_text('<testsuite name="outer"><testsuite name="inner"><testcase name="1"/></testsuite></testsuite>')
    out = tmp_path / "out.xml"
    res.merge_junit_files([shard], out)
    assert [s.get("name") for s in ET.parse(out).getroot()] == ["outer"]
    assert res.parse_junit(out).tests == 1


def test_a_merged_junit_that_cannot_be_written_names_the_results_setting(tmp_path):
    """The merged file's folder is the results folder: an error says which setting chose it."""
    (tmp_path / "out.xml").mkdir()
    with pytest.raises(InputError) as err:
        res.merge_junit_files([], tmp_path / "out.xml")
    assert err.value.one_line() == (
        f"{tmp_path}/out.xml: is a directory, not a regular file (from setting results_dir, ROCMCI_RESULTS_DIR). "
        "give a file path"
    )


def test_a_junit_whose_redacted_copy_cannot_be_written_is_removed_quietly(tmp_path):
    """No room for the redacted copy (here: no room in the name for the temporary file): the raw report goes."""
    path = tmp_path / ("j" * 251 + ".xml")  # the longest name a file may have: the temporary name is longer
    path.write_text('<testsuite name="secret"/>')
    res.redact_junit_file(path, lambda t: "***")
    assert list(tmp_path.iterdir()) == []


def test_signals_from_python_shells_and_docker_init():
    """-N from Python, 128+N from a shell or docker --init (N up to 64); anything else is no signal."""
    assert [res.signal_of(c) for c in (-1, -11, 0, 1, 5, 127, 128, 129, 139, 192, 193, 255)] == [
        1, 11, None, None, None, None, None, 1, 11, 64, None, None,
    ]  # fmt: skip
    assert (res.signal_name(11), res.signal_name(6), res.signal_name(99)) == ("SIGSEGV", "SIGABRT", "signal 99")


# --- results: classify -------------------------------------------------------------------------------------

PASSED_28 = res.JUnitSummary(tests=28, skipped=2)


@pytest.mark.parametrize(
    ("code", "junit", "kw", "expected"),
    [
        (0, None, {"timed_out": True, "oom_killed": True, "infra_error": "x"},
         (OC.TIMED_OUT, "stopped at the timeout; the container was removed")),
        (137, None, {"oom_killed": True, "infra_error": "x"},
         (OC.CRASHED, "killed by the kernel's OOM killer (exit 137): raise the memory limit")),
        (125, PASSED_28, {"infra_error": "engine gone"}, (OC.INFRA, "engine gone")),
        (0, PASSED_28, {"infra_error": ""}, (OC.PASSED, "26 passed, 2 skipped")),
        (125, None, {}, (OC.INFRA, "the workload could not be started (exit 125)")),
        (126, None, {}, (OC.INFRA, "the workload could not be started (exit 126)")),
        (127, PASSED_28, {}, (OC.INFRA, "the workload could not be started (exit 127)")),
        (124, None, {}, (OC.FAILED, "exit 124")),
        (139, PASSED_28, {}, (OC.CRASHED_AT_TEARDOWN, "26 passed, then the process died by SIGSEGV at teardown")),
        (139, res.JUnitSummary(tests=1, errors=1, failed_cases=["t::e"]), {},
         (OC.CRASHED, "died by SIGSEGV (exit 139); failing: t::e")),
        (-6, res.JUnitSummary(), {}, (OC.CRASHED, "died by SIGABRT (exit -6)")),
        (134, res.JUnitSummary(tests=2, failures=1), {}, (OC.CRASHED, "died by SIGABRT (exit 134)")),
        (139, res.JUnitSummary(tests=7, failures=7, failed_cases=list("abcdefg")), {},
         (OC.CRASHED, "died by SIGSEGV (exit 139); failing: a, b, c, d, e")),
        (5, PASSED_28, {}, (OC.NO_TESTS, "pytest collected no tests (exit 5): check -k and that DeepEP is installed")),
        (0, res.JUnitSummary(tests=1, failures=1, failed_cases=["t::f"]), {},
         (OC.FAILED, "exit 0, but the JUnit report has 1 failed: t::f")),
        (0, res.JUnitSummary(), {"junit_expected": True}, (OC.NO_TESTS, "the JUnit report has no test cases")),
        (0, None, {"junit_expected": True},
         (OC.FAILED, "exit 0, but no JUnit XML was written: nothing shows that any test ran")),
        (0, None, {}, (OC.PASSED, "exit 0")),
        (1, res.JUnitSummary(tests=6, failures=6, failed_cases=list("abcdef")), {},
         (OC.FAILED, "6 failed: a, b, c, d, e and 1 more")),
        (1, res.JUnitSummary(tests=5, failures=5, failed_cases=list("abcde")), {},
         (OC.FAILED, "5 failed: a, b, c, d, e")),
        (2, res.JUnitSummary(tests=3, failures=0), {}, (OC.FAILED, "exit 2")),
    ],
)  # fmt: skip
def test_classify_outcome_and_words(code, junit, kw, expected):
    """README "Outcomes are honest": each outcome and the detail a person reads for it."""
    assert res.classify(code, junit, **kw) == expected


def test_classify_defaults_are_a_plain_container_run():
    """Without keywords: no timeout, no OOM, no infra error, no hint, in a container, no JUnit expected."""
    assert res.classify(0, None) == (OC.PASSED, "exit 0")
    assert res.classify(139, PASSED_28)[1] == "26 passed, then the process died by SIGSEGV at teardown"
    assert res.classify(1, None, timed_out=True)[1] == "stopped at the timeout; the container was removed"


# --- results: the result record, table, JSON -----------------------------------------------------------------


def test_a_result_as_json_and_redacted():
    """results.json carries every field; redaction reaches the name, detail, failed ids and log only."""
    r = res.Result("w S", OC.FAILED, 1, 2.5, "S failed", res.JUnitSummary(2, 1, 0, 0, ["t[S]"]), ["id"], "S.log", 2)
    assert r.as_dict() == {
        "workload": "w S", "outcome": "failed", "exit_code": 1, "seconds": 2.5, "detail": "S failed",
        "junit": {"tests": 2, "failures": 1, "errors": 0, "skipped": 0, "failed_cases": ["t[S]"]},
        "workarounds": ["id"], "log": "S.log", "attempts": 2,
    }  # fmt: skip
    red = r.redacted(lambda t: t.replace("S", "*"))
    assert red == res.Result("w *", OC.FAILED, 1, 2.5, "* failed", res.JUnitSummary(2, 1, 0, 0, ["t[*]"]), ["id"],
                             "*.log", 2)  # fmt: skip
    bare = res.Result("w", OC.PASSED, 0, 1.0, "exit 0").redacted(lambda t: "X")
    assert (bare.junit, bare.log, bare.workarounds, bare.attempts) == (None, None, [], 1)


def test_table_and_json_for_people_and_tools():
    """The terminal table: counts passed/tests or '-', whole seconds; --json: every result's fields."""
    rs = [
        res.Result("moe-tests x", OC.FAILED, 1, 12.4, "a | b", res.JUnitSummary(3, 1, 0, 0, ["t::a"])),
        res.Result("dp", OC.PASSED, 0, 2.6, "exit 0"),
    ]
    assert res.render_table(rs).splitlines() == [
        "workload     outcome  time  passed  detail",
        "-----------  -------  ----  ------  ------",
        "moe-tests x  failed   12s   2/3     a | b",
        "dp           passed   3s    -       exit 0",
    ]
    assert json.loads(res.render_json(rs)) == {"results": [r.as_dict() for r in rs]}
    assert res.render_json(rs).splitlines()[1] == '  "results": ['


# --- results: the build page ------------------------------------------------------------------------------


def test_refs_become_links_within_githubs_bounds():
    """owner/repo#N -> its GitHub issue page; only names GitHub allows (owner <= 39, repo <= 100)."""
    assert res.ref_url("ROCm/rocm-systems#6942") == "https://github.com/ROCm/rocm-systems/issues/6942"
    assert res.ref_url("a.b/c#1") is None and res.ref_url("x/y#") is None and res.ref_url("see x/y#1") is None
    assert res.ref_url("o" * 39 + "/r#1") and res.ref_url("o" * 40 + "/r#1") is None
    assert res.ref_url("o/" + "r" * 100 + "#1") and res.ref_url("o/" + "r" * 101 + "#1") is None
    assert res.ref_url("o/r#123456789") and res.ref_url("o/r#1234567890") is None
    assert res.ref_url("-o/r#1") is None and res.ref_url("o-1/r_.-#2") == "https://github.com/o-1/r_.-/issues/2"
    assert res.link_refs("see x/y#3, z") == "see [x/y#3](https://github.com/x/y/issues/3), z"


def test_annotation_styles_and_icons():
    """Buildkite styles: success (passed), warning (teardown, no tests), error (the rest)."""
    assert {o: res.annotation_style([_r(OC.PASSED), _r(o)]) for o in OC} == {
        OC.PASSED: "success", OC.NO_TESTS: "warning", OC.CRASHED_AT_TEARDOWN: "warning", OC.FAILED: "error",
        OC.CRASHED: "error", OC.TIMED_OUT: "error", OC.INFRA: "error",
    }  # fmt: skip
    rows = res.render_annotation([_r(o, workload=o.name) for o in OC]).splitlines()[4:11]
    assert [row.split(" | ")[1].rsplit(" ", 1)[0] for row in rows] == [
        ":white_check_mark: passed".rsplit(" ", 1)[0], ":x: failed".rsplit(" ", 1)[0], ":grey_question: no tests",
        ":warning: crashed at", ":x:", ":x: timed", ":x: infrastructure",
    ]  # fmt: skip


def test_annotation_text_whole():
    """The Markdown posted and written to annotation.md: table, one teardown explanation, notes."""
    rs = [
        res.Result("moe a", OC.CRASHED_AT_TEARDOWN, 139, 61.4, "x  |\ny", res.JUnitSummary(tests=4), attempts=2),
        res.Result("moe b", OC.CRASHED_AT_TEARDOWN, 139, 0.5, "z"),
    ]
    text = res.render_annotation(rs, ["note  one |", "see o/r#1"])
    assert text == "\n".join([
        "### rocmci workloads",
        "",
        "| workload | outcome | time | passed | detail |",
        "|---|---|---|---|---|",
        "| moe a | :warning: crashed at teardown | 61s | 4/4 | x \\| y (after a SIGABRT retry: 2 attempts) |",
        "| moe b | :warning: crashed at teardown | 0s | - | z |",
        "",
        res.link_refs(res.TEARDOWN_EXPLANATION),
        "",
        "- note one \\|",
        "- see [o/r#1](https://github.com/o/r/issues/1)",
    ]) + "\n"  # fmt: skip
    assert "[ROCm/rocm-systems#6942](https://github.com/ROCm/rocm-systems/issues/6942)" in text
    plain = res.render_annotation([_r(OC.PASSED, detail="ok")])
    assert plain.endswith("| w | :white_check_mark: passed | 1s | - | ok |\n")
    assert plain.count("\n") == 5


def test_under_buildkite_needs_the_flag_and_the_agent(tmp_path):
    """BUILDKITE=true and buildkite-agent on PATH; either alone is not Buildkite."""
    agent = tmp_path / "buildkite-agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    assert res.under_buildkite({"BUILDKITE": "true", "PATH": str(tmp_path)}) == str(agent)
    assert res.under_buildkite({"BUILDKITE": "false", "PATH": str(tmp_path)}) is None
    assert res.under_buildkite({"PATH": str(tmp_path)}) is None
    assert res.under_buildkite({"BUILDKITE": "true", "PATH": str(tmp_path / "none")}) is None


def test_under_buildkite_reads_the_process_environment(tmp_path, monkeypatch):
    """With no mapping given, the process environment decides."""
    agent = tmp_path / "buildkite-agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    monkeypatch.setenv("BUILDKITE", "true")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert res.under_buildkite() == str(agent)
    monkeypatch.setenv("BUILDKITE_PARALLEL_JOB", "3")
    assert res.annotation_context(["moe-tests"]) == "rocmci-moe-tests-3"


def test_annotation_context_is_one_per_job_and_kind():
    """Kinds once each in order, the parallel job appended, unsafe characters folded, 100 characters at most."""
    assert res.annotation_context(["b", "a", "b"], {}) == "rocmci-b-a"
    assert res.annotation_context(["a"], {"BUILDKITE_PARALLEL_JOB": "0"}) == "rocmci-a-0"
    assert res.annotation_context(["a"], {"BUILDKITE_PARALLEL_JOB": ""}) == "rocmci-a"
    assert res.annotation_context(["a b/c"], {}) == "rocmci-a_b_c"
    assert res.annotation_context(["k" * 200], {}) == ("rocmci-" + "k" * 200)[:100]


AGENT = """#!{python}
import json, os, sys
record = {{"argv": sys.argv[1:], "cwd": os.getcwd(), "stdin": sys.stdin.read()}}
with open(os.environ["AGENT_RECORD"], "a") as fh:
    fh.write(json.dumps(record) + "\\n")
fail = os.environ.get("AGENT_FAIL", "")
if fail and fail in sys.argv:
    sys.stderr.write(os.environ.get("AGENT_STDERR", ""))
    sys.exit(3)
"""


def _agent(tmp_path: Path, monkeypatch) -> tuple[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "buildkite-agent"
    agent.write_text(AGENT.format(python=sys.executable))
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "agent.jsonl"
    monkeypatch.setenv("AGENT_RECORD", str(record))
    return str(agent), record


def test_posting_to_buildkite_annotates_then_uploads(tmp_path, monkeypatch):
    """`annotate` gets the Markdown on stdin, then one `artifact upload` per file, run in the results folder."""
    agent, record = _agent(tmp_path, monkeypatch)
    monkeypatch.delenv("BUILDKITE_PARALLEL_JOB", raising=False)
    results_dir = tmp_path / "results"
    (results_dir / "sub").mkdir(parents=True)
    rs = [_r(OC.NO_TESTS, workload="moe-tests x"), _r(OC.PASSED, workload="dp-example y")]
    files = [results_dir / "a.log", results_dir / "sub" / "b.xml"]
    assert res.post_to_buildkite(agent, rs, ["n"], results_dir, files) == []
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c["argv"] for c in calls] == [
        ["annotate", "--context", "rocmci-moe-tests-dp-example", "--style", "warning"],
        ["artifact", "upload", "a.log"],
        ["artifact", "upload", "sub/b.xml"],
    ]
    assert calls[0]["stdin"] == res.render_annotation(rs, ["n"])
    assert [c["stdin"] for c in calls[1:]] == ["", ""]
    assert {c["cwd"] for c in calls} == {str(results_dir)}


def test_agent_failures_are_problems_never_exceptions(tmp_path, monkeypatch):
    """A failing agent call is one line (its last stderr line, or 'no output'); the other calls still run."""
    agent, record = _agent(tmp_path, monkeypatch)
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    monkeypatch.setenv("AGENT_FAIL", "annotate")
    monkeypatch.setenv("AGENT_STDERR", "first\nsecond line \n")
    files = [results_dir / "a.log"]
    assert res.post_to_buildkite(agent, [_r(OC.FAILED)], [], results_dir, files) == [
        "`buildkite-agent annotate --context` exited 3: second line"
    ]
    assert len(record.read_text().splitlines()) == 2  # the upload still ran
    monkeypatch.setenv("AGENT_FAIL", "upload")
    monkeypatch.setenv("AGENT_STDERR", "  \n")
    assert res.post_to_buildkite(agent, [_r(OC.FAILED)], [], results_dir, files) == [
        "`buildkite-agent artifact upload` exited 3: no output"
    ]
    missing = str(tmp_path / "no-agent")
    problems = res.post_to_buildkite(missing, [_r(OC.FAILED)], [], results_dir, files)
    assert problems == [
        f"`buildkite-agent annotate` failed: [Errno 2] No such file or directory: '{missing}'",
        f"`buildkite-agent artifact` failed: [Errno 2] No such file or directory: '{missing}'",
    ]


# --- outcomes: one result per workload, shards merged -------------------------------------------------------


def _opts(results_dir: Path, **kw) -> RunOptions:
    return RunOptions(image="img", results_dir=results_dir, timeout=60.0, network=None, shm_size="1g", memory=None,
                      hf_cache="/tmp", workdir="/", **kw)  # fmt: skip


def _wl(name: str, kind: str = "moe-tests", **kw) -> Workload:
    return Workload(name, kind, ("python3", "-m", "pytest"), **kw)


def _planned(workload: Workload) -> PlannedRun:
    return PlannedRun(workload=workload, gpus=[], spec=None, slot=0)


def _shard(group: str, n: int) -> Workload:
    return Workload(f"moe-tests {group} shard {n}", "moe-tests", ("pytest", "-p", "rocmci_shard"),
                    junit=f"junit-{group}-{n}.xml", group=group)  # fmt: skip


def test_shards_of_one_workload_become_one_result_and_one_junit_file(tmp_path):
    """Consecutive sharded runs of a group merge (result and JUnit XML); anything else stays as it ran."""
    for group, n in (("ht", 0), ("ht", 1), ("ll", 0), ("ll", 1)):
        (tmp_path / f"junit-{group}-{n}.xml").write_text(
            f'<testsuite name="{group}{n}"><testcase name="c"/></testsuite>'
        )
    unsharded = Workload("moe-tests ht again", "moe-tests", ("pytest",), group="ht")
    lone = _wl("dp", "dp-example")
    work = [_shard("ht", 0), _shard("ht", 1), unsharded, lone, _shard("ll", 0), _shard("ll", 1)]
    prepared = Prepared(waves=[[_planned(w) for w in work[:3]], [_planned(w) for w in work[3:]]], warnings=[])
    ordered = [_r(OC.PASSED, workload=w.name, junit=res.JUnitSummary(tests=1)) for w in work]
    merged = outcomes.merge_results(prepared, ordered, _opts(tmp_path))
    assert [m.workload for m in merged] == [
        "moe-tests ht (2 shards)", "moe-tests ht again", "dp", "moe-tests ll (2 shards)",
    ]  # fmt: skip
    assert merged[1] is ordered[2] and merged[2] is ordered[3]
    assert prepared.files == [tmp_path / "junit-moe-ht.xml", tmp_path / "junit-moe-ll.xml"]
    assert ET.parse(tmp_path / "junit-moe-ht.xml").getroot().findall("testsuite")[1].get("name") == "ht1"
    assert [s.get("name") for s in ET.parse(tmp_path / "junit-moe-ll.xml").getroot()] == ["ll0", "ll1"]


def test_unsharded_runs_of_a_group_are_never_merged(tmp_path):
    """A group alone does not merge: only runs that are shards (rocmci_shard) of the same group do."""
    a = Workload("moe a", "moe-tests", ("pytest",), group="g")
    b = Workload("moe b", "moe-tests", ("pytest",), group="g")
    other = _shard("h", 0)
    prepared = Prepared(waves=[[_planned(a), _planned(b), _planned(_shard("g", 1)), _planned(other)]], warnings=[])
    ordered = [_r(OC.PASSED, workload=n) for n in ("a", "b", "g1", "h0")]
    merged = outcomes.merge_results(prepared, ordered, _opts(tmp_path))
    assert [m.workload for m in merged] == ["a", "moe-tests g (2 shards)", "h0"]
    assert prepared.files == [tmp_path / "junit-moe-g.xml"]
    nogroup = [Workload("s", "moe-tests", ("-p", "rocmci_shard")), Workload("t", "moe-tests", ("-p", "rocmci_shard"))]
    prepared = Prepared(waves=[[_planned(w) for w in nogroup]], warnings=[])
    assert [m.workload for m in outcomes.merge_results(prepared, [_r(OC.PASSED, workload="s"),
                                                                  _r(OC.PASSED, workload="t")], _opts(tmp_path))] == [
        "s", "t"]  # fmt: skip


def test_merged_shards_sum_counts_and_keep_the_worst(tmp_path):
    """One row for the shards: worst outcome, highest exit code and time, every workaround once, all logs."""
    shards = [
        res.Result("s0", OC.PASSED, 0, 5.0, "2 passed", res.JUnitSummary(tests=2), ["w2", "w1"], "s0.log"),
        res.Result("s1", OC.FAILED, 1, 9.0, "1 failed: t::x", res.JUnitSummary(3, 1, 0, 1, ["t::x"]), ["w1"], None),
        res.Result("s2", OC.NO_TESTS, 5, 1.0, "none", None, [], "s2.log"),
    ]
    merged = outcomes.merge_shards(shards, "moe-tests g (3 shards)")
    assert merged == res.Result(
        "moe-tests g (3 shards)", OC.FAILED, 5, 9.0,
        "3 shards: 3 passed, 1 skipped, 1 failed; shard 1: failed (1 failed: t::x); "
        "shard 2: no tests collected (none)",
        res.JUnitSummary(5, 1, 0, 1, ["t::x"]), ["w1", "w2"], "s0.log, , s2.log",
    )  # fmt: skip


def test_shard_summary_words():
    """Totals once, then only the shards that did not pass; without JUnit only the count."""
    assert outcomes.shard_summary([_r(OC.PASSED), _r(OC.PASSED)], None) == "2 shards"
    assert outcomes.shard_summary([_r(OC.PASSED)], res.JUnitSummary(tests=4, skipped=1)) == (
        "1 shards: 3 passed, 1 skipped"
    )
    two_failed = res.JUnitSummary(2, 2, 0, 0, ["a", "b"])
    assert outcomes.shard_summary([_r(OC.CRASHED, detail="x"), _r(OC.PASSED)], two_failed) == (
        "2 shards: 0 passed, 0 skipped, 2 failed; shard 0: crashed (x)"
    )  # fmt: skip


def test_no_tests_anywhere_and_a_lone_junit_merge():
    """NO_TESTS shards are dropped only when one passed; a single JUnit is taken as it is."""
    both = outcomes.merge_shards([_r(OC.NO_TESTS, exit_code=5), _r(OC.CRASHED, exit_code=139)], "m")
    assert both.outcome is OC.CRASHED and both.junit is None
    only = outcomes.merge_shards([_r(OC.NO_TESTS), _r(OC.PASSED, junit=res.JUnitSummary(tests=1))], "m")
    assert only.outcome is OC.PASSED and only.junit == res.JUnitSummary(tests=1)


# --- outcomes: one workload's outcome ---------------------------------------------------------------------


def _registry() -> list[wr.Workaround]:
    return wr.load_registry(REGISTRY)


def test_the_teardown_hint_names_the_workaround_and_whether_it_was_applied():
    """A teardown crash points at the ROCm runtime bug and says if rocmci's workaround was on for that run."""
    reg = _registry()
    applied = _wl("moe x", workarounds=("rocprofiler-register-teardown",))
    refs = "ROCm/rocm-systems#6942, vllm-project/vllm#55099, vllm-project/vllm#51644"
    assert outcomes.teardown_hint(applied, reg) == (
        f"likely the ROCm runtime teardown crash ({refs}); workaround rocprofiler-register-teardown was applied"
    )
    assert outcomes.teardown_hint(_wl("moe y"), reg).endswith(
        "workaround rocprofiler-register-teardown was NOT applied to this run"
    )
    assert outcomes.teardown_hint(_wl("dp", "dp-example"), reg) == ""
    tracked = [wr.Workaround("t", "vllm", {}, "rocm", ("moe-tests",), (), "", ("a/b#1",))]
    assert outcomes.teardown_hint(_wl("moe"), tracked) == ""
    first = wr.Workaround("first", "rocmci", {}, "rocm", ("moe-tests",), (), "", ("a/b#1", "c/d#2"))
    assert outcomes.teardown_hint(_wl("moe"), [*tracked, first, *reg]) == (
        "likely the ROCm runtime teardown crash (a/b#1, c/d#2); workaround first was NOT applied to this run"
    )


def _run(code: int, **kw) -> ctr.RunResult:
    return ctr.RunResult(exit_code=code, timed_out=kw.pop("timed_out", False), seconds=3.0, started=0.0, **kw)


def test_a_workloads_outcome_from_its_exit_status_and_junit(tmp_path):
    """The JUnit file named by the workload is read from the results folder and judged with the exit code."""
    (tmp_path / "j.xml").write_text('<testsuite><testcase name="a"/><testcase name="b"/></testsuite>')
    w = _wl("moe x", junit="j.xml", workarounds=("rocprofiler-register-teardown",))
    got = outcomes.outcome_of(w, _run(139), _opts(tmp_path), _registry(), "x.log")
    assert got == res.Result(
        "moe x", OC.CRASHED_AT_TEARDOWN, 139, 3.0,
        "2 passed, then the process died by SIGSEGV at teardown; " + outcomes.teardown_hint(w, _registry()),
        res.JUnitSummary(tests=2), ["rocprofiler-register-teardown"], "x.log",
    )  # fmt: skip
    timed = outcomes.outcome_of(w, _run(-9, timed_out=True), _opts(tmp_path, no_container=True), [], "x.log")
    assert (timed.outcome, timed.detail) == (OC.TIMED_OUT, "stopped at the timeout; its process group was killed")
    timed = outcomes.outcome_of(w, _run(137, timed_out=True), _opts(tmp_path), [], "x.log")
    assert (timed.outcome, timed.detail) == (OC.TIMED_OUT, "stopped at the timeout; the container was removed")
    oom = outcomes.outcome_of(w, _run(137, oom_killed=True), _opts(tmp_path), [], None)
    assert oom.outcome is OC.CRASHED and oom.log is None
    infra = outcomes.outcome_of(w, _run(0, infra_error="engine gone"), _opts(tmp_path), [], None)
    assert (infra.outcome, infra.detail) == (OC.INFRA, "engine gone")


def test_a_missing_or_broken_junit_is_named_in_the_detail(tmp_path):
    """No report where one was asked for fails exit 0, and the reason follows; no JUnit asked, none read."""
    w = _wl("moe x", junit="j.xml")
    got = outcomes.outcome_of(w, _run(0), _opts(tmp_path), [], None)
    assert (got.outcome, got.detail, got.junit) == (
        OC.FAILED,
        "exit 0, but no JUnit XML was written: nothing shows that any test ran "
        f"({tmp_path}/j.xml: no JUnit XML was written)",
        None,
    )
    (tmp_path / "j.xml").write_text("<testsuite>")
    got = outcomes.outcome_of(w, _run(1), _opts(tmp_path), [], None)
    assert got.detail == f"exit 1 ({tmp_path}/j.xml:1:12: malformed JUnit XML: no element found)"
    crashed = outcomes.outcome_of(w, _run(139), _opts(tmp_path), [], None)
    assert crashed.detail == "died by SIGSEGV (exit 139)"  # not FAILED/PASSED: the crash says enough
    (tmp_path / "other.xml").write_text('<testsuite><testcase name="a"/></testsuite>')
    plain = outcomes.outcome_of(_wl("dp", "dp-example"), _run(0), _opts(tmp_path), [], None)
    assert (plain.outcome, plain.detail, plain.junit, plain.workarounds) == (OC.PASSED, "exit 0", None, [])


# --- outcomes: the report -----------------------------------------------------------------------------------


def test_the_report_outside_buildkite(tmp_path, monkeypatch, capsys):
    """Table (or --json) on stdout, files in the results folder, where they are on stderr; worst exit code."""
    monkeypatch.delenv("BUILDKITE", raising=False)
    rs = [_r(OC.PASSED, workload="a", detail="S ok"), _r(OC.NO_TESTS, workload="b")]
    opts = _opts(tmp_path, strict=True)
    code = outcomes.report(rs, opts, False, ["note S"], [], lambda t: t.replace("S", "*"))
    out, err = capsys.readouterr()
    redacted = [r.redacted(lambda t: t.replace("S", "*")) for r in rs]
    assert code == 10
    assert out == res.render_table(redacted) + "\n"
    assert err == f"\nlogs and JUnit XML in {tmp_path}; Buildkite annotation: {tmp_path / 'annotation.md'}\n"
    assert (tmp_path / "annotation.md").read_text() == res.render_annotation(redacted, ["note *"])
    assert (tmp_path / "results.json").read_text() == res.render_json(redacted) + "\n"
    assert outcomes.report(rs, _opts(tmp_path), True, (), ()) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (res.render_json(rs) + "\n", "")


def test_the_report_under_buildkite(tmp_path, monkeypatch, capsys):
    """Under Buildkite: posted (existing files once each), problems as `rocmci:` lines, a pointer unless --json."""
    agent, record = _agent(tmp_path, monkeypatch)
    monkeypatch.setenv("BUILDKITE", "true")
    monkeypatch.setenv("PATH", str(Path(agent).parent))
    monkeypatch.delenv("BUILDKITE_PARALLEL_JOB", raising=False)
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    (results_dir / "a.log").write_text("log")
    rs = [_r(OC.FAILED, workload="moe-tests x", exit_code=1)]
    files = [results_dir / "a.log", results_dir / "gone.xml", results_dir / "a.log"]
    assert outcomes.report(rs, _opts(results_dir), False, ["n"], files) == 1
    out, err = capsys.readouterr()
    assert out == res.render_table(rs) + "\n"
    assert err == f"\nposted to the Buildkite build page; files also in {results_dir}\n"
    posted = [json.loads(line) for line in record.read_text().splitlines()]
    calls = [call["argv"] for call in posted]
    assert calls == [["annotate", "--context", "rocmci-moe-tests", "--style", "error"], ["artifact", "upload", "a.log"]]
    assert posted[0]["stdin"] == (results_dir / "annotation.md").read_text()  # the notes too
    assert posted[0]["stdin"].endswith("\n\n- n\n")
    monkeypatch.setenv("AGENT_FAIL", "annotate")
    monkeypatch.setenv("AGENT_STDERR", "denied\n")
    assert outcomes.report(rs, _opts(results_dir), True, [], []) == 1
    out, err = capsys.readouterr()
    assert out == res.render_json(rs) + "\n"
    assert err == "rocmci: `buildkite-agent annotate --context` exited 3: denied\n"


# --- workarounds: deciding -----------------------------------------------------------------------------------


def _w(**kw) -> wr.Workaround:
    base = {"id": "w", "applied_by": "rocmci", "sets": {"A": "1"}, "platform": "rocm", "workloads": ("moe-tests",),
            "tests": (), "why": "", "refs": ()}  # fmt: skip
    return wr.Workaround(**{**base, **kw})


def test_which_runs_a_workaround_applies_to():
    """Only rocmci's own entries, on ROCm, for the named workloads, and (when it names tests) those tests."""
    assert _w().applies("moe-tests") and _w().applies("moe-tests", "high-throughput")
    assert not _w(applied_by="vllm").applies("moe-tests")
    assert not _w(platform="cuda").applies("moe-tests")
    assert not _w().applies("dp-example")
    scoped = _w(tests=("high-throughput",))
    assert scoped.applies("moe-tests", "high-throughput") and scoped.applies("moe-tests", None)
    assert not scoped.applies("moe-tests", "low-latency")


def test_the_environment_a_run_gets_from_the_registry():
    """Every applying entry's variables, later entries winning; obsolete and empty entries supply nothing."""
    reg = [
        _w(id="a", sets={"A": "1", "B": "1"}),
        _w(id="empty", sets={}),
        _w(id="b", sets={"B": "2"}),
        _w(id="old", sets={"C": "3"}),
        _w(id="ll", sets={"D": "4"}, tests=("low-latency",)),
        _w(id="dp", sets={"E": "5"}, workloads=("dp-example",)),
    ]
    assert wr.env_for(reg, "moe-tests", "high-throughput", {"old"}) == ({"A": "1", "B": "2"}, ["a", "b"])
    assert wr.env_for(reg, "moe-tests", None) == ({"A": "1", "B": "2", "C": "3", "D": "4"}, ["a", "b", "old", "ll"])


def test_check_and_run_decisions():
    """Obsolete on the first met condition (its evidence alone); else applies with what was seen; others tracked."""
    labels = {"x.fixes": "a/b#1, c/d#2", "y": ""}
    met = wr.Condition("image_label", label="x.fixes", has="c/d#2")
    unmet = wr.Condition("image_label", label="x.fixes", has="e/f#3")
    unknown = wr.Condition("vllm_commit", commit="abcdef1")
    src = wa.Sources(image="img", labels=labels)
    obsolete = wa.check(_w(id="o", remove_when=(unmet, unknown, met, unmet)), src)
    assert obsolete == wa.Check(obsolete.workaround, wa.OBSOLETE, ("label x.fixes='a/b#1, c/d#2' on image img",))
    applies = wa.check(_w(id="a", remove_when=(unknown, unmet)), src)
    assert applies.status == wa.APPLIES and not applies.obsolete
    assert applies.evidence == ("label x.fixes='a/b#1, c/d#2' on image img: no e/f#3 in label x.fixes",)
    tracked = wa.check(_w(id="t", applied_by="vllm", remove_when=(met,)), src)
    assert (tracked.status, tracked.evidence) == (wa.TRACKED, ("carried by vllm, not by rocmci",))
    dp = wa.check(_w(id="d", workloads=("dp-example",), remove_when=(met,)), src)
    checks = [obsolete, applies, tracked, dp]
    assert wa.check_all([c.workaround for c in checks], src) == checks
    ids, notes = wa.run_decisions(checks, {"moe-tests"})
    assert ids == frozenset({"o"})
    assert notes == [obsolete.note(), applies.note()]
    ids, notes = wa.run_decisions(checks, {"dp-example", "other"})
    assert (ids, notes) == (frozenset({"d"}), [dp.note()])
    assert wa.run_decisions(checks, set()) == (frozenset(), [])


def test_the_note_and_reason_a_run_prints():
    """One line per entry: applied (to what, setting what, why) or NOT applied and the evidence."""
    w = _w(id="x", sets={"A": "0", "B": "1"}, workloads=("moe-tests", "dp"), tests=("ht", "ll"),
           remove_when=(wr.Condition("vllm_commit", commit="abcdef1"),))  # fmt: skip
    assert wa.Check(w, wa.APPLIES).note() == (
        "workaround x applied to moe-tests, dp [ht, ll] (A=0 B=1): no evidence checked "
        "(give --vllm-src, or an image whose labels say)"
    )
    assert (
        wa.Check(w, wa.OBSOLETE, ("e1", "e2")).note() == "workaround x NOT applied (A=0 B=1 not set): obsolete: e1; e2"
    )
    assert (
        wa.Check(_w(id="y"), wa.APPLIES).note()
        == "workaround y applied to moe-tests (A=1): no removal condition recorded"
    )
    assert wa.Check(w, wa.TRACKED).obsolete is False


def test_sources_count_as_evidence_only_when_given(tmp_path):
    """A checkout, labels or an image tree is evidence; an image name alone is not."""
    assert not wa.Sources().any and not wa.Sources(image="img").any
    assert wa.Sources(vllm_src=tmp_path).any and wa.Sources(labels={}).any and wa.Sources(image_tree=tmp_path).any


def test_image_label_conditions():
    """The label lists the fix (comma-separated, spaces ignored); a missing label and a missing item say which."""
    c = wr.Condition("image_label", label="L", has="o/r#1")
    assert wa.check_condition(c, wa.Sources(image="img")) == (None, "")
    assert wa.check_condition(c, wa.Sources(image="img", labels={"L": " x ,o/r#1 ,"})) == (
        True, "label L=' x ,o/r#1 ,' on image img"
    )  # fmt: skip
    assert wa.check_condition(c, wa.Sources(image="img", labels={"L": "o/r#10,, x"})) == (
        False, "label L='o/r#10,, x' on image img: no o/r#1 in label L"
    )  # fmt: skip
    assert wa.check_condition(c, wa.Sources(image="img", labels={"M": "o/r#1"})) == (False, "image img has no label L")
    assert wa.check_condition(c, wa.Sources(image="img", labels={"L": ""})) == (False, "image img has no label L")
    blank = wr.Condition("image_label", label="L", has="")
    assert wa.check_condition(blank, wa.Sources(image="i", labels={"L": " , "}))[0] is False


def _git_repo(path: Path) -> list[str]:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    shas = []
    for n in range(2):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{n}"], check=True)
        shas.append(
            subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
        )
    subprocess.run([*git, "checkout", "-q", "-b", "side", shas[0]], check=True)
    return shas


def test_commit_conditions_ask_git(tmp_path, monkeypatch):
    """HEAD contains the commit (obsolete), does not, or git cannot tell: each said as such."""
    repo = tmp_path / "vllm"
    first, second = _git_repo(repo)
    src = wa.Sources(vllm_src=repo)
    assert wa.check_condition(wr.Condition("vllm_commit", commit=first[:7]), src) == (
        True, f"{repo}: HEAD contains {first[:7]} (git merge-base --is-ancestor)"
    )  # fmt: skip
    assert wa.check_condition(wr.Condition("vllm_commit", commit=second), src) == (
        False, f"{repo}: HEAD does not contain {second}"
    )  # fmt: skip
    plain = tmp_path / "plain"
    plain.mkdir()
    assert wa.check_condition(wr.Condition("vllm_commit", commit=first), wa.Sources(vllm_src=plain)) == (
        None, f"{plain}: cannot tell whether HEAD contains {first} (not a git checkout?)"
    )  # fmt: skip
    assert wa.check_condition(wr.Condition("vllm_commit", commit=first), wa.Sources()) == (None, "")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert wa.check_condition(wr.Condition("vllm_commit", commit=first), src) == (
        None, f"{repo}: git could not answer"
    )  # fmt: skip


def _checkout(root: Path, test_text: str | None, dockerfile: str | None) -> Path:
    if test_text is not None:
        (root / "tests/kernels/moe").mkdir(parents=True)
        (root / "tests/kernels/moe/test_deepep_moe.py").write_text(test_text)
    if dockerfile is not None:
        (root / "docker").mkdir(parents=True)
        (root / "docker/Dockerfile.rocm_base").write_text(dockerfile)
    return root


TESTS = wr.Condition("vllm_tests_do_not_set", path="tests/kernels/moe/test_deepep_moe.py",
                     variable="ROCPROFILER_REGISTER_ENABLED")  # fmt: skip
DOCKER = wr.Condition("vllm_dockerfile_applies", path="docker/Dockerfile.rocm_base", fix="ROCm/rocm-systems#6942")
SETS = 'import os\n\nos.environ["ROCPROFILER_REGISTER_ENABLED"] = "0"\n'
APPLIES_FIX = "FROM x\n# ROCm/rocm-systems#6942\nRUN apply ROCm/rocm-systems#6942\n"


def test_checkout_conditions_with_their_evidence(tmp_path):
    """The test module sets the variable (where and how), or no longer does; the Dockerfile applies the fix or not."""
    old = _checkout(tmp_path / "old", SETS, "FROM x\n# ROCm/rocm-systems#6942\n")
    new = _checkout(tmp_path / "new", "import os\n", APPLIES_FIX)
    module = "tests/kernels/moe/test_deepep_moe.py"
    assert wa.check_condition(TESTS, wa.Sources(vllm_src=old)) == (
        False, f'{old.resolve()}/{module}:3: os.environ["ROCPROFILER_REGISTER_ENABLED"] = "0"'
    )  # fmt: skip
    assert wa.check_condition(TESTS, wa.Sources(vllm_src=new)) == (
        True, f"{new}/{module} (and the conftest/helper modules it imports) no longer set ROCPROFILER_REGISTER_ENABLED"
    )  # fmt: skip
    assert wa.check_condition(DOCKER, wa.Sources(vllm_src=old)) == (
        False,
        f"{old}/docker/Dockerfile.rocm_base: no instruction applies ROCm/rocm-systems#6942 (comments do not count)",
    )  # fmt: skip
    assert wa.check_condition(DOCKER, wa.Sources(vllm_src=new)) == (
        True, f"{new}/docker/Dockerfile.rocm_base:3: an instruction applies ROCm/rocm-systems#6942"
    )  # fmt: skip
    (tmp_path / "dir" / "docker" / "Dockerfile.rocm_base").mkdir(parents=True)
    assert wa.check_condition(DOCKER, wa.Sources(vllm_src=tmp_path / "dir"))[0] is None
    (tmp_path / "file").write_text("")
    assert wa.check_condition(DOCKER, wa.Sources(vllm_src=tmp_path / "file"))[0] is None
    assert wa.check_condition(TESTS, wa.Sources()) == (None, "")
    assert wa.check_condition(DOCKER, wa.Sources(labels={})) == (None, "")


def test_the_image_tree_decides_the_test_module_and_is_named_as_the_image_workspace(tmp_path):
    """With the image's own tests given, the module that will run is read there and shown by its image path."""
    checkout = _checkout(tmp_path / "checkout", "import os\n", APPLIES_FIX)
    tree = _checkout(tmp_path / "tree", SETS, None)
    module = "tests/kernels/moe/test_deepep_moe.py"
    src = wa.Sources(vllm_src=checkout, image_tree=tree, image_workspace="/vllm-workspace")
    assert wa.check_condition(TESTS, src) == (
        False, f'/vllm-workspace/{module}:3: os.environ["ROCPROFILER_REGISTER_ENABLED"] = "0"'
    )  # fmt: skip
    assert wa.check_condition(DOCKER, src)[0] is True  # the Dockerfile still comes from the checkout
    unnamed = wa.Sources(image_tree=tree)
    assert wa.check_condition(TESTS, unnamed) == (
        False, f'{tree.resolve()}/{module}:3: os.environ["ROCPROFILER_REGISTER_ENABLED"] = "0"'
    )  # fmt: skip
    fixed = _checkout(tmp_path / "fixed", "import os\n", None)
    assert wa.check_condition(TESTS, wa.Sources(image_tree=fixed, image_workspace="/ws")) == (
        True, f"/ws/{module} (and the conftest/helper modules it imports) no longer set ROCPROFILER_REGISTER_ENABLED"
    )  # fmt: skip
    assert wa.check_condition(TESTS, wa.Sources(image_tree=tmp_path / "none", image_workspace="/ws")) == (
        None, f"/ws/{module}: not found"
    )  # fmt: skip


def test_all_of_needs_every_part(tmp_path):
    """all_of: False if any part is checked and unmet, unknown if any is unknown, else met; evidence joined."""
    both = wr.Condition("all_of", parts=(TESTS, DOCKER))
    new = _checkout(tmp_path / "new", "import os\n", APPLIES_FIX)
    met, evidence = wa.check_condition(both, wa.Sources(vllm_src=new))
    assert met is True and evidence.count("; ") == 1 and evidence.startswith(f"{new}/tests/")
    half = _checkout(tmp_path / "half", SETS, None)
    met, evidence = wa.check_condition(both, wa.Sources(vllm_src=half))
    assert met is False and evidence.endswith(f"; {half}/docker/Dockerfile.rocm_base not found")
    unknown = _checkout(tmp_path / "unknown", "import os\n", None)
    assert wa.check_condition(both, wa.Sources(vllm_src=unknown))[0] is None
    assert wa.check_condition(both, wa.Sources()) == (None, "")
    label = wr.Condition("image_label", label="L", has="x")
    mixed = wr.Condition("all_of", parts=(label, TESTS))
    assert wa.check_condition(mixed, wa.Sources(image="i", labels={"L": "x"})) == (None, "label L='x' on image i")
    labels = wr.Condition("all_of", parts=(label, wr.Condition("image_label", label="M", has="y")))
    assert wa.check_condition(labels, wa.Sources(image="i", labels={"L": "x", "M": "y"})) == (
        True, "label L='x' on image i; label M='y' on image i"
    )  # fmt: skip


def test_registry_check_end_to_end(tmp_path):
    """The shipped registry: obsolete by the checkout's evidence or by the image label, else applied."""
    (w,) = _registry()
    new = _checkout(tmp_path / "new", "import os\n", APPLIES_FIX)
    assert wa.check(w, wa.Sources(vllm_src=new)).status == wa.OBSOLETE
    labelled = wa.Sources(image="img", labels={wr.FIXES_LABEL: "ROCm/rocm-systems#6942"})
    assert wa.check(w, labelled).evidence == (f"label {wr.FIXES_LABEL}='ROCm/rocm-systems#6942' on image img",)
    assert wr.FIXES_LABEL == "rocmci.rocm.fixes"
    applies = wa.check(w, wa.Sources(image="img", labels={}))
    assert (applies.status, applies.evidence) == (wa.APPLIES, ("image img has no label rocmci.rocm.fixes",))


def test_named_fixes_are_what_an_image_build_looks_for():
    """Every vllm_dockerfile_applies fix, all_of parts too, in registry order, once each."""
    assert wr.named_fixes(_registry()) == ("ROCm/rocm-systems#6942",)
    d = wr.Condition("vllm_dockerfile_applies", path="p", fix="a/b#1")
    e = wr.Condition("vllm_dockerfile_applies", path="p", fix="c/d#2")
    reg = [
        _w(id="1", remove_when=(wr.Condition("all_of", parts=(TESTS, e)), d)),
        _w(id="2", remove_when=(d, wr.Condition("image_label", label="L", has="x/y#3"))),
    ]
    assert wr.named_fixes(reg) == ("c/d#2", "a/b#1")
    assert wr.named_fixes([]) == ()


# --- workarounds: loading ------------------------------------------------------------------------------------


def _load(text: str) -> list[wr.Workaround]:
    return wr.from_document(yamldoc.parse(text, "reg.yaml"))


def test_the_shipped_registry_loads_as_written():
    """The entry rocmci applies: its variable, scope, refs, folded why, and both removal conditions."""
    (w,) = _registry()
    assert (w.id, w.applied_by, w.sets, w.platform, w.workloads, w.tests) == (
        "rocprofiler-register-teardown", "rocmci", {"ROCPROFILER_REGISTER_ENABLED": "0"}, "rocm", ("moe-tests",),
        ("high-throughput",),
    )  # fmt: skip
    assert w.refs == ("ROCm/rocm-systems#6942", "vllm-project/vllm#55099", "vllm-project/vllm#51644")
    assert w.why.startswith("All 28 high-throughput DeepEP MoE cases pass, then") and "  " not in w.why
    assert "\n" not in w.why
    both, label = w.remove_when
    lines = REGISTRY.read_text().splitlines()
    for condition, text in ((both, "- all_of:"), (label, "- image_label:")):
        file, line, col = condition.where.rsplit(":", 2)
        assert file == str(REGISTRY) and lines[int(line) - 1][int(col) - 3 :] == text  # the item's "- "
    assert [p.where for p in both.parts] == [both.where] * 2
    assert [replace(c, where="") for c in (*both.parts, label)] == [
        wr.Condition("vllm_tests_do_not_set", path="tests/kernels/moe/test_deepep_moe.py",
                     variable="ROCPROFILER_REGISTER_ENABLED"),
        wr.Condition("vllm_dockerfile_applies", path="docker/Dockerfile.rocm_base", fix="ROCm/rocm-systems#6942"),
        wr.Condition("image_label", label="rocmci.rocm.fixes", has="ROCm/rocm-systems#6942"),
    ]  # fmt: skip
    assert (both.kind, both.path, both.fix, both.commit) == ("all_of", "", "", "")


def test_defaults_of_a_minimal_entry():
    """Only an id: applied by rocmci, on ROCm, sets nothing, applies nowhere, no refs or conditions."""
    (w,) = _load("workarounds:\n- id: x\n")
    assert w == wr.Workaround("x", "rocmci", {}, "rocm", (), (), "", (), ())
    (v,) = _load("workarounds:\n- id: y\n  applied_by: vllm\n  applies_to: {platform: cuda}\n  why: ' a\n\n   b '\n")
    assert (v.applied_by, v.platform, v.why) == ("vllm", "cuda", "a b")
    (c,) = _load("workarounds:\n- id: c\n  remove_when:\n  - vllm_commit: abcdef1\n"
                 "  - vllm_dockerfile_applies: {path: ./docker/D, fix: a-b/c.d#12}\n")  # fmt: skip
    assert c.remove_when == (
        wr.Condition("vllm_commit", commit="abcdef1", where="reg.yaml:4:5"),
        wr.Condition("vllm_dockerfile_applies", path="docker/D", fix="a-b/c.d#12", where="reg.yaml:5:5"),
    )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[]\n", "reg.yaml:1:1: a workaround registry is a mapping with a 'workarounds' list"),
        ("workarounds: {}\n", "reg.yaml:1:1: a workaround registry is a mapping with a 'workarounds' list"),
        ("# the registry\n\n  workarounds: {}\n",
         "reg.yaml:3:3: a workaround registry is a mapping with a 'workarounds' list"),
        ("workarounds:\n- x\n", "reg.yaml:2:3: each workaround must be a mapping"),
        ("workarounds:\n- id: x\n  zz: 1\n  aa: 2\n", "reg.yaml:4:3: unknown key 'aa'"),
        ("workarounds:\n- id: ''\n", "reg.yaml:2:3: each workaround needs a unique 'id' string"),
        ("workarounds:\n- id: 1\n", "reg.yaml:2:3: each workaround needs a unique 'id' string"),
        ("workarounds:\n- applied_by: x\n", "reg.yaml:2:3: each workaround needs a unique 'id' string"),
        ("workarounds:\n- id: a\n- id: a\n", "reg.yaml:3:3: each workaround needs a unique 'id' string"),
        ("workarounds:\n- id: a\n  id: b\n", "reg.yaml:3:3: duplicate key 'id' (first at line 2)"),
        ("workarounds:\n- id: a\n  sets: [A]\n",
         "reg.yaml:3:3: 'sets' must map environment variable names to string values"),
        ("workarounds:\n- id: a\n  sets: {a: '1'}\n",
         "reg.yaml:3:3: 'sets' must map environment variable names to string values"),
        ("workarounds:\n- id: a\n  sets: {A-B: '1'}\n",
         "reg.yaml:3:3: 'sets' must map environment variable names to string values"),
        ("workarounds:\n- id: a\n  sets: {A: 1}\n",
         "reg.yaml:3:3: 'sets' must map environment variable names to string values"),
        ("workarounds:\n- id: a\n  applies_to: [x]\n", "reg.yaml:3:3: 'applies_to' takes platform, tests, workloads"),
        ("workarounds:\n- id: a\n  applies_to: {gpus: 1}\n",
         "reg.yaml:3:3: 'applies_to' takes platform, tests, workloads"),
        ("workarounds:\n- id: a\n  applies_to: {workloads: x}\n",
         "reg.yaml:2:3: applies_to.workloads must be a list of strings"),
        ("workarounds:\n- id: a\n  applies_to: {tests: [1]}\n",
         "reg.yaml:2:3: applies_to.tests must be a list of strings"),
        ("workarounds:\n- id: a\n  refs: x\n", "reg.yaml:2:3: refs must be a list of strings"),
        ("workarounds:\n- id: a\n  remove_when: {vllm_commit: abcdef1}\n",
         "reg.yaml:3:3: 'remove_when' must be a list of conditions"),
    ],
)  # fmt: skip
def test_registry_errors_say_what_and_where(text, line):
    """Bad input: one `file:line:col: what` line, exit 2 (InputError)."""
    with pytest.raises(InputError) as err:
        _load(text)
    assert err.value.one_line() == line


KINDS = "all_of, image_label, vllm_commit, vllm_dockerfile_applies, vllm_tests_do_not_set"


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ("x", f"each 'remove_when' item is one of {KINDS}"),
        ("{vllm_commit: abcdef1, image_label: x}", f"each 'remove_when' item is one of {KINDS}"),
        ("{since: abcdef1}", f"each 'remove_when' item is one of {KINDS}"),
        ("{all_of: [{vllm_commit: abcdef1}]}", "all_of takes a list of two or more conditions (not nested)"),
        ("{all_of: {vllm_commit: abcdef1}}", "all_of takes a list of two or more conditions (not nested)"),
        ("{all_of: [{vllm_commit: abcdef1}, {all_of: [{vllm_commit: abcdef2}, {vllm_commit: abcdef3}]}]}",
         "all_of takes a list of two or more conditions (not nested)"),
        ("{vllm_commit: abcdef}", "vllm_commit must be a commit hash (7 to 40 lowercase hex digits)"),
        ("{vllm_commit: ABCDEF1}", "vllm_commit must be a commit hash (7 to 40 lowercase hex digits)"),
        ("{vllm_commit: '" + "a" * 41 + "'}", "vllm_commit must be a commit hash (7 to 40 lowercase hex digits)"),
        ("{vllm_commit: [abcdef1]}", "vllm_commit must be a commit hash (7 to 40 lowercase hex digits)"),
        ("{image_label: {name: x}}", "image_label takes exactly has, name (strings)"),
        ("{image_label: {name: x, has: y, z: w}}", "image_label takes exactly has, name (strings)"),
        ("{image_label: {name: x, has: [y]}}", "image_label takes exactly has, name (strings)"),
        ("{image_label: [x]}", "image_label takes exactly has, name (strings)"),
        ("{vllm_tests_do_not_set: {path: t.py}}", "vllm_tests_do_not_set takes exactly path, variable (strings)"),
        ("{vllm_dockerfile_applies: {path: D, variable: X}}",
         "vllm_dockerfile_applies takes exactly fix, path (strings)"),
        ("{vllm_tests_do_not_set: {path: /t.py, variable: X}}",
         "vllm_tests_do_not_set path '/t.py' must be relative to the vLLM checkout"),
        ("{vllm_dockerfile_applies: {path: a/../../D, fix: a/b#1}}",
         "vllm_dockerfile_applies path 'a/../../D' must be relative to the vLLM checkout"),
        ("{vllm_dockerfile_applies: {path: '', fix: a/b#1}}",
         "vllm_dockerfile_applies path '' must be relative to the vLLM checkout"),
        ("{vllm_tests_do_not_set: {path: t.py, variable: x}}",
         "vllm_tests_do_not_set names a Python module and an environment variable"),
        ("{vllm_tests_do_not_set: {path: t.py, variable: X-Y}}",
         "vllm_tests_do_not_set names a Python module and an environment variable"),
        ("{vllm_tests_do_not_set: {path: t.pyc, variable: X}}",
         "vllm_tests_do_not_set names a Python module and an environment variable"),
        ("{vllm_dockerfile_applies: {path: D, fix: a/b}}", "vllm_dockerfile_applies fix 'a/b' must read owner/repo#N"),
        ("{vllm_dockerfile_applies: {path: D, fix: a/b#1x}}",
         "vllm_dockerfile_applies fix 'a/b#1x' must read owner/repo#N"),
        ("{vllm_dockerfile_applies: {path: D, fix: -a/b#1}}",
         "vllm_dockerfile_applies fix '-a/b#1' must read owner/repo#N"),
    ],
)  # fmt: skip
def test_condition_errors_say_what_and_where(condition, message):
    """Each malformed removal condition: its message, at the item's position."""
    with pytest.raises(InputError) as err:
        _load(f"workarounds:\n- id: a\n  remove_when:\n  - {condition}\n")
    assert err.value.one_line() == f"reg.yaml:4:5: {message}"


def test_accepted_conditions_at_their_bounds():
    """The forms the registry accepts: 7 and 40 hex digits, an ENV name with digits, a nested module path."""
    (w,) = _load(
        "workarounds:\n- id: a\n  remove_when:\n"
        "  - vllm_commit: abcdef1\n"
        f"  - vllm_commit: '{'0' * 40}'\n"
        "  - vllm_tests_do_not_set: {path: tests/a/b.py, variable: _X9}\n"
        "  - all_of: [{image_label: {name: n, has: h}}, {vllm_commit: abcdef2}]\n"
    )
    assert [c.kind for c in w.remove_when] == ["vllm_commit", "vllm_commit", "vllm_tests_do_not_set", "all_of"]
    assert w.remove_when[2].variable == "_X9" and w.remove_when[2].path == "tests/a/b.py"
    assert [p.where for p in w.remove_when[3].parts] == ["reg.yaml:7:5", "reg.yaml:7:5"]
    assert wr.ENTRY_KEYS == {"id", "applied_by", "sets", "applies_to", "why", "refs", "remove_when"}


# --- workarounds: output ----------------------------------------------------------------------------------


def test_workarounds_as_json_and_for_people(tmp_path):
    """`invoke workarounds --json` and its plain text: status, evidence (or why none), sets, scope, linked refs."""
    w = _w(id="x", sets={"A": "0", "B": "1"}, tests=("ht", "ll"), refs=("o/r#1", "not a ref"))
    bare = _w(id="y", sets={}, workloads=("dp", "moe"))
    checks = [wa.Check(w, wa.OBSOLETE, ("e1", "e2")), wa.Check(bare, wa.APPLIES)]
    assert wa.as_json(checks) == [
        {"id": "x", "status": "obsolete", "evidence": ["e1", "e2"], "sets": {"A": "0", "B": "1"},
         "applies_to": {"workloads": ["moe-tests"], "tests": ["ht", "ll"]},
         "refs": {"o/r#1": "https://github.com/o/r/issues/1", "not a ref": None}},
        {"id": "y", "status": "applies", "evidence": ["no removal condition recorded"], "sets": {},
         "applies_to": {"workloads": ["dp", "moe"], "tests": []}, "refs": {}},
    ]  # fmt: skip
    text = wa.render(checks, wa.Sources(vllm_src=tmp_path))
    assert text.splitlines() == [
        "x: OBSOLETE  (sets A=0, B=1; moe-tests [ht, ll])",
        "    evidence: e1",
        "    evidence: e2",
        "    ref: o/r#1 https://github.com/o/r/issues/1",
        "    ref: not a ref",
        "y: APPLIES  (sets -; dp, moe)",
        "    evidence: no removal condition recorded",
    ]
    none_given = wa.render(checks, wa.Sources())
    assert none_given == text + "\n\n" + (
        "no evidence given: name a vLLM checkout (--vllm-src PATH) or an image (--image TAG)"
    )


def test_registry_files_are_read_from_disk_with_their_display_name(tmp_path):
    """load_registry reads the file; positions in errors use the name given for it."""
    path = tmp_path / "w.yaml"
    path.write_text("workarounds:\n- id: a\n- id: a\n")
    with pytest.raises(InputError) as err:
        wr.load_registry(path, "shown.yaml")
    assert err.value.one_line() == "shown.yaml:3:3: each workaround needs a unique 'id' string"
    assert os.fspath(REGISTRY).endswith("workarounds.yaml")


def test_git_says_nothing_on_the_terminal_when_asked_about_a_plain_folder(tmp_path, capfd):
    """The commit check's git call is quiet: its "not a git repository" becomes rocmci's own one-line evidence."""
    c = wr.Condition("vllm_commit", commit="abcdef1")
    assert wa.check_condition(c, wa.Sources(vllm_src=tmp_path))[0] is None
    assert capfd.readouterr() == ("", "")


def test_a_dockerfile_that_is_not_utf8_is_still_read(tmp_path):
    """A stray non-UTF-8 byte (a Latin-1 comment) does not hide the instruction that applies the fix."""
    root = tmp_path / "vllm"
    (root / "docker").mkdir(parents=True)
    (root / "docker/Dockerfile.rocm_base").write_bytes(b"FROM x\n# caf\xe9\nRUN apply ROCm/rocm-systems#6942\n")
    assert wa.check_condition(DOCKER, wa.Sources(vllm_src=root)) == (
        True, f"{root}/docker/Dockerfile.rocm_base:3: an instruction applies ROCm/rocm-systems#6942"
    )  # fmt: skip


def test_only_the_image_trees_own_prefix_is_renamed(tmp_path):
    """The image workspace replaces the copied tree's path at the front only, not where the same text recurs."""
    tree = tmp_path / "t"
    rel = f"tests{tree.resolve()}/m.py"  # the tree's own path, again, inside the module's path
    (tree / rel).parent.mkdir(parents=True)
    (tree / rel).write_text('import os\nos.environ["X"] = "1"\n')
    c = wr.Condition("vllm_tests_do_not_set", path=rel, variable="X")
    assert wa.check_condition(c, wa.Sources(image_tree=tree, image_workspace="/ws")) == (
        False, f'/ws/{rel}:2: os.environ["X"] = "1"'
    )  # fmt: skip


def test_on_a_terminal_the_status_word_is_coloured(monkeypatch):
    """`invoke workarounds` on a terminal: OBSOLETE in bold red, APPLIES in green (plain text elsewhere)."""
    main, side = os.openpty()
    with os.fdopen(main, "rb"), os.fdopen(side, "w") as terminal:
        for name in ("CI", "NO_COLOR"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("TERM", "xterm-256color")
        monkeypatch.setattr(sys, "stdout", terminal)
        w = _w(id="x", sets={"A": "1"})
        text = wa.render([wa.Check(w, wa.OBSOLETE, ("e",)), wa.Check(w, wa.APPLIES, ("f",))], wa.Sources(labels={}))
    assert text.splitlines()[0] == "\x1b[1mx: \x1b[0m\x1b[1;31mOBSOLETE\x1b[0m\x1b[1m  (sets A=1; moe-tests)\x1b[0m"
    assert text.splitlines()[2] == "\x1b[1mx: \x1b[0m\x1b[1;32mAPPLIES\x1b[0m\x1b[1m  (sets A=1; moe-tests)\x1b[0m"


@pytest.mark.parametrize("name", ["annotation.md", "results.json"])
def test_a_report_file_that_cannot_be_written_names_the_results_setting(tmp_path, monkeypatch, capsys, name):
    """annotation.md and results.json live in the results folder: an error says which setting chose it."""
    monkeypatch.delenv("BUILDKITE", raising=False)
    (tmp_path / name).mkdir()
    with pytest.raises(InputError) as err:
        outcomes.report([_r(OC.PASSED)], _opts(tmp_path), False)
    assert err.value.one_line() == (
        f"{tmp_path}/{name}: is a directory, not a regular file (from setting results_dir, ROCMCI_RESULTS_DIR). "
        "give a file path"
    )


def test_a_missing_label_lists_nothing():
    """No label (or an empty one) lists no fix at all, whatever the fix is called."""
    for has in ("XXXX", "x", ""):
        c = wr.Condition("image_label", label="L", has=has)
        assert wa.check_condition(c, wa.Sources(image="i", labels={}))[0] is False
        assert wa.check_condition(c, wa.Sources(image="i", labels={"L": ""}))[0] is False


def test_a_condition_kind_the_loader_never_makes_is_a_programming_error():
    """check_condition knows every kind from_document admits; another one names itself in the error."""
    with pytest.raises(AssertionError, match="^since$"):
        wa.check_condition(wr.Condition("since"), wa.Sources())
