"""Each task resolves the settings registry once (design.md: one registry, resolved once per task), so every
part of a task sees the same values with the same origins. Counted from a vLLM checkout made of upstream's real
files, with `settings.resolve` wrapped in the process that runs the task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.functional.checkouts import make_checkout

COUNTING = """
import sys
from rocmci import settings
calls = []
real = settings.resolve
def counted(*a, **k):
    calls.append(1)
    return real(*a, **k)
settings.resolve = counted
from rocmci.cli import program
try:
    program.main()
finally:
    sys.stderr.write(f"\\nresolved {len(calls)} times\\n")
"""
TASKS = [
    ("pipeline.generate", "--out", "{tmp}/pipeline.yaml"),
    ("pipeline.validate",),
    ("pipeline.plan",),
    ("image.check",),
    ("image.build", "-n"),
    ("run.moe-tests", "-n"),
    ("run.dp-example", "-n"),
    ("run.step", "--step", "PyTorch Fullgraph Smoke Test", "-n"),
    ("workarounds",),
    ("settings",),
    ("doctor",),
]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, vllm_fixtures: Path) -> Path:
    return make_checkout(tmp_path_factory.mktemp("vllm"), vllm_fixtures)


@pytest.mark.parametrize("task", TASKS, ids=[t[0] for t in TASKS])
def test_a_task_resolves_the_settings_once(checkout: Path, tmp_path: Path, task: tuple[str, ...]):
    args = [a.format(tmp=tmp_path) for a in task]
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-engine.sock"  # what the engine holds plays no part in the count
    done = subprocess.run([sys.executable, "-c", COUNTING, *args], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.rstrip().endswith("resolved 1 times"), done.stderr[-3000:]
