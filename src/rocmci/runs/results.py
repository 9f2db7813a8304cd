"""JUnit XML + exit status -> one outcome. A crash after every case passed is named as such.

Reports go to the terminal, to files in the results folder, and under Buildkite to the build page
(`buildkite-agent annotate`, `buildkite-agent artifact upload`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from rocmci.errors import InputError, RocmciError


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
    Outcome.NO_TESTS: 10,  # 0 unless --strict: vLLM's runner treats pytest's exit 5 as success
    Outcome.CRASHED_AT_TEARDOWN: 11,
    Outcome.CRASHED: 12,
    Outcome.TIMED_OUT: 13,
    Outcome.INFRA: 14,
}
PYTEST_NO_TESTS = 5  # pytest's exit status when it collected nothing; vLLM's runner passes it
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


def parse_junit(path: Path, *, what: str | None = None) -> JUnitSummary:
    """Count cases from <testcase> elements (pytest's totals omit nothing, but other writers differ).

    Read through files.read_bytes: a FIFO, a directory or /dev/zero given as the file is one line, not a hang.
    `what` names the flag the path came from; without it a missing file means the run wrote none.
    """
    from rocmci.files import read_bytes

    if what is None and not os.path.lexists(path):
        raise InputError("no JUnit XML was written", where=str(path))
    data = read_bytes(path, what=what)
    try:
        root = ET.fromstring(data)
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


def redact_junit(data: bytes, redact: Callable[[str], str]) -> bytes:
    """The JUnit XML with every text and attribute value passed through `redact`; tags and names kept.

    Redacted after parsing, not as raw text: a secret holding & < or " is escaped in the file and would
    slip past a text search, and a masked value that happened to equal a tag name would break the markup.
    Raises ET.ParseError for malformed XML.
    """
    root = ET.fromstring(data)
    for element in root.iter():
        if element.text:
            element.text = redact(element.text)
        if element.tail:
            element.tail = redact(element.tail)
        for name, value in element.attrib.items():
            element.set(name, redact(value))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def redact_junit_file(path: Path, redact: Callable[[str], str]) -> None:
    """Replace a workload's JUnit XML by its redacted copy: that is the file kept in results/ and uploaded.

    A report that is not XML cannot be redacted safely (its escaping is unknown), so it is removed: it is
    no record anyway, and the run's outcome already names it as malformed. So is one whose redacted copy
    cannot be written (a full disk): an unredacted report is never left behind.
    """
    from rocmci.files import read_bytes, write_atomic
    from rocmci.runs.types import RESULTS_WHAT

    if not path.is_file():
        return
    try:
        clean = redact_junit(read_bytes(path, what=RESULTS_WHAT), redact)
        # Gone before the copy is written: write_atomic refuses to overwrite a file this process has read
        # (parse_junit did), and an interrupted write then leaves no report rather than the raw one.
        path.unlink()
        write_atomic(path, clean, what=RESULTS_WHAT)
    except (ET.ParseError, RocmciError, OSError):  # malformed, or no room for the copy: the original goes
        path.unlink(missing_ok=True)


def merge_junit_files(paths: list[Path], out: Path) -> None:
    """One JUnit file holding every shard's <testsuite>; shards that wrote nothing are skipped."""
    from rocmci.files import write_atomic
    from rocmci.runs.types import RESULTS_WHAT

    merged = ET.Element("testsuites")
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        merged.extend(suites)
    write_atomic(out, ET.tostring(merged, encoding="unicode") + "\n", what=RESULTS_WHAT)


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
    attempts: int = 1  # 2 when exit 134 (GPU hang) was retried, as vLLM's pipeline does

    def as_dict(self) -> dict:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data

    def redacted(self, redact: Callable[[str], str]) -> Result:
        """The same result with every text a person or a file will see passed through `redact`."""
        junit = None
        if self.junit is not None:
            junit = replace(self.junit, failed_cases=[redact(c) for c in self.junit.failed_cases])
        return replace(
            self,
            workload=redact(self.workload),
            detail=redact(self.detail),
            junit=junit,
            log=None if self.log is None else redact(self.log),
        )


def classify(
    exit_code: int,
    junit: JUnitSummary | None,
    *,
    timed_out: bool = False,
    infra_error: str | None = None,
    teardown_hint: str = "",
    oom_killed: bool = False,
    in_container: bool = True,
    junit_expected: bool = False,
) -> tuple[Outcome, str]:
    """One outcome for an exit status and its JUnit report; a pass needs proof that something ran.

    `junit_expected`: the workload was told to write JUnit XML (pytest). Then exit 0 without a report
    is a failure (nothing says any test ran: `--version`, a report written elsewhere), and failed cases
    in the report fail the run whatever the exit status says.
    """
    if timed_out:
        stopped = "the container was removed" if in_container else "its process group was killed"
        return Outcome.TIMED_OUT, f"stopped at the timeout; {stopped}"
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
    if exit_code == PYTEST_NO_TESTS:
        why = f"pytest collected no tests (exit {PYTEST_NO_TESTS})"
        return Outcome.NO_TESTS, f"{why}: check -k and that DeepEP is installed"
    if exit_code == 0:
        if junit is not None and junit.failed_cases:
            return Outcome.FAILED, f"exit 0, but the JUnit report has {_failed_text(junit)}"
        if junit is not None and junit.tests == 0:
            return Outcome.NO_TESTS, "the JUnit report has no test cases"
        if junit is not None:
            return Outcome.PASSED, f"{junit.passed} passed, {junit.skipped} skipped"
        if junit_expected:
            return Outcome.FAILED, "exit 0, but no JUnit XML was written: nothing shows that any test ran"
        return Outcome.PASSED, "exit 0"
    if junit is not None and junit.failed_cases:
        return Outcome.FAILED, _failed_text(junit)
    return Outcome.FAILED, f"exit {exit_code}"


def _failed_text(junit: JUnitSummary) -> str:
    shown = ", ".join(junit.failed_cases[:5])
    more = f" and {len(junit.failed_cases) - 5} more" if len(junit.failed_cases) > 5 else ""
    return f"{len(junit.failed_cases)} failed: {shown}{more}"


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


def exit_code(results: list[Result], *, strict: bool = False) -> int:
    """The exit code of a run: its worst outcome's; no tests collected passes as in vLLM's runner unless strict."""
    if not results:  # nothing ran at all: never a pass
        return EXIT_CODES[Outcome.INFRA]
    outcome = worst([r.outcome for r in results])
    if outcome is Outcome.NO_TESTS and not strict:
        return 0
    return EXIT_CODES[outcome]


# Buildkite annotation styles: https://buildkite.com/docs/agent/v3/cli-annotate (success, info, warning, error).
STYLE = {
    Outcome.PASSED: "success",
    Outcome.NO_TESTS: "warning",
    Outcome.CRASHED_AT_TEARDOWN: "warning",
    Outcome.FAILED: "error",
    Outcome.CRASHED: "error",
    Outcome.TIMED_OUT: "error",
    Outcome.INFRA: "error",
}
ICON = {
    Outcome.PASSED: ":white_check_mark:",
    Outcome.NO_TESTS: ":grey_question:",
    Outcome.CRASHED_AT_TEARDOWN: ":warning:",
}
TEARDOWN_EXPLANATION = (
    "**Crashed at teardown**: every test case passed, then the process died by a signal while exiting. "
    "That is the signature of the ROCm runtime's teardown crash (a use-after-free in the HSA runtime while "
    "rocprofiler-sdk is attached), not of a failing test. Its fix is ROCm/rocm-systems#6942; see "
    "`rocmci workarounds` for whether the workaround applies to this image."
)
# Bounded as GitHub bounds them (owner 39 characters, repository 100): unbounded, the owner restarted after
# every '-' of 'a-a-a...' and scanned to its end (quadratic: a 10^5-character test id did not finish in 10 s).
_REF = re.compile(r"\b([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})#([0-9]{1,9})\b")


def ref_url(ref: str) -> str | None:
    """owner/repo#N -> its GitHub page (GitHub sends /issues/N on to the pull request when N is one)."""
    m = _REF.fullmatch(ref)
    return f"https://github.com/{m.group(1)}/{m.group(2)}/issues/{m.group(3)}" if m else None


def link_refs(text: str) -> str:
    """Every owner/repo#N in the text as a Markdown link."""
    return _REF.sub(lambda m: f"[{m.group(0)}]({ref_url(m.group(0))})", text)


def annotation_style(results: list[Result]) -> str:
    return STYLE[worst([r.outcome for r in results])]


def _cell(text: str) -> str:
    """Outside text (test ids, details, notes) for the annotation: escaped by rocmci.markup (no HTML, links, code
    spans or cell breaks of its own), then each owner/repo#N made a link (escaping leaves those characters be)."""
    from rocmci import markup

    return link_refs(markup.inline(text))


def render_annotation(results: list[Result], notes: list[str] = ()) -> str:
    """Markdown for `buildkite-agent annotate`: one row per workload (shards already merged), notes once."""
    lines = ["### rocmci workloads", "", "| workload | outcome | time | passed | detail |", "|---|---|---|---|---|"]
    for r in results:
        mark = ICON.get(r.outcome, ":x:")
        counts = f"{r.junit.passed}/{r.junit.tests}" if r.junit else "-"
        detail = r.detail + (f" (after a SIGABRT retry: {r.attempts} attempts)" if r.attempts > 1 else "")
        row = f"| {_cell(r.workload)} | {mark} {r.outcome.value} | {r.seconds:.0f}s | {counts} | {_cell(detail)} |"
        lines.append(row)
    if any(r.outcome is Outcome.CRASHED_AT_TEARDOWN for r in results):
        lines += ["", link_refs(TEARDOWN_EXPLANATION)]
    if notes:
        lines += ["", *(f"- {_cell(n)}" for n in notes)]
    return "\n".join(lines) + "\n"


_CONTEXT = re.compile(r"[^A-Za-z0-9_.-]+")


def under_buildkite(env: dict[str, str] | None = None) -> str | None:
    """The buildkite-agent binary when running in a Buildkite job, else None."""
    env = os.environ if env is None else env
    if env.get("BUILDKITE") != "true":
        return None
    return shutil.which("buildkite-agent", path=env.get("PATH"))


def annotation_context(kinds: list[str], env: dict[str, str] | None = None) -> str:
    """One annotation per job and workload kind: parallel jobs of one step must not overwrite each other."""
    env = os.environ if env is None else env
    job = env.get("BUILDKITE_PARALLEL_JOB")
    text = "rocmci-" + "-".join(dict.fromkeys(kinds)) + (f"-{job}" if job else "")
    return _CONTEXT.sub("_", text)[:100]


def buildkite_commands(agent: str, context: str, style: str, files: list[str]) -> list[list[str]]:
    """The agent calls that put a run on the build page: the annotation (markdown on stdin), then the files."""
    calls = [[agent, "annotate", "--context", context, "--style", style]]
    calls += [[agent, "artifact", "upload", name] for name in files]
    return calls


def post_to_buildkite(
    agent: str, results: list[Result], notes: list[str], results_dir: Path, files: list[Path]
) -> list[str]:
    """Annotate the build and upload files (paths relative to results_dir); returns problems, never raises."""
    markdown = render_annotation(results, notes)
    kinds = [r.workload.split(" ")[0] for r in results]
    names = [str(f.relative_to(results_dir)) for f in files]
    problems = []
    for argv in buildkite_commands(agent, annotation_context(kinds), annotation_style(results), names):
        try:
            done = subprocess.run(
                argv,
                input=markdown if argv[1] == "annotate" else None,
                cwd=results_dir,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"`buildkite-agent {argv[1]}` failed: {exc}")
            continue
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            problems.append(f"`buildkite-agent {' '.join(argv[1:3])}` exited {done.returncode}: {last}")
    return problems
