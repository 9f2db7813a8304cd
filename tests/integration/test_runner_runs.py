"""run.step for real: vLLM's runner (the fixture, unmodified, in a vLLM-like checkout) starts the
container on the engine, and a native step runs as its pod with the runner inside, in native mode.

The CI image is a stand-in built here: vLLM's staged workspace, /opt/vllm-ci/commit.txt, and
importable stand-ins for the packages the runner's preflight checks (torch, transformers, ...).
The fake host's render nodes are mknod'ed; every container carries this run's job label and none is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_VLLM, interruptible, run_invoke
from tests.integration.helpers import build_runner_ci_image, fake_host  # noqa: F401 - a fixture

RUNNER = SHARED_VLLM / "buildkite" / "scripts" / "hardware_ci" / "run-amd-test.sh"
TEST_LABEL = "rocmci-test.runner-runs"
RUN_ID = uuid.uuid4().hex  # containers of this module's image carry its label with this value
STEPS = """\
steps:
- label: Runner Docker Path
  agent_pool: mi250_2
  mirror_hardwares: [amdproduction]
  num_gpus: 2
  source_file_dependencies: [vllm/]
  commands:
  - ls /dev/dri && echo runner-ran-in-$$(cat /opt/vllm-ci/commit.txt)
- label: Runner Native Pipe
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  dind: false
  no_gpu: true
  source_file_dependencies: [vllm/]
  commands:
  - echo native-ran && false | true
- label: Runner Sleep
  agent_pool: mi250_1
  mirror_hardwares: [amdproduction]
  source_file_dependencies: [vllm/]
  commands:
  - echo SLEEPER && sleep 600
- label: Runner DeepEP MoE
  agent_pool: mi250_4
  mirror_hardwares: [amdproduction]
  num_gpus: 4
  source_file_dependencies: [vllm/]
  commands:
  - pytest -v -s kernels/moe/test_deepep_moe.py
"""
# The sleeping step names this run: another run on the host has its own (pgrep below sees only ours).
SLEEPER = f"sleeping-now-{RUN_ID}"
STEPS = STEPS.replace("SLEEPER", SLEEPER)


@pytest.fixture(scope="module")
def ci_image(engine, python_image, tmp_path_factory):
    tag = build_runner_ci_image(engine, python_image, tmp_path_factory.mktemp("ci-image"), f"{TEST_LABEL}={RUN_ID}")
    yield tag
    engine.cli("rmi", "-f", tag, check=False)


@pytest.fixture
def checkout(tmp_path) -> Path:
    root = tmp_path / "vllm"
    (root / ".buildkite/scripts/hardware_ci").mkdir(parents=True)
    shutil.copyfile(RUNNER, root / ".buildkite/scripts/hardware_ci/run-amd-test.sh")
    (root / ".buildkite" / "test-amd.yaml").write_text(STEPS)
    (root / "docker").mkdir()
    shutil.copyfile(SHARED_VLLM / "docker" / "Dockerfile.rocm", root / "docker" / "Dockerfile.rocm")
    (root / "setup.py").write_text("")
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return root


@pytest.fixture
def host(fake_host, tmp_path) -> Path:  # noqa: F811 - the fixture above
    """The fake GPU host, with a render group (the runner looks it up with getent)."""
    root = tmp_path / "host"
    shutil.copytree(fake_host / "sys", root / "sys")
    (root / "dev/dri").mkdir(parents=True)
    for node in [fake_host / "dev/kfd", *(fake_host / "dev/dri").iterdir()]:
        os.mknod(root / node.relative_to(fake_host), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/group").write_text("render:x:4711:\n")
    return root


def run_step(checkout: Path, host: Path, image: str, tmp: Path, label_: str):
    env = {"ROCMCI_RESULTS_DIR": str(tmp / "results"), "ROCMCI_HF_CACHE": str(tmp / "hf"),
           "ROCMCI_RUN_NETWORK": "none"}  # fmt: skip
    return run_invoke("run.step", "--step", label_, "--vllm-src", str(checkout), "--host-root", str(host),
                      "--image", image, "--json", "--skip-preflight", env=env, cwd=tmp)  # fmt: skip


def left(engine) -> list[str]:
    """This module's containers (they inherit its image's label) that are still there."""
    return engine.containers(f"{TEST_LABEL}={RUN_ID}")


def test_a_docker_path_step_runs_in_the_container_the_runner_starts(engine, ci_image, checkout, host, tmp_path):
    done = run_step(checkout, host, ci_image, tmp_path, "Runner Docker Path")
    (result,) = json.loads(done.stdout)["results"]
    assert done.returncode == 0 and result["outcome"] == "passed", done.stderr[-2000:]
    (log,) = [p.read_text() for p in (tmp_path / "results").glob("step-*.log")]
    assert "renderD128\nrenderD129" in log  # both GPUs of an agent of amd_mi250_2, by the runner's --device
    assert "runner-ran-in-1234567890abcdef" in log and "--- Single-node job" in log
    assert not left(engine)


def test_a_native_step_runs_as_its_pod_and_fails_on_a_failing_pipe(engine, ci_image, checkout, host, tmp_path):
    done = run_step(checkout, host, ci_image, tmp_path, "Runner Native Pipe")
    (result,) = json.loads(done.stdout)["results"]
    (log,) = [p.read_text() for p in (tmp_path / "results").glob("step-*.log")]
    assert "Native in-pod ROCm CI" in log and "native-ran" in log, log[-2000:]
    assert result["outcome"] == "failed" and done.returncode != 0  # pipefail: `false | true` fails in CI
    assert not left(engine)


def test_a_client_that_starts_no_container_is_no_pass(ci_image, checkout, host, tmp_path):
    env = {"ROCMCI_RESULTS_DIR": str(tmp_path / "results"), "ROCMCI_HF_CACHE": str(tmp_path / "hf"),
           "ROCMCI_DOCKER": "/bin/true"}  # fmt: skip
    done = run_invoke("run.step", "--step", "Runner Docker Path", "--vllm-src", str(checkout), "--host-root", str(host),
                      "--image", ci_image, "--json", "--skip-preflight", env=env, cwd=tmp_path)  # fmt: skip
    (result,) = json.loads(done.stdout)["results"]
    assert result["outcome"] != "passed" and done.returncode != 0, done.stdout


def test_the_moe_tests_run_as_jobs_of_their_step_with_its_agents_gpus(engine, ci_image, checkout, host, tmp_path):
    env = {"ROCMCI_RESULTS_DIR": str(tmp_path / "results"), "ROCMCI_HF_CACHE": str(tmp_path / "hf"),
           "ROCMCI_RUN_NETWORK": "none"}  # fmt: skip
    done = run_invoke("run.moe-tests", "--mode", "high-throughput", "--vllm-src", str(checkout), "--host-root",
                      str(host), "--image", ci_image, "--json", "--skip-preflight", "-e", "STANDIN_MODE=pass",
                      env=env, cwd=tmp_path)  # fmt: skip
    (result,) = json.loads(done.stdout)["results"]
    assert done.returncode == 0 and result["outcome"] == "passed", done.stderr[-2000:]
    assert "as jobs of step 'mi250_4: Runner DeepEP MoE' through vLLM's runner" in done.stderr
    rows = [
        json.loads(line) for p in (tmp_path / "results" / "reports").glob("*") for line in p.read_text().splitlines()
    ]
    # All four GPUs of an amd_mi250_4 agent, as the runner hands them over (the tests themselves use two).
    assert rows and all(r["devices"]["dri"] == [f"renderD{128 + i}" for i in range(4)] for r in rows)
    assert all(r["env"]["ROCPROFILER_REGISTER_ENABLED"] == "0" for r in rows)  # the mode's workaround
    (log,) = [p.read_text() for p in (tmp_path / "results").glob("moe-*.log")]
    assert "--- Single-node job" in log  # through the runner's docker path
    assert not left(engine)


def test_ctrl_c_stops_the_runner_and_removes_its_container(engine, ci_image, checkout, host, tmp_path):
    env = {**os.environ, "ROCMCI_RESULTS_DIR": str(tmp_path / "results"), "ROCMCI_HF_CACHE": str(tmp_path / "hf"),
           "ROCMCI_RUN_NETWORK": "none"}  # fmt: skip
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "run.step", "--step", "Runner Sleep",
            "--vllm-src", str(checkout), "--host-root", str(host), "--image", ci_image, "--skip-preflight"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not left(engine) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left(engine), f"the container never started (rocmci exit {proc.poll()})"
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 130, err[-2000:]
        assert not left(engine)
        assert not subprocess.run(["pgrep", "-f", SLEEPER], capture_output=True).stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        for name in left(engine):
            engine.remove_container(name)
