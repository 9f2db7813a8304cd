"""Faults on the real engine: the engine dies mid-build, a workload is SIGKILLed or runs out of memory.

Stopping an engine must not disturb the other tests, so the mid-build fault uses a second dockerd of
its own (own socket, data and exec roots), started and stopped here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import BUSYBOX_IMAGE, DOCKER_REQUIRED, REPO, run_invoke
from tests.integration.helpers import leftovers, moe, results_of, run_env

IMAGE_DATA = REPO / "tests" / "data" / "image"


class SecondEngine:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.root / "dockerd.log", "a")
        self.proc = subprocess.Popen(
            ["dockerd", "--host", self.host, "--data-root", str(self.root / "data"),
             "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid"),
             "--bridge=none", "--iptables=false"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.cli("version").returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError("second dockerd did not start: " + (self.root / "dockerd.log").read_text()[-500:])

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        # A killed dockerd leaves its containerd behind, which would block the next start.
        pidfile = self.root / "exec" / "containerd" / "containerd.pid"
        if pidfile.is_file():
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass
            # Its pid may live on as a zombie nobody reaps; dockerd would then wait for it to answer.
            pidfile.unlink()
            time.sleep(0.5)

    def unmount(self) -> None:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(str(self.root))), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    def cli(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["/usr/bin/docker", "--host", self.host, *args], capture_output=True, text=True, check=False, **kw
        )


@pytest.fixture
def second_engine(engine, busybox_image):
    if shutil.which("dockerd") is None:
        if DOCKER_REQUIRED:
            pytest.fail("dockerd is not installed", pytrace=False)
        pytest.skip("dockerd is not installed")
    root = Path(tempfile.mkdtemp(prefix="rocmci-eng-", dir="/tmp"))  # short path: unix socket limit
    second = SecondEngine(root)
    second.start()
    saved = subprocess.run(["/usr/bin/docker", "save", BUSYBOX_IMAGE], capture_output=True, check=True).stdout
    second.cli("load", input=saved.decode("latin-1"), encoding="latin-1")
    try:
        yield second
    finally:
        second.stop(signal.SIGKILL)
        second.unmount()
        shutil.rmtree(root, ignore_errors=True)


def test_engine_stopped_during_a_build(second_engine, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update(
        DOCKER_HOST=second_engine.host, ROCMCI_DOCKERFILE=str(IMAGE_DATA / "Dockerfile.slow"),
        ROCMCI_IMAGE_REPO=f"rocmci-test/fault-{uuid.uuid4().hex[:6]}", ROCMCI_BUILD_NETWORK="none",
        ROCMCI_DOCKER="/usr/bin/docker", CI="true",
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "image.build"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if "fixture: slow step" in line and "RUN" not in line:
            break
    second_engine.stop(signal.SIGKILL)
    rest_out, rest_err = proc.communicate(timeout=120)
    last = rest_err.strip().splitlines()[-1]
    assert proc.returncode == 3, "".join(seen[-5:]) + rest_err
    assert last.startswith("rocmci: the Docker engine stopped while building")
    assert "Traceback" not in rest_err
    second_engine.start()  # back up: nothing of the failed build is left behind
    assert second_engine.cli("ps", "-a", "-q").stdout.split() == []
    assert env["ROCMCI_IMAGE_REPO"] not in second_engine.cli("images").stdout


def test_workload_killed_by_sigkill(engine, standin_image, fake_host, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update(run_env(standin_image, tmp_path))
    argv = [
        sys.executable,
        "-m",
        "invoke",
        "--search-root",
        str(REPO),
        *moe(fake_host, "--mode", "high-throughput", mode="sleep"),
    ]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not leftovers(engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    (container,) = leftovers(engine)
    engine.cli("kill", "--signal", "KILL", container)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 12, err
    ht = json.loads(out)["results"][0]
    assert ht["outcome"] == "crashed" and "died by SIGKILL (exit 137)" in ht["detail"]
    assert leftovers(engine) == []


def test_workload_out_of_memory(engine, standin_image, fake_host, tmp_path):
    env = run_env(standin_image, tmp_path, ROCMCI_RUN_MEMORY="64m")
    done = run_invoke(*moe(fake_host, "--mode", "high-throughput", mode="oom"), env=env)
    assert done.returncode == 12, done.stdout + done.stderr
    ht = results_of(done)["moe-tests high-throughput"]
    assert ht["outcome"] == "crashed" and "OOM killer" in ht["detail"]
    assert leftovers(engine) == []
