"""`--diff-base` on a shallow clone: deepened and fetched as bootstrap-amd.sh does, with real git repositories.

A CI agent's clone is shallow (one commit of the PR branch) and has no origin/main; bootstrap-amd.sh
deepens it by 50 commits and fetches origin/main before it asks for the merge base. pipeline.plan must
find the same changed files there, not ask the user to fetch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

ROCMCI = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]
STEPS = REPO / "tests" / "data" / "pipeline" / "source" / "valid" / "deepep.yaml"


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd.parent)}
    config = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    done = subprocess.run(["git", *config, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                          check=True)  # fmt: skip
    return done.stdout.strip()


def shallow_pr_clone(tmp_path: Path) -> Path:
    """origin: main A-B-C, a PR branch from B with one commit; the agent's clone: that commit only."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git("init", "-q", cwd=origin)
    for name in ("a", "b"):
        (origin / f"{name}.txt").write_text(name)
        git("add", ".", cwd=origin)
        git("commit", "-q", "-m", name, cwd=origin)
    git("checkout", "-q", "-b", "pr", cwd=origin)
    (origin / "vllm").mkdir()
    (origin / "vllm" / "changed_by_pr.py").write_text("x = 1\n")
    git("add", ".", cwd=origin)
    git("commit", "-q", "-m", "pr", cwd=origin)
    git("checkout", "-q", "main", cwd=origin)
    (origin / "c.txt").write_text("c")
    git("add", ".", cwd=origin)
    git("commit", "-q", "-m", "c", cwd=origin)
    clone = tmp_path / "clone"
    git("clone", "-q", "--depth", "1", "--branch", "pr", f"file://{origin}", str(clone), cwd=tmp_path)
    assert git("rev-parse", "--is-shallow-repository", cwd=clone) == "true"
    return clone


def test_diff_base_deepens_a_shallow_clone_and_fetches_origin_main(tmp_path: Path):
    clone = shallow_pr_clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "BUILDKITE", "GIT_"))}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([*ROCMCI, "pipeline.plan", "--json", "--source", str(STEPS), "--diff-base", "origin/main"],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["inputs"]["run_all"] == "0", result["bootstrap"]
    assert result["inputs"]["list_file_diff"] == "vllm/changed_by_pr.py"
    assert git("rev-parse", "--is-shallow-repository", cwd=clone) == "false"  # deepened past the fork point


def test_no_merge_base_at_all_runs_everything_as_bootstrap_does(tmp_path: Path):
    """Two unrelated histories: bootstrap-amd.sh falls back to run_all=1; so does the plan, and says why."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "a.txt").write_text("a")
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "a", cwd=repo)
    git("checkout", "-q", "--orphan", "other", cwd=repo)
    git("commit", "-q", "--allow-empty", "-m", "unrelated", cwd=repo)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "BUILDKITE", "GIT_"))}
    done = subprocess.run([*ROCMCI, "pipeline.plan", "--json", "--source", str(STEPS), "--diff-base", "main"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["inputs"]["run_all"] == "1"
    assert any("could not be computed (no merge base of main and HEAD" in line for line in result["bootstrap"])
