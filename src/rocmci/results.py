"""JUnit XML + exit status -> one outcome. A crash after every case passed is named as such."""

from __future__ import annotations

import json
import signal
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from rocmci.errors import InputError


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NO_TESTS = "no tests collected"
    CRASHED_AT_TEARDOWN = "crashed at teardown"
    CRASHED = "crashed"
    TIMED_OUT = "timed out"
    INFRA = "infrastructure error"


EXIT_CODES = {
    Outcome.PASSED: 0,
    Outcome.FAILED: 1,
    Outcome.NO_TESTS: 10,
    Outcome.CRASHED_AT_TEARDOWN: 11,
    Outcome.CRASHED: 12,
    Outcome.TIMED_OUT: 13,
    Outcome.INFRA: 14,
}
SEVERITY = [
    Outcome.PASSED,
    Outcome.NO_TESTS,
    Outcome.FAILED,
    Outcome.CRASHED_AT_TEARDOWN,
    Outcome.CRASHED,
    Outcome.TIMED_OUT,
    Outcome.INFRA,
]


@dataclass
class JUnitSummary:
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    failed_cases: list[str] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.errors - self.skipped

    def merge(self, other: JUnitSummary) -> JUnitSummary:
        return JUnitSummary(
            self.tests + other.tests,
            self.failures + other.failures,
            self.errors + other.errors,
            self.skipped + other.skipped,
            self.failed_cases + other.failed_cases,
        )


def parse_junit(path: Path) -> JUnitSummary:
    """Count cases from <testcase> elements (pytest's totals omit nothing, but other writers differ)."""
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise InputError("no JUnit XML was written", where=str(path)) from None
    except ET.ParseError as exc:
        line, col = exc.position
        reason = str(exc).split(":")[0]
        raise InputError(f"malformed JUnit XML: {reason}", where=f"{path}:{line}:{col + 1}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise InputError(f"not JUnit XML: root element is <{root.tag}>", where=str(path))
    summary = JUnitSummary()
    for case in root.iter("testcase"):
        summary.tests += 1
        name = f"{case.get('classname', '')}::{case.get('name', '?')}".lstrip(":")
        if case.find("failure") is not None:
            summary.failures += 1
            summary.failed_cases.append(name)
        elif case.find("error") is not None:
            summary.errors += 1
            summary.failed_cases.append(name)
        elif case.find("skipped") is not None:
            summary.skipped += 1
    return summary


def merge_junit_files(paths: list[Path], out: Path) -> None:
    """One JUnit file holding every shard's <testsuite>; shards that wrote nothing are skipped."""
    from rocmci.files import write_atomic

    merged = ET.Element("testsuites")
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        merged.extend(suites)
    write_atomic(out, ET.tostring(merged, encoding="unicode") + "\n")


def signal_of(exit_code: int) -> int | None:
    """The signal that ended the process: -N from Python, 128+N from a shell or docker --init."""
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 128 + 65:
        return exit_code - 128
    return None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass
class Result:
    workload: str
    outcome: Outcome
    exit_code: int
    seconds: float
    detail: str
    junit: JUnitSummary | None = None
    workarounds: list[str] = field(default_factory=list)
    log: str | None = None

    def as_dict(self) -> dict:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data


def classify(
    exit_code: int,
    junit: JUnitSummary | None,
    *,
    timed_out: bool = False,
    infra_error: str | None = None,
    teardown_hint: str = "",
    oom_killed: bool = False,
) -> tuple[Outcome, str]:
    if timed_out:
        return Outcome.TIMED_OUT, "stopped at the timeout; the container was removed"
    if oom_killed:
        return Outcome.CRASHED, f"killed by the kernel's OOM killer (exit {exit_code}): raise the memory limit"
    if infra_error:
        return Outcome.INFRA, infra_error
    if exit_code in (125, 126, 127):
        return Outcome.INFRA, f"the workload could not be started (exit {exit_code})"
    sig = signal_of(exit_code)
    if sig is not None:
        name = signal_name(sig)
        if junit is not None and junit.tests and not junit.failures and not junit.errors:
            cause = f"{junit.passed} passed, then the process died by {name} at teardown"
            return Outcome.CRASHED_AT_TEARDOWN, f"{cause}{'; ' + teardown_hint if teardown_hint else ''}"
        cases = f"; failing: {', '.join(junit.failed_cases[:5])}" if junit and junit.failed_cases else ""
        return Outcome.CRASHED, f"died by {name} (exit {exit_code}){cases}"
    if exit_code == 5:
        return Outcome.NO_TESTS, "pytest collected no tests (exit 5): check -k and that DeepEP is installed"
    if exit_code == 0:
        if junit is not None and junit.tests == 0:
            return Outcome.NO_TESTS, "the JUnit report has no test cases"
        if junit is not None:
            return Outcome.PASSED, f"{junit.passed} passed, {junit.skipped} skipped"
        return Outcome.PASSED, "exit 0"
    if junit is not None and junit.failed_cases:
        shown = ", ".join(junit.failed_cases[:5])
        more = f" and {len(junit.failed_cases) - 5} more" if len(junit.failed_cases) > 5 else ""
        return Outcome.FAILED, f"{len(junit.failed_cases)} failed: {shown}{more}"
    return Outcome.FAILED, f"exit {exit_code}"


def worst(outcomes: list[Outcome]) -> Outcome:
    return max(outcomes, key=SEVERITY.index) if outcomes else Outcome.NO_TESTS


def render_table(results: list[Result]) -> str:
    from rocmci.report import table

    rows = []
    for r in results:
        counts = f"{r.junit.passed}/{r.junit.tests}" if r.junit else "-"
        rows.append((r.workload, r.outcome.value, f"{r.seconds:.0f}s", counts, r.detail))
    return table(("workload", "outcome", "time", "passed", "detail"), rows)


def render_json(results: list[Result]) -> str:
    return json.dumps({"results": [r.as_dict() for r in results]}, indent=2)


def render_annotation(results: list[Result]) -> str:
    """Markdown for `buildkite-agent annotate`."""
    icon = {Outcome.PASSED: ":white_check_mark:"}
    lines = ["### rocmci workloads", "", "| workload | outcome | time | detail |", "|---|---|---|---|"]
    for r in results:
        mark = icon.get(r.outcome, ":x:")
        detail = r.detail.replace("|", "\\|")
        lines.append(f"| {r.workload} | {mark} {r.outcome.value} | {r.seconds:.0f}s | {detail} |")
    return "\n".join(lines) + "\n"
