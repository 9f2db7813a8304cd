"""A vLLM-like checkout for tests that run `rocmci` as a maintainer does (the layout test_vllm_checkout uses).

vLLM's real files from ../shared/fixtures/vllm (docker/, .buildkite/test-amd.yaml and the CI scripts), the
stand-in test module and example rocmci's container tests use, and nothing of rocmci's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.conftest import REPO

STANDIN = REPO / "tests" / "data" / "standin" / "vllm-workspace"
SCRIPT = Path(sysconfig.get_path("scripts")) / "rocmci"
ROCMCI = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-c", "from rocmci.cli.program import main; main()"]


def make_checkout(root: Path, vllm_fixtures: Path) -> Path:
    shutil.copytree(vllm_fixtures / "docker", root / "docker")
    (root / ".buildkite").mkdir()
    shutil.copy(vllm_fixtures / "test-amd.yaml", root / ".buildkite" / "test-amd.yaml")
    shutil.copytree(vllm_fixtures / "buildkite" / "scripts", root / ".buildkite" / "scripts")
    shutil.copytree(STANDIN / "tests", root / "tests")
    shutil.copytree(STANDIN / "examples", root / "examples")
    (root / "setup.py").write_text("# vLLM's setup.py (a checkout has one; rocmci only looks for it)\n")
    (root / "pyproject.toml").write_text('[project]\nname = "vllm"\n')  # vLLM's own: no [tool.rocmci]
    return root


def rocmci(*args: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """`rocmci ARGS` with no ROCMCI_* or Buildkite variable beyond `env`."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    full = {k: os.environ[k] for k in keep if k in os.environ} | env
    return subprocess.run([*ROCMCI, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout,
                          check=False)  # fmt: skip
