"""From a vLLM checkout every task works with no flag and no ROCMCI_* variable (issue 23's done-when).

The checkout is made the way vLLM lays its tree out, from the real upstream files in ../shared/fixtures/vllm
(Dockerfile.rocm and its bake files, .buildkite/test-amd.yaml and the ROCm CI scripts) plus the stand-in
test module and example rocmci's container tests use; nothing of rocmci's own (no pyproject [tool.rocmci],
no agents.yaml, no workarounds.yaml) is in it. Each task runs as the installed `rocmci` command, from the
checkout's root and from a folder deep inside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.functional.checkouts import ROCMCI, make_checkout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, vllm_fixtures: Path) -> Path:
    return make_checkout(tmp_path_factory.mktemp("vllm"), vllm_fixtures)


def rocmci(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command a maintainer types: no flag beyond the task's own, no ROCMCI_* or Buildkite variable."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "PYENV_ROOT", "PYENV_VERSION", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return subprocess.run([*ROCMCI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


def assert_no_rocmci_files(root: Path) -> None:
    names = {p.name for p in root.rglob("*")}
    assert not names & {"agents.yaml", "workarounds.yaml", "tasks.py", "noxfile.py"}
    assert "[tool.rocmci]" not in (root / "pyproject.toml").read_text()


@pytest.mark.parametrize("where", [".", "tests/kernels/moe"], ids=["root", "subfolder"])
def test_every_task_works_from_a_vllm_checkout(checkout: Path, where: str):
    assert_no_rocmci_files(checkout)
    cwd = checkout / where

    moe = rocmci("run.moe-tests", "-n", cwd=cwd)
    assert moe.returncode == 0, moe.stderr
    assert "tests/kernels/moe/test_deepep_moe.py" in moe.stdout and "docker" in moe.stdout
    assert f"{checkout}/results:/rocmci-results" in moe.stdout  # the checkout's root, not the subfolder

    dp = rocmci("run.dp-example", "-n", cwd=cwd)
    assert dp.returncode == 0, dp.stderr
    assert "--all2all-backend" in dp.stdout

    workarounds = rocmci("workarounds", cwd=cwd)
    assert workarounds.returncode == 0, workarounds.stderr
    assert "rocprofiler-register-teardown" in workarounds.stdout
    assert f"{checkout}/tests/kernels/moe/test_deepep_moe.py" in workarounds.stdout  # evidence from this checkout

    check = rocmci("image.check", cwd=cwd)  # the list vLLM's file hard-codes for DeepEP is the default one
    assert check.returncode == 0 and check.stderr == "", check.stdout + check.stderr
    check = rocmci("image.check", "--arch", "gfx942", cwd=cwd)
    # ... so another list reaches rocSHMEM only: the check's finding, exit 1, is the answer.
    assert check.returncode == 1 and check.stderr == "", check.stderr
    assert check.stdout.startswith("docker/Dockerfile.rocm:") and "error [deepep-arch-source]" in check.stdout

    validate = rocmci("pipeline.validate", cwd=cwd)
    assert validate.returncode == 0, validate.stderr
    assert validate.stdout.strip() == ".buildkite/test-amd.yaml: 0 errors, 0 warnings in 384 generated steps"

    shown = rocmci("settings", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    assert f"workspace: {checkout}" in shown.stdout and f"vLLM checkout: {checkout}" in shown.stdout


def test_an_enclosing_unrelated_repository_never_names_the_vllm_commit(checkout: Path, tmp_path: Path):
    """A plain copy of vLLM's files inside some other git repository is "not a git checkout", not that one."""
    from rocmci.image.requests import vllm_commit

    outer = tmp_path / "home"
    outer.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(outer)]
    subprocess.run([*git, "init", "-q"], check=True, timeout=60)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "unrelated"], check=True, timeout=60)
    inner = outer / "vllm"
    shutil.copytree(checkout, inner)
    assert vllm_commit(inner) == "unknown (not a git checkout)"
    subprocess.run(["git", "-C", str(inner), "init", "-q"], check=True, timeout=60)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(inner), "commit", "-q",
                    "--allow-empty", "-m", "vllm"], check=True, timeout=60)  # fmt: skip
    own = subprocess.run(["git", "-C", str(inner), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert vllm_commit(inner).startswith(own.stdout.strip())
