"""The pre-commit hook as vLLM's repository uses it: `rocmci-validate`, and `pre-commit try-repo` end to end."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "pipeline" / "source"
HOOKS = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
GIT_ENV = {
    "GIT_AUTHOR_NAME": "rocmci test",
    "GIT_AUTHOR_EMAIL": "test@rocmci.invalid",
    "GIT_COMMITTER_NAME": "rocmci test",
    "GIT_COMMITTER_EMAIL": "test@rocmci.invalid",
}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "GIT_", "PRE_COMMIT"))}
    return {**env, **GIT_ENV, **extra}


def hook(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocmci.hook", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def vllm_checkout(tmp_path: Path, vllm_fixtures: Path) -> Path:
    """A git repository laid out like vLLM's: setup.py, docker/Dockerfile.rocm, .buildkite/test-amd.yaml (real)."""
    root = tmp_path / "vllm"
    (root / "docker").mkdir(parents=True)
    (root / ".buildkite").mkdir()
    shutil.copyfile(vllm_fixtures / "docker" / "Dockerfile.rocm", root / "docker" / "Dockerfile.rocm")
    shutil.copyfile(vllm_fixtures / "test-amd.yaml", root / ".buildkite" / "test-amd.yaml")
    (root / "setup.py").write_text("from setuptools import setup\n\nsetup()\n", encoding="utf-8")
    _git(root, "init", "-q", ".")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "a vLLM-like tree")
    return root


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=_env(), check=True, capture_output=True, timeout=60)


def test_version_is_the_package_version(tmp_path):
    done = hook("--version", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip() == f"rocmci-validate {version('rocmci')}"


def test_hook_ids_and_readme_agree():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ids = [h["id"] for h in HOOKS]
    assert ids == ["rocmci-validate-test-amd"]
    for h in HOOKS:
        assert f"id: {h['id']}" in readme, f"README's pre-commit example does not use hook id {h['id']}"
        assert h["entry"] == "rocmci-validate"
        assert re.fullmatch(h["files"], ".buildkite/test-amd.yaml")


def test_in_a_vllm_checkout_the_arch_list_is_vllms(vllm_checkout):
    """No --arch: the arch list is the checkout's DEEPEP_ROCM_ARCH, so editing vLLM's Dockerfile changes the verdict."""
    step = vllm_checkout / ".buildkite" / "test-amd.yaml"
    shutil.copyfile(DATA / "invalid" / "deepep-wrong-arch.yaml", step)
    done = hook(".buildkite/test-amd.yaml", cwd=vllm_checkout)
    assert done.returncode == 1, done.stderr
    assert "built for gfx942;gfx950" in done.stdout
    dockerfile = vllm_checkout / "docker" / "Dockerfile.rocm"
    text = dockerfile.read_text(encoding="utf-8")
    assert 'ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"' in text
    dockerfile.write_text(text.replace('ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"', 'ARG DEEPEP_ROCM_ARCH="gfx942"'))
    done = hook(".buildkite/test-amd.yaml", cwd=vllm_checkout)
    assert "built for gfx942;" in done.stdout and "gfx942;gfx950" not in done.stdout


def test_several_files_each_summary_names_its_file(vllm_checkout):
    bad = vllm_checkout / "bad.yaml"
    shutil.copyfile(DATA / "invalid" / "unknown-key.yaml", bad)
    done = hook(".buildkite/test-amd.yaml", "bad.yaml", cwd=vllm_checkout)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"\.buildkite/test-amd\.yaml: 0 errors, 0 warnings in \d+ generated steps", lines[0])
    slip = "bad.yaml:4:3: error [source-schema] unknown step key 'agent_poll'; did you mean 'agent_pool'? "
    assert any(line.startswith(slip) and "it is never scheduled" in line for line in lines), lines
    assert re.fullmatch(r"bad\.yaml: 3 errors, 0 warnings in \d+ generated steps?", lines[-1])


def test_json_has_one_entry_per_file(vllm_checkout):
    shutil.copyfile(DATA / "invalid" / "unknown-key.yaml", vllm_checkout / "bad.yaml")
    done = hook("--json", ".buildkite/test-amd.yaml", "bad.yaml", "missing.yaml", cwd=vllm_checkout)
    assert done.returncode == 2  # the worst: an unreadable input
    data = json.loads(done.stdout)
    assert [f["file"] for f in data["files"]] == [".buildkite/test-amd.yaml", "bad.yaml", "missing.yaml"]
    clean, bad, missing = data["files"]
    assert (clean["errors"], clean["steps"] > 100) == (0, True)
    assert bad["errors"] == 3 and {f["rule"] for f in bad["findings"]} == {"source-schema", "unknown-queue"}
    assert missing["exit_code"] == 2 and "missing.yaml" in missing["error"]
    assert data["errors"] == 3
    assert done.stderr.count("\n") == 1 and "missing.yaml" in done.stderr


# ----------------------------------------------------------------------------------- pre-commit try-repo


def _hook_repo(tmp_path: Path) -> Path:
    """This repository as a commit would hold it.

    `pre-commit try-repo` of a checkout with uncommitted changes commits only tracked files (`git add -u`)
    into its shadow repository, so a new module would be left out and the result would depend on what
    happens to be committed. A clean checkout (CI's clone) is used as it is; otherwise a snapshot of
    the tracked and untracked, not ignored, files.
    """
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    if not dirty:
        return REPO
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    snapshot = tmp_path / "rocmci"
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if not src.is_symlink() and not src.exists():
            continue  # deleted in the working tree
        dst = snapshot / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)
    _git(snapshot, "init", "-q", ".")
    _git(snapshot, "add", "-A")
    _git(snapshot, "commit", "-q", "-m", "snapshot of the working tree")
    return snapshot


def try_repo(repo: Path, cwd: Path, home: Path, *, verbose: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pre_commit",
            "try-repo",
            str(repo),
            HOOKS[0]["id"],
            "--files",
            ".buildkite/test-amd.yaml",
            "--color",
            "never",
            *(["--verbose"] if verbose else []),
        ],
        cwd=cwd,
        env=_env(PRE_COMMIT_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_pre_commit_try_repo_in_a_vllm_checkout(tmp_path, vllm_checkout):
    """pre-commit installs rocmci with pip into its own environment, then runs the hook on vLLM's real file."""
    repo = _hook_repo(tmp_path)
    done = try_repo(repo, vllm_checkout, tmp_path / "pre-commit-home")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"validate AMD Buildkite step file\.+Passed", out), out
    assert re.search(r"\.buildkite/test-amd\.yaml: 0 errors, 0 warnings in \d+ generated steps", out), out

    step = vllm_checkout / ".buildkite" / "test-amd.yaml"
    text = step.read_text(encoding="utf-8")
    line = text[: text.index("  agent_pool:")].count("\n") + 1  # the first step's pool, mistyped below
    step.write_text(text.replace("  agent_pool:", "  agent_poll:", 1), encoding="utf-8")
    done = try_repo(repo, vllm_checkout, tmp_path / "pre-commit-home")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert re.search(r"validate AMD Buildkite step file\.+Failed", out), out
    assert f".buildkite/test-amd.yaml:{line}:3: error [source-schema] unknown step key 'agent_poll'" in out
    assert re.search(r"\.buildkite/test-amd\.yaml: [1-9]\d* errors?, ", out), out


def _set_first_pool(step: Path, pool: str) -> None:
    text = step.read_text(encoding="utf-8")
    first = re.search(r"^  agent_pool: \S+$", text, flags=re.M)
    assert first is not None
    step.write_text(text[: first.start()] + f"  agent_pool: {pool}" + text[first.end() :], encoding="utf-8")


def test_pre_commit_fails_on_a_mistyped_pool_and_shows_a_new_pools_warning_on_a_pass(tmp_path, vllm_checkout):
    """Without --verbose, as a developer runs it: a slip of a known pool fails the commit with the pool it
    should be; a new pool passes, and its warning is shown all the same (verbose: true in the manifest)."""
    repo = _hook_repo(tmp_path)
    step = vllm_checkout / ".buildkite" / "test-amd.yaml"
    original = step.read_text(encoding="utf-8")
    _set_first_pool(step, "mi30_2")
    done = try_repo(repo, vllm_checkout, tmp_path / "pre-commit-home", verbose=False)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "error [unknown-queue] pool 'mi30_2'" in out and "did you mean mi300_2?" in out, out
    assert "site-packages" not in out and "the inventory packaged with rocmci (setting 'inventory'" in out, out

    step.write_text(original, encoding="utf-8")
    _set_first_pool(step, "mi400_8")
    done = try_repo(repo, vllm_checkout, tmp_path / "pre-commit-home", verbose=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"validate AMD Buildkite step file\.+Passed", out), out
    assert "warning [unknown-queue] queue 'amd_mi400_8'" in out and "a new pool?" in out, out
    assert re.search(r"\.buildkite/test-amd\.yaml: 0 errors, 1 warning in \d+ generated steps", out), out


@pytest.mark.parametrize(
    ("pool", "suggestion"),
    [("mi30_2", "mi300_2"), ("mi300_3", "mi300_2"), ("MI300_2", "mi300_2"), ("m300_2", "mi300_2")],
)
def test_a_slip_of_a_known_pool_fails_the_hook(vllm_checkout, pool, suggestion):
    _set_first_pool(vllm_checkout / ".buildkite" / "test-amd.yaml", pool)
    done = hook(".buildkite/test-amd.yaml", cwd=vllm_checkout)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error [unknown-queue] pool {pool!r}" in done.stdout
    assert f"did you mean {suggestion}" in done.stdout
