"""`pipeline.plan --label`, Buildkite's PR label variable and `--only`, against ci-infra's real bootstrap-amd.sh.

bootstrap-amd.sh is run with its external commands stubbed (the harness of tests/unit/test_guards_pipeline.py:
its curl stub answers the GitHub API call with the labels); `rocmci pipeline.plan --json` must hand the
template the same inputs, fail_fast included, for the same changed files and labels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.unit.test_guards_pipeline import BOOTSTRAP, run_bootstrap, stub_bin  # noqa: F401 (a fixture)

ROCMCI = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]
VLLM_STEPS = REPO.parent / "shared" / "fixtures" / "vllm" / "test-amd.yaml"
CHANGED = ("vllm/distributed/utils.py",)
pytestmark = [
    pytest.mark.skipif(not BOOTSTRAP.is_file(), reason=f"ci-infra's bootstrap-amd.sh not found at {BOOTSTRAP}"),
    pytest.mark.skipif(shutil.which("bash") is None, reason="bash is needed to run bootstrap-amd.sh"),
]
LABEL_SETS = {
    "run-all": ("ready-run-all-tests",),
    "no-fail-fast": ("ci-no-fail-fast",),
    "both": ("documentation", "ci-no-fail-fast", "ready-run-all-tests"),
    "other": ("documentation", "rocm"),
    # bootstrap-amd.sh tests `[[ $PR_LABELS == *"ready-run-all-tests"* ]]`: a label holding the name counts.
    "containing": ("not-ready-run-all-tests-yet",),
}


def plan(*args: str, env: dict[str, str] | None = None) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "BUILDKITE"))}
    done = subprocess.run([*ROCMCI, "pipeline.plan", "--json", *args], cwd=REPO, env=clean | (env or {}),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _changed_file(tmp_path: Path) -> Path:
    path = tmp_path / "changed.txt"
    path.write_text("".join(f"{p}\n" for p in CHANGED))
    return path


def _comparable(inputs: dict[str, str]) -> dict[str, str]:
    # The merge base is git's answer (a stub's in bootstrap's run, none with --changed-files): not a label rule.
    return {k: v for k, v in inputs.items() if k != "vllm_merge_base_commit"}


@pytest.mark.parametrize("name", sorted(LABEL_SETS))
def test_label_flags_give_bootstrap_amd_shs_inputs(stub_bin, tmp_path, name):  # noqa: F811
    labels = LABEL_SETS[name]
    env = {"BUILDKITE_PULL_REQUEST": "4242", "STUB_LABELS": "\n".join(labels)}
    theirs, log = run_bootstrap(stub_bin, tmp_path / "bootstrap", CHANGED, env)
    assert theirs is not None, log
    flags = [a for label in labels for a in ("--label", label)]
    ours = plan("--source", str(VLLM_STEPS), "--changed-files", str(_changed_file(tmp_path)),
                "--branch", "feature/x", *flags)  # fmt: skip
    assert _comparable(ours["inputs"]) == _comparable(theirs)


def test_buildkites_label_variable_is_read_on_a_pr_build(stub_bin, tmp_path):  # noqa: F811
    labels = LABEL_SETS["both"]
    theirs, _ = run_bootstrap(stub_bin, tmp_path / "bootstrap", CHANGED,
                              {"BUILDKITE_PULL_REQUEST": "4242", "STUB_LABELS": "\n".join(labels)})  # fmt: skip
    args = ("--source", str(VLLM_STEPS), "--changed-files", str(_changed_file(tmp_path)), "--branch", "feature/x")
    ours = plan(*args, env={"BUILDKITE_PULL_REQUEST": "4242", "BUILDKITE_PULL_REQUEST_LABELS": ",".join(labels)})
    assert _comparable(ours["inputs"]) == _comparable(theirs)
    # Not a PR build: bootstrap-amd.sh asks for no labels, whatever the variable holds.
    theirs, _ = run_bootstrap(stub_bin, tmp_path / "not-a-pr", CHANGED,
                              {"BUILDKITE_PULL_REQUEST": "false", "STUB_LABELS": "\n".join(labels)})  # fmt: skip
    ours = plan(*args, env={"BUILDKITE_PULL_REQUEST": "false", "BUILDKITE_PULL_REQUEST_LABELS": ",".join(labels)})
    assert _comparable(ours["inputs"]) == _comparable(theirs)
    assert ours["inputs"]["run_all"] == "0"


def test_only_run_with_the_run_all_label_lists_every_step_on_the_mirror(vllm_fixtures: Path):
    everything = plan("--source", str(VLLM_STEPS), "--label", "ready-run-all-tests")
    on_mirror = [s for s in everything["steps"] if s["action"] != "skip"]
    assert everything["inputs"]["run_all"] == everything["inputs"]["nightly"] == "1"
    only_run = plan("--source", str(VLLM_STEPS), "--label", "ready-run-all-tests", "--only", "run")
    assert only_run["steps"] == [s for s in everything["steps"] if s["action"] == "run"]
    assert len(only_run["steps"]) == len(on_mirror) == everything["counts"]["run"] > 100
    assert only_run["summary"].startswith(f"{len(on_mirror)} of {len(everything['steps'])} steps run")
    assert plan("--source", str(VLLM_STEPS), "--label", "ready-run-all-tests", "--only", "blocked")["steps"] == []


def test_only_run_without_labels_lists_what_the_changed_file_selects(tmp_path):
    changed = _changed_file(tmp_path)
    result = plan("--source", str(VLLM_STEPS), "--changed-files", str(changed), "--only", "run")
    assert result["steps"] and all(s["action"] == "run" for s in result["steps"])
    assert any("vllm/distributed/utils.py matches" in s["reason"] for s in result["steps"])
    assert result["inputs"]["run_all"] == "0" and result["inputs"]["fail_fast"] == "false"  # not a PR build


def test_the_summary_comes_first_and_names_a_change_that_selects_nothing(tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("docs/serving/amd.md\nREADME.md\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "BUILDKITE"))}
    done = subprocess.run([*ROCMCI, "pipeline.plan", "--source", str(VLLM_STEPS), "--changed-files", str(docs)],
                          cwd=REPO, env=clean, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "no pipeline: only docs/**, *.md or mkdocs.yaml changed (2 changed files); bootstrap-amd.sh stops before "
        "the upload"
    )
    assert "no changed files given" not in done.stdout and "changed files (2): docs/serving/amd.md" in done.stdout
    unmatched = tmp_path / "unmatched.txt"
    unmatched.write_text("tools/a_tool_no_step_depends_on.sh\n")
    result = plan("--source", str(VLLM_STEPS), "--changed-files", str(unmatched))
    assert result["summary"].endswith(": no step's source_file_dependencies match the 1 changed file")
    assert result["counts"]["run"] == sum(s["action"] == "run" for s in result["steps"])
