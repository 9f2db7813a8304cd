from __future__ import annotations

import pytest

from rocmci.errors import InputError
from rocmci.results import JUnitSummary, Outcome, classify, parse_junit, signal_of

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
