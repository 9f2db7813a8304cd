"""The `rocmci` command itself, and what its run tasks print: promises a hand-made mutation once slipped past
(issue 24). README "Mutation testing" maps each mutation to the test here that now turns red.

Every test runs the installed console script (`rocmci`, pyproject [project.scripts]) as a user would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

TOKEN = "hf_Zq8canaryTokenValue0123456789abcd"  # HF_TOKEN's shape: known secret, redacted wherever it appears
PASSWORD = "pw-canary-7f3a9c2e"  # an --env value given under a secret name
PLAIN = "plain-canary-51d0"  # an --env value under an ordinary name: shown only with --public
TASKS = (
    "doctor", "image.build", "image.check", "image.inspect", "image.retarget", "pipeline.diff", "pipeline.generate",
    "pipeline.plan", "pipeline.validate", "run.bisect", "run.dp-example", "run.moe-tests", "run.outcome", "run.step",
    "settings",
    "version", "workarounds",
)  # fmt: skip


def rocmci(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    exe = shutil.which("rocmci")
    if exe is None:
        pytest.fail("the rocmci console script is not installed (pip install -e .)", pytrace=False)
    full = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_") and k != "HF_TOKEN"}
    full.update(env or {})
    return subprocess.run([exe, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=120)


def test_every_task_is_listed():
    listed = [line.split()[0] for line in rocmci("--list").stdout.splitlines() if line.strip()]
    assert sorted(listed) == sorted(TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_an_unknown_flag_is_exit_2_with_one_line(task):
    done = rocmci(task, "--bogus")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()  # one line, no traceback
    assert line.startswith(f"rocmci: unknown flag --bogus for rocmci {task}"), done.stderr


# --- run.outcome and --dry-run print no secret ---------------------------------------------------------------

JUNIT = f"""<testsuite name="pytest" tests="2" failures="1" errors="0" skipped="0">
<testcase classname="t" name="test_x[{TOKEN}]"><failure message="boom {TOKEN}">x</failure></testcase>
<testcase classname="t" name="test_ok"/></testsuite>
"""


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_run_outcome_redacts_a_secret_in_a_failing_case(tmp_path, as_json):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    done = rocmci(
        "run.outcome", "--junit", str(junit), "--exit-code", "1", *(("--json",) if as_json else ()),
        env={"HF_TOKEN": TOKEN},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    assert "test_x[***]" in done.stdout


@pytest.fixture
def gpu_host(tmp_path) -> Path:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kfd").write_text("")
    return tmp_path


@pytest.mark.parametrize("task", ["run.moe-tests", "run.dp-example"])
@pytest.mark.parametrize("mode", ["container", "host"])
def test_dry_run_prints_no_secret(gpu_host, task, mode):
    given = ("-k", TOKEN) if task == "run.moe-tests" else ("--model", TOKEN)
    done = rocmci(
        task, "--dry-run", "--host-root", str(gpu_host), "--skip-preflight", *given,
        "--env", f"DB_PASSWORD={PASSWORD}", "--env", f"MY_VALUE={PLAIN}",
        *(("--no-container",) if mode == "host" else ()),
        env={"HF_TOKEN": TOKEN},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert [s for s in (TOKEN, PASSWORD, PLAIN) if s in out] == []
    if mode == "container":  # by name: docker takes the value from its own environment
        assert "--env MY_VALUE " in out and "MY_VALUE=" not in out
    else:  # the workload's environment, shown with its value hidden
        assert "'MY_VALUE=***'" in out or "MY_VALUE=***" in out
    assert "***" in done.stdout


def test_dry_run_shows_a_value_made_public(gpu_host):
    done = rocmci(
        "run.moe-tests", "--dry-run", "--host-root", str(gpu_host), "--skip-preflight",
        "--env", f"MY_VALUE={PLAIN}", "--public", "MY_VALUE",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"MY_VALUE={PLAIN}" in done.stdout  # the redactor hides what it must, not everything
