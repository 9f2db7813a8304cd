"""run.bisect with a local registry: CI-like per-commit images for a 16-commit vLLM-like history.

The step's stand-in test fails from commit K on; one commit has no image; one bad commit is flaky (its
first run passes). Each try runs the commit's own step file and runner (the fixture run-amd-test.sh) in
that commit's image, pulled from the registry by the runner's docker run, and records itself in the
results folder, so the test counts how often each commit ran.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_VLLM, interruptible, run_invoke
from tests.integration.helpers import build_runner_ci_image, fake_host, serve_registry  # noqa: F401 - a fixture

RUNNER = SHARED_VLLM / "buildkite" / "scripts" / "hardware_ci" / "run-amd-test.sh"
BUILD_SCRIPT = SHARED_VLLM / "buildkite" / "scripts" / "rocm" / "build-test-image.sh"
LABEL = "rocmci-test.bisect"
RUN_ID = uuid.uuid4().hex
K, NO_IMAGE, FLAKY = 4, 5, 7  # indices among the 16 candidates (oldest first): the search passes all three
STEPS = """\
steps:
- label: Bisect Me
  agent_pool: mi250_1
  mirror_hardwares: [amdproduction]
  source_file_dependencies: [vllm/]
  commands:
  - pytest -q test_bisect.py
"""
# The test of each commit's image: MODE is baked in; every run appends its commit to /rocmci-results/runs.
TEST = """\
import os
MODE = open("/opt/mode").read().strip()
COMMIT = open("/opt/vllm-ci/commit.txt").read().strip()

def test_the_step():
    with open("/rocmci-results/runs", "a") as fh:
        fh.write(COMMIT + "\\n")
    flaky_seen = f"/rocmci-results/flaky-{COMMIT}"
    if MODE == "flaky" and not os.path.exists(flaky_seen):
        open(flaky_seen, "w").close()
        return  # its first run passes
    assert MODE == "pass"
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[str]]:
    """A vLLM-like checkout: good (the root), then 16 commits; the runner and build script as vLLM has them."""
    root = tmp_path_factory.mktemp("vllm")
    (root / ".buildkite/scripts/hardware_ci").mkdir(parents=True)
    (root / ".buildkite/scripts/rocm").mkdir(parents=True)
    shutil.copyfile(RUNNER, root / ".buildkite/scripts/hardware_ci/run-amd-test.sh")
    shutil.copyfile(BUILD_SCRIPT, root / ".buildkite/scripts/rocm/build-test-image.sh")
    (root / ".buildkite/test-amd.yaml").write_text(STEPS)
    (root / "docker").mkdir()
    shutil.copyfile(SHARED_VLLM / "docker" / "Dockerfile.rocm", root / "docker" / "Dockerfile.rocm")
    (root / "setup.py").write_text("")
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "good"], check=True)
    commits = []
    for i in range(16):
        (root / "marker").write_text(str(i))
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", f"change {i}"], check=True)
        commits.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    return root, commits


@pytest.fixture(scope="module")
def published(engine, python_image, history, tmp_path_factory):
    """The registry holds `<registry>/rocm/vllm-ci:<commit>` for every commit but one; removed afterwards."""
    with serve_registry(tmp_path_factory.mktemp("registry")) as address:
        yield from _publish(engine, python_image, history, tmp_path_factory, f"{address}/rocm/vllm-ci")


def _publish(engine, python_image, history, tmp_path_factory, repo: str):
    base = build_runner_ci_image(engine, python_image, tmp_path_factory.mktemp("ci"), f"{LABEL}={RUN_ID}")
    _, commits = history
    tags = []
    try:
        for i, commit in enumerate(commits[:-1]):  # the --bad commit is never run
            if i == NO_IMAGE:
                continue
            mode = "flaky" if i == FLAKY else "fail" if i >= K else "pass"
            context = tmp_path_factory.mktemp(f"c{i}")
            (context / "test_bisect.py").write_text(TEST)
            (context / "Dockerfile").write_text(
                f"FROM {base}\nCOPY test_bisect.py /opt/vllm-ci/workspace/tests/\n"
                f"RUN echo {mode} > /opt/mode && echo {commit} > /opt/vllm-ci/commit.txt\n"
            )
            tag = f"{repo}:{commit}"
            engine.cli("build", "-q", "--network", "none", "-t", tag, str(context), timeout=300)
            engine.cli("push", tag, timeout=300)
            engine.cli("rmi", tag)  # only the registry has it: the runner's docker run pulls it
            tags.append(tag)
        yield repo
    finally:
        for tag in tags:
            engine.cli("rmi", "-f", tag, check=False)
        engine.cli("rmi", "-f", base, check=False)


@pytest.fixture
def host(fake_host, tmp_path) -> Path:  # noqa: F811 - the fixture imported above
    import stat

    root = tmp_path / "host"
    shutil.copytree(fake_host / "sys", root / "sys")
    (root / "dev/dri").mkdir(parents=True)
    for node in [fake_host / "dev/kfd", *(fake_host / "dev/dri").iterdir()]:
        os.mknod(root / node.relative_to(fake_host), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "etc").mkdir()
    (root / "etc/group").write_text("render:x:4711:\n")
    return root


def bisect_args(history, host: Path, *extra: str) -> tuple[str, ...]:
    root, commits = history
    return ("run.bisect", "--step", "Bisect Me", "--good", "main~16", "--bad", commits[-1], "--vllm-src", str(root),
            "--host-root", str(host), "--skip-preflight", "--repeat", "2", *extra)  # fmt: skip


def settings(tmp_path: Path, repo: str) -> dict[str, str]:
    return {"ROCMCI_RESULTS_DIR": str(tmp_path / "results"), "ROCMCI_HF_CACHE": str(tmp_path / "hf"),
            "ROCMCI_RUN_NETWORK": "none", "ROCM_CI_IMAGE_REPO": repo}  # fmt: skip


def runs_of(tmp_path: Path) -> list[str]:
    path = tmp_path / "results" / "runs"
    return path.read_text().split() if path.exists() else []


def test_bisect_names_the_first_bad_commit_within_the_bound(engine, history, published, host, tmp_path):
    _, commits = history
    dry = run_invoke(*bisect_args(history, host, "--dry-run", "--json"), env=settings(tmp_path, published))
    assert dry.returncode == 0, dry.stderr
    rows = json.loads(dry.stdout)["candidates"]
    assert [r["commit"] for r in rows] == commits[:-1]
    assert [i for i, r in enumerate(rows) if not r["digest"]] == [NO_IMAGE] and runs_of(tmp_path) == []
    done = run_invoke(*bisect_args(history, host, "--json"), env=settings(tmp_path, published))
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    assert answer["first_bad"] == commits[K] and answer["last_good"] == commits[K - 1]
    assert answer["skipped"] == [commits[NO_IMAGE]]
    ran = runs_of(tmp_path)
    assert len(ran) <= math.ceil(math.log2(16)) + 1 + 2 * 2  # + the skip + the repeats of the good ones
    assert ran.count(commits[FLAKY]) == 2  # its first run passed: the second decided it
    assert commits[NO_IMAGE] not in ran
    assert f"--image {published}:{commits[K]}" in answer["reproduce"]["bad"]
    assert not engine.containers(f"{LABEL}={RUN_ID}")


def test_an_interrupted_bisect_resumes_without_rerunning_finished_commits(engine, history, published, host, tmp_path):
    env = {**os.environ, **settings(tmp_path, published)}
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), *bisect_args(history, host)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)  # fmt: skip
    log = tmp_path / "results" / "bisect"
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            records = [line for p in log.glob("*.jsonl") for line in p.read_text().splitlines()[1:]]
            if len(records) >= 2:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    first = runs_of(tmp_path)
    finished = [json.loads(line)["commit"] for p in log.glob("*.jsonl") for line in p.read_text().splitlines()[1:]]
    assert len(finished) >= 2
    done = run_invoke(*bisect_args(history, host, "--json"), env=settings(tmp_path, published))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stderr and json.loads(done.stdout)["first_bad"] == history[1][K]
    again = runs_of(tmp_path)[len(first) :]
    assert not set(again) & {c for c in finished if c in first}  # finished commits did not run again
    assert not engine.containers(f"{LABEL}={RUN_ID}")
