from __future__ import annotations

import pytest

from rocmci.errors import InputError
from rocmci.runs.results import JUnitSummary, Outcome, classify, parse_junit, signal_of

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4" failures="1" errors="0" skipped="1">
<testcase classname="kernels.moe.test_deepep_moe" name="test_deep_ep_moe[1]"/>
<testcase classname="kernels.moe.test_deepep_moe" name="test_deep_ep_moe[2]"><failure message="x"/></testcase>
<testcase classname="kernels.moe.test_deepep_moe" name="test_deep_ep_moe[3]"><skipped/></testcase>
<testcase classname="kernels.moe.test_deepep_moe" name="test_deep_ep_moe[4]"/>
</testsuite></testsuites>
"""


def test_parse_counts_cases(tmp_path):
    path = tmp_path / "j.xml"
    path.write_text(JUNIT)
    s = parse_junit(path)
    assert (s.tests, s.failures, s.skipped, s.passed) == (4, 1, 1, 2)
    assert s.failed_cases == ["kernels.moe.test_deepep_moe::test_deep_ep_moe[2]"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (JUNIT[:200], "malformed JUnit XML"),
        ("", "malformed JUnit XML"),
        ("<html><body/></html>", "root element is <html>"),
    ],
)
def test_bad_junit_is_an_input_error_with_a_position(tmp_path, text, message):
    path = tmp_path / "j.xml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        parse_junit(path)
    assert str(path) in err.value.one_line()


def test_missing_junit(tmp_path):
    with pytest.raises(InputError, match="no JUnit XML was written"):
        parse_junit(tmp_path / "none.xml")


ALL_PASSED = JUnitSummary(tests=28)
ONE_FAILED = JUnitSummary(tests=28, failures=1, failed_cases=["t::a"])


@pytest.mark.parametrize(
    ("code", "junit", "kw", "outcome"),
    [
        (0, ALL_PASSED, {}, Outcome.PASSED),
        (0, None, {}, Outcome.PASSED),
        (0, JUnitSummary(), {}, Outcome.NO_TESTS),
        (5, JUnitSummary(), {}, Outcome.NO_TESTS),
        (1, ONE_FAILED, {}, Outcome.FAILED),
        (139, ALL_PASSED, {}, Outcome.CRASHED_AT_TEARDOWN),
        (-11, ALL_PASSED, {}, Outcome.CRASHED_AT_TEARDOWN),
        (139, ONE_FAILED, {}, Outcome.CRASHED),
        (134, None, {}, Outcome.CRASHED),
        (137, ALL_PASSED, {"timed_out": True}, Outcome.TIMED_OUT),
        (125, None, {}, Outcome.INFRA),
        (0, None, {"infra_error": "engine gone"}, Outcome.INFRA),
    ],
)
def test_classify(code, junit, kw, outcome):
    assert classify(code, junit, **kw)[0] is outcome


def test_teardown_crash_names_signal_and_hint():
    outcome, detail = classify(139, ALL_PASSED, teardown_hint="workaround x was applied")
    assert outcome is Outcome.CRASHED_AT_TEARDOWN
    assert detail == "28 passed, then the process died by SIGSEGV at teardown; workaround x was applied"


def test_signal_of():
    assert (signal_of(139), signal_of(-11), signal_of(1), signal_of(0)) == (11, 11, None, None)


def test_exit_code_treats_no_tests_like_upstreams_runner():
    from rocmci.runs.results import Result, exit_code

    empty = [Result("w", Outcome.NO_TESTS, 5, 1.0, "pytest collected no tests")]
    assert (exit_code(empty), exit_code(empty, strict=True)) == (0, 10)
    crashed = [Result("w", Outcome.CRASHED_AT_TEARDOWN, 139, 1.0, "x")] + empty
    assert exit_code(crashed) == 11


def test_timeout_message_names_what_was_stopped():
    assert classify(137, None, timed_out=True)[1] == "stopped at the timeout; the container was removed"
    assert classify(-9, None, timed_out=True, in_container=False)[1] == (
        "stopped at the timeout; its process group was killed"
    )


def test_annotation_links_refs_explains_teardown_once_and_escapes_pipes():
    from rocmci.runs.results import Result, annotation_style, render_annotation

    teardown = Result(
        "moe-tests high-throughput", Outcome.CRASHED_AT_TEARDOWN, 139, 61.0,
        "28 passed, then the process died by SIGSEGV at teardown; likely (ROCm/rocm-systems#6942) a|b",
        JUnitSummary(tests=28),
    )  # fmt: skip
    ok = Result("moe-tests low-latency", Outcome.PASSED, 0, 30.0, "28 passed, 0 skipped", JUnitSummary(tests=28))
    text = render_annotation([teardown, ok], ["workaround x applied (vllm-project/vllm#55099)"])
    link = "[ROCm/rocm-systems#6942](https://github.com/ROCm/rocm-systems/issues/6942)"
    assert text.splitlines()[4] == (
        "| moe-tests high-throughput | :warning: crashed at teardown | 61s | 28/28 | 28 passed, then the process "
        f"died by SIGSEGV at teardown; likely ({link}) a\\|b |"
    )
    assert text.count("**Crashed at teardown**") == 1
    assert (
        "- workaround x applied ([vllm-project/vllm#55099](https://github.com/vllm-project/vllm/issues/55099))" in text
    )
    assert annotation_style([teardown, ok]) == "warning" and annotation_style([ok]) == "success"


def test_buildkite_commands_and_context():
    from rocmci.runs.results import annotation_context, buildkite_commands

    assert annotation_context(["moe-tests", "moe-tests"], {}) == "rocmci-moe-tests"
    assert annotation_context(["dp-example"], {"BUILDKITE_PARALLEL_JOB": "2; rm"}) == "rocmci-dp-example-2_rm"
    assert buildkite_commands("bk", "c", "error", ["a.log"]) == [
        ["bk", "annotate", "--context", "c", "--style", "error"],
        ["bk", "artifact", "upload", "a.log"],
    ]


# --- the JUnit XML that is kept and uploaded is the redacted copy --------------------------------------------


def test_junit_is_redacted_in_text_and_attribute_values_never_in_markup(tmp_path):
    import xml.etree.ElementTree as ET

    from rocmci.runs.results import redact_junit_file
    from rocmci.secrets import Redactor

    secret = "s3cr<e&t>\u00e9!"  # XML escapes it in the file; pytest shows the accent escaped in ids
    path = tmp_path / "junit.xml"
    tree = ET.fromstring(JUNIT)
    case = tree.find(".//testcase[@name='test_deep_ep_moe[2]']")
    case.set("name", f"test_deep_ep_moe[{secret}]")
    case.find("failure").set("message", f"AssertionError: token was {secret}")
    case.find("failure").text = f"assert '{secret}' == ''"
    path.write_bytes(ET.tostring(tree, encoding="utf-8", xml_declaration=True))
    assert b"&lt;e&amp;t&gt;" in path.read_bytes()  # what a search of the raw text would have to find
    # "testcase" and "failure" are given values too: as text they are masked, as tags they must stay.
    redact = Redactor({}, given={"UPLOAD_PASSWORD": secret, "WHAT": "testcase", "FAIL": "failure"})
    redact_junit_file(path, redact)
    data = path.read_bytes()
    assert b"s3cr" not in data and b"e&amp;t" not in data
    summary = parse_junit(path)  # still well-formed, with the same cases
    assert (summary.tests, summary.failures, summary.skipped) == (4, 1, 1)
    assert summary.failed_cases == ["kernels.moe.test_deepep_moe::test_deep_ep_moe[***]"]
    failure = ET.fromstring(data).find(".//failure")
    assert failure.get("message") == "AssertionError: token was ***" and failure.text == "assert '***' == ''"


def test_a_junit_file_that_cannot_be_redacted_is_not_kept(tmp_path):
    from rocmci.runs.results import redact_junit_file
    from rocmci.secrets import Redactor

    broken = tmp_path / "junit.xml"
    broken.write_text(JUNIT[:200] + "hunter2-secret")  # cut off: its escaping cannot be known
    redact_junit_file(broken, Redactor({}, given={"PASSWORD": "hunter2-secret"}))
    assert not broken.exists()
    redact_junit_file(tmp_path / "none.xml", Redactor({}))  # no report written: nothing to do
    assert not (tmp_path / "none.xml").exists()
