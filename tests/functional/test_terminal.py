"""Output in a real terminal (tmux) at 80 and 200 columns: nothing wraps mid-word; colour only on a TTY.

The check: the terminal never wraps a line by itself (the screen joined at the terminal's own wraps is
the screen), and every word of what the command reports (taken from its --json twin) is whole on it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, run_invoke

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
INVALID = REPO / "tests" / "data" / "pipeline" / "source" / "invalid"
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt package: tmux)")


class Tmux:
    """One private tmux server (its own socket), one pane of a fixed size, removed afterwards."""

    def __init__(self, width: int) -> None:
        self.socket = f"rocmci-test-{uuid.uuid4().hex[:12]}"
        self.width = width
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_") and k not in ("CI", "NO_COLOR")}
        env.pop("TMUX", None)
        self.env = env
        self._tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", "50", "sleep", "600")
        self._tmux("set-option", "-t", "t", "remain-on-exit", "on")
        self._tmux("set-option", "-t", "t", "history-limit", "5000")

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def run(self, *argv: str, env: dict[str, str] | None = None) -> tuple[str, str]:
        """Run argv in the pane; return (screen as the terminal shows it, the same joined at terminal wraps)."""
        extra = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        self._tmux("respawn-pane", "-k", "-t", "t", "-c", str(REPO), *extra, *argv)
        deadline = time.monotonic() + 120
        while self._tmux("display-message", "-p", "-t", "t", "#{pane_dead}").strip() != "1":
            assert time.monotonic() < deadline, "the command did not finish in the terminal"
            time.sleep(0.1)
        screen = self._tmux("capture-pane", "-p", "-e", "-S", "-", "-t", "t")
        joined = self._tmux("capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "t")
        self._tmux("clear-history", "-t", "t")
        return screen, joined

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30, check=False)


@pytest.fixture(params=[80, 200], ids=["80cols", "200cols"])
def term(request):
    t = Tmux(request.param)
    yield t
    t.close()


def _lines(text: str) -> list[str]:
    plain = (ANSI.sub("", line).rstrip() for line in text.splitlines())
    return [line for line in plain if line and not line.startswith("Pane is dead")]  # tmux's own last line


def assert_fits(term: Tmux, screen: str, joined: str, words: list[str]) -> None:
    plain = _lines(screen)
    assert plain == _lines(joined), "the terminal wrapped a line: the output is wider than the terminal"
    assert max(len(line) for line in plain) <= term.width
    on_screen = set(" ".join(plain).split())
    broken = [w for w in words if len(w) < term.width - 20 and w not in on_screen]
    assert broken == [], f"words broken across lines at {term.width} columns"


def invoke_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]


def _json(*args: str):
    done = run_invoke(*args, "--json")
    return json.loads(done.stdout)


def test_settings(term):
    screen, joined = term.run(*invoke_argv("settings"))
    data = _json("settings")
    words = [w for name, row in data.items() for w in (name, *str(row["value"]).split(), *row["source"].split())]
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen), "no colour in a terminal"


def test_doctor(term):
    screen, joined = term.run(*invoke_argv("doctor"))
    checks = _json("doctor")
    words = [w for c in checks for w in (*c["name"].split(), *c["detail"].split())]
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen)
    text = " ".join(" ".join(_lines(screen)).split())
    for c in checks:
        if c["name"] == "docker engine" and not c["ok"]:
            assert "image builds: ready" not in text


def _finding_words(findings: list[dict]) -> list[str]:
    return [w for f in findings for w in (*f["message"].split(), f["rule"])]


def test_rocmci_validate_finding(term):
    source = INVALID / "deepep-wrong-arch.yaml"
    argv = [sys.executable, "-m", "rocmci.hook", "--arch", "gfx942;gfx950"]
    screen, joined = term.run(*argv, str(source))
    data = json.loads(
        subprocess.run([*argv, "--json", str(source)], capture_output=True, text=True, check=False, cwd=REPO).stdout
    )
    assert_fits(term, screen, joined, _finding_words(data["files"][0]["findings"]))
    plain = _lines(screen)
    name = data["files"][0]["file"]
    assert plain[0] == name  # the heading
    assert sum(name in line for line in plain) == 2  # and the summary; no finding repeats it
    assert ANSI.search(screen)


def test_pipeline_validate_finding(term):
    source = INVALID / "deepep-wrong-arch.yaml"
    screen, joined = term.run(*invoke_argv("pipeline.validate", "--source", str(source)))
    findings = _json("pipeline.validate", "--source", str(source))["findings"]
    assert findings
    assert_fits(term, screen, joined, _finding_words(findings))


def test_pipeline_plan(term):
    screen, joined = term.run(*invoke_argv("pipeline.plan"))
    data = _json("pipeline.plan")
    words = [w for line in data["bootstrap"] for w in line.split()]
    words += [w for step in data["steps"] for field in ("label", "reason") for w in str(step.get(field, "")).split()]
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen)


JUNIT_TWO_PASSED = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
failures="0" skipped="0" tests="2"><testcase classname="kernels.moe.test_deepep_moe" name="test_deep_ep_moe[a]"
time="1.0"/><testcase classname="kernels.moe.test_deepep_moe" name="test_deep_ep_moe[b]" time="1.0"/>
</testsuite></testsuites>"""


def test_run_summary(term, tmp_path: Path):
    """The run summary table, here of a teardown crash, whose detail is the longest cell a run prints."""
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT_TWO_PASSED)
    args = ("run.outcome", "--junit", str(junit), "--exit-code", "139")
    screen, joined = term.run(*invoke_argv(*args))
    results = _json(*args)["results"]
    words = [w for r in results for field in ("workload", "outcome", "detail") for w in str(r[field]).split()]
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen)


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}, {"CI": "true"}])
def test_no_colour_when_asked_or_in_ci(env):
    t = Tmux(80)
    try:
        screen, _ = t.run(*invoke_argv("doctor"), env=env)
    finally:
        t.close()
    assert "docker engine" in screen
    assert not ANSI.search(screen)


@pytest.mark.parametrize("args", [("settings",), ("doctor",)])
def test_no_colour_when_piped(args):
    done = run_invoke(*args)
    assert done.stdout and not ANSI.search(done.stdout)


def test_no_colour_from_the_hook_when_piped(tmp_path: Path):
    source = INVALID / "deepep-wrong-arch.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "rocmci.hook", "--arch", "gfx942;gfx950", str(source)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "error [deepep-arch]" in done.stdout and not ANSI.search(done.stdout)
