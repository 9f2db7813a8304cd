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
    on_screen = {w.strip("():,;") for w in " ".join(plain).split()}  # a word in brackets is still whole
    broken = [w for w in words if len(w) < term.width - 20 and w.strip("():,;") not in on_screen]
    assert broken == [], f"words broken across lines at {term.width} columns"


def invoke_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]


def _json(*args: str):
    done = run_invoke(*args, "--json")
    return json.loads(done.stdout)


def rocmci_argv(*args: str) -> list[str]:
    """The installed command's entry point, run by this interpreter."""
    return [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()",
            *args]  # fmt: skip


def test_settings(term):
    screen, joined = term.run(*invoke_argv("settings"))
    data = _json("settings")
    shown = {"False": "false", "True": "true", "None": "(not set)", "": "(not set)"}  # the JSON keeps str(value)
    words = [w for name, row in data.items()
             for w in (name, *shown.get(row["value"], row["value"]).split(), *row["source"].split())]  # fmt: skip
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen), "no colour in a terminal"
    plain = _lines(screen)
    if term.width == 80:  # a setting per line (two where its source is long), not a folded source row each
        assert len(plain) <= len(data) * 2
        assert not any(line.split() == ["source", "default"] for line in plain)
    assert "None" not in " ".join(plain).split()  # None and '' are both shown as "(not set)"


def test_doctor(term):
    screen, joined = term.run(*invoke_argv("doctor"))
    checks = _json("doctor")
    words = [w for c in checks for w in (*c["name"].split(), *c["detail"].split())]
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen)
    text = " ".join(" ".join(_lines(screen)).split())
    for c in checks:  # each row: its name and status, as the JSON says
        assert f"{c['name']} {'ok' if c['ok'] else 'no'}" in text, (c, text)
    engine = next(c for c in checks if c["name"] == "docker engine")
    if engine["ok"]:  # the version the engine itself reports, not a stale or guessed one
        server = subprocess.run(
            ["/usr/bin/docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True
        ).stdout.strip()
        assert server and f"server {server}" in engine["detail"] and f"server {server}" in text
    else:
        assert "image builds: ready" not in text
    assert "pipeline tasks: ready" in text  # they need neither a GPU nor an engine


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


# --- every output through the same renderer: image.check, workarounds, error lines, build progress --------


@pytest.fixture(scope="module")
def vllm_checkout(tmp_path_factory, vllm_fixtures: Path) -> Path:
    """vLLM's real Dockerfile.rocm (its DeepEP arch finding has the longest message and a fix)."""
    root = tmp_path_factory.mktemp("vllm")
    shutil.copytree(vllm_fixtures / "docker", root / "docker")
    shutil.copytree(REPO / "tests" / "data" / "standin" / "vllm-workspace" / "tests", root / "tests")
    (root / "setup.py").write_text("")
    return root


def test_image_check(term, vllm_checkout: Path):
    args = ("image.check", "--vllm-src", str(vllm_checkout), "--arch", "gfx942")  # a list the file cannot build
    screen, joined = term.run(*rocmci_argv(*args))
    findings = json.loads(subprocess.run(rocmci_argv(*args, "--json"), capture_output=True, text=True, cwd=REPO,
                                         check=False).stdout)["findings"]  # fmt: skip
    assert findings
    words = _finding_words(findings) + [w for f in findings for w in f["fix"].split()]
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen)
    assert _lines(screen)[0] == "docker/Dockerfile.rocm"  # grouped under the file, as pipeline.validate's


def test_workarounds(term, vllm_checkout: Path):
    args = ("workarounds", "--vllm-src", str(vllm_checkout))
    screen, joined = term.run(*rocmci_argv(*args))
    checks = json.loads(subprocess.run(rocmci_argv(*args, "--json"), capture_output=True, text=True, cwd=REPO,
                                       check=False).stdout)  # fmt: skip
    words = [w for c in (checks if isinstance(checks, list) else checks["workarounds"])
             for w in (c["id"], *(w for e in c["evidence"] for w in e.split()))]  # fmt: skip
    assert words
    assert_fits(term, screen, joined, words)
    assert ANSI.search(screen)


def test_error_line(term, tmp_path: Path):
    """A long `rocmci:` line (no vLLM checkout here) wraps between words, under its own text, in red."""
    argv = rocmci_argv("image.build", "--dry-run")
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert piped.returncode == 2 and len(piped.stderr.strip()) > 200 and not ANSI.search(piped.stderr)
    t = term
    t._tmux("respawn-pane", "-k", "-t", "t", "-c", str(tmp_path), *argv)
    deadline = time.monotonic() + 120
    while t._tmux("display-message", "-p", "-t", "t", "#{pane_dead}").strip() != "1":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    screen = t._tmux("capture-pane", "-p", "-e", "-S", "-", "-t", "t")
    joined = t._tmux("capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "t")
    assert_fits(term, screen, joined, piped.stderr.split())
    assert re.search(r"\x1b\[31mrocmci:", screen)  # the prefix in red
    assert " ".join(" ".join(_lines(screen)).split()) == " ".join(piped.stderr.split())


PROGRESS = """
import time
from rocmci.image.build import Progress, ProgressParser
parser, progress = ProgressParser(), Progress(True)
for n in range(6):
    line = f"#{n + 7} [build_deepep {n + 1}/6] RUN cd /app/deepep && python3 setup.py --variant rocm " + "--x " * 40
    parser.feed(line)
    progress(line, parser)
    time.sleep(0.05)
progress.close()
print("built")
"""


def test_build_progress_line(term):
    """image.build's updating line on a terminal: never wider than the terminal minus one, so each \\r
    redraws the whole line and no stale half-lines are left behind."""
    screen, joined = term.run(sys.executable, "-c", PROGRESS)
    plain = _lines(screen)
    assert plain == _lines(joined), "the progress line wrapped"
    assert len(plain) == 2 and plain[1] == "built", plain
    assert plain[0].startswith("[    ") and "[build_deepep 6/6] RUN" in plain[0]
    assert len(plain[0]) <= term.width - 1
