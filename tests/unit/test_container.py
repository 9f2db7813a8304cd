from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.errors import PreflightError
from rocmci.gpus import Gpu
from rocmci.runs import container as ctr
from rocmci.secrets import is_secret


def test_run_argv_is_exact_and_secrets_go_by_name():
    spec = ctr.ContainerSpec(
        image="img:1",
        argv=("python3", "x.py", "--a=1"),
        workdir="/vllm-workspace",
        env={"VLLM_LOGGING_LEVEL": "DEBUG"},
        pass_env=("HF_TOKEN",),
        devices=(("/dev/kfd", "/dev/kfd"), ("/h/dev/dri/renderD128", "/dev/dri/renderD128")),
        group_add=("44",),
        mounts=(ctr.Mount("/cache", "/root/.cache/huggingface"), ctr.Mount("/p", "/q", readonly=True)),
        network="host",
        labels={"rocmci.workload": "dp-example"},
        name="rocmci-x",
        ulimits=("core=0:-1",),
        cap_add=("IPC_LOCK",),
    )
    assert ctr.run_argv(spec, "docker") == [
        "docker", "run", "--init", "--name", "rocmci-x",
        "--label", "rocmci.managed=1", "--label", "rocmci.workload=dp-example",
        "--network", "host",
        "--device", "/dev/kfd", "--device", "/h/dev/dri/renderD128:/dev/dri/renderD128",
        "--cap-add", "IPC_LOCK", "--group-add", "44", "--ulimit", "core=0:-1", "--shm-size", "16g",
        "--volume", "/cache:/root/.cache/huggingface", "--volume", "/p:/q:ro",
        "--env", "VLLM_LOGGING_LEVEL=DEBUG", "--env", "HF_TOKEN",
        "--workdir", "/vllm-workspace", "img:1", "python3", "x.py", "--a=1",
    ]  # fmt: skip


def test_device_flags_map_exact_render_nodes():
    gpus = [Gpu(2, 3, "gfx942", 130), Gpu(3, 4, "gfx942", 131)]
    assert ctr.device_flags(gpus, Path("/fake")) == (
        ("/fake/dev/kfd", "/dev/kfd"),
        ("/fake/dev/dri/renderD130", "/dev/dri/renderD130"),
        ("/fake/dev/dri/renderD131", "/dev/dri/renderD131"),
    )
    assert ctr.device_flags([], Path("/")) == (("/dev/kfd", "/dev/kfd"), ("/dev/dri", "/dev/dri"))
    with pytest.raises(PreflightError, match="no render node"):
        ctr.device_flags([Gpu(0, 1, "gfx942", None)])


@pytest.mark.parametrize(
    ("name", "secret"),
    [("HF_TOKEN", True), ("GITHUB_TOKEN", True), ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True),
     ("API_KEY", True), ("VLLM_LOGGING_LEVEL", False), ("KEYBOARD", False), ("HF_HOME", False)],
)  # fmt: skip
def test_secret_names(name, secret):
    assert is_secret(name) is secret


def _alive(pids):
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


SPAWNER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(300)\n"
)


def test_host_timeout_kills_the_whole_process_group(tmp_path):
    """Real processes: the workload and the worker it started are both gone after a timeout."""
    import os
    import sys

    lines = []
    run = ctr.run_host(
        [sys.executable, "-c", SPAWNER], workdir=str(tmp_path), env=dict(os.environ), timeout=2, on_line=lines.append
    )
    assert run.timed_out and run.exit_code == -15
    assert _alive([int(lines[0])]) == []


def test_running_stops_a_host_group_from_another_thread(tmp_path):
    import os
    import sys
    import threading
    import time

    running = ctr.Running()
    lines: list[str] = []
    result = {}

    def go():
        result["run"] = ctr.run_host(
            [sys.executable, "-c", SPAWNER], workdir=str(tmp_path), env=dict(os.environ), timeout=300,
            on_line=lines.append, running=running,
        )  # fmt: skip

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.monotonic() + 30
    while not lines and time.monotonic() < deadline:
        time.sleep(0.05)
    running.stop_all()  # what Ctrl-C and SIGTERM do
    thread.join(timeout=30)
    assert not thread.is_alive() and result["run"].exit_code == -15 and not result["run"].timed_out
    assert _alive([int(lines[0])]) == []


def test_a_child_registered_after_stop_all_is_stopped_at_once():
    """The interrupt can land between a worker starting its child and registering it."""
    running = ctr.Running()
    stopped: list[str] = []
    first = running.add(lambda: stopped.append("first"))
    running.stop_all()
    assert stopped == ["first"]
    late = running.add(lambda: stopped.append("late"))  # started just before the interrupt, registered after
    assert stopped == ["first", "late"]
    running.discard(first)
    running.discard(late)  # discarding what was never kept is harmless
