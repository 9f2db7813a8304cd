"""The DeepEP workloads on the real engine, in a stand-in image, on a fake GPU host.

The fake host is a folder with KFD sysfs entries for four gfx942 GPUs and character devices
(made with mknod) standing in for /dev/kfd and the render nodes, so the device flags really go
through `docker run`. Nothing here runs on an AMD GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, RUN_SELECTOR, interruptible, run_invoke
from tests.integration.helpers import CANARY, leftovers, moe, results_of, run_env
from tests.unit.test_gpus import make_node


def test_moe_tests_pass_and_the_workaround_reaches_spawned_workers(engine, standin_image, fake_host, workdir):
    done = run_invoke(*moe(fake_host), env=run_env(standin_image, workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    found = results_of(done)
    ht, ll = found["moe-tests high-throughput"], found["moe-tests low-latency"]
    assert (ht["outcome"], ht["junit"]["tests"], ht["workarounds"]) == ("passed", 4, ["rocprofiler-register-teardown"])
    assert (ll["outcome"], ll["junit"]["tests"], ll["workarounds"]) == ("passed", 4, [])
    results = workdir / "results"
    assert (results / "junit-moe-high-throughput.xml").is_file() and (results / "annotation.md").is_file()
    assert ":white_check_mark: passed" in (results / "annotation.md").read_text()
    rows = [json.loads(line) for line in (results / "reports" / "none.jsonl").read_text().splitlines()]
    assert len(rows) == 12  # 4 high-throughput cases (start, end) and 4 low-latency ones
    for row in rows:
        assert row["devices"] == {"kfd": True, "dri": ["renderD128", "renderD129"]}  # /dev/kfd, GPUs 0 and 1
        assert row["pid"] != 1  # --init: an init process is PID 1, so a crash signal is not swallowed
        assert row["env"]["PYTORCH_ROCM_ARCH"] == "" and row["env"]["PYTHONPATH"] == "/vllm-workspace"
    workers = {r["case"][:2]: r["worker_env"].get("ROCPROFILER_REGISTER_ENABLED") for r in rows if r["worker_env"]}
    assert workers == {"ht": "0", "ll": None}  # the workaround reached the spawned worker, high-throughput only
    assert leftovers(engine) == []


def test_a_failing_case_is_named(engine, standin_image, fake_host, workdir):
    done = run_invoke(
        *moe(fake_host, "--mode", "high-throughput", mode="fail-one"), env=run_env(standin_image, workdir)
    )
    assert done.returncode == 1
    ht = results_of(done)["moe-tests high-throughput"]
    assert ht["outcome"] == "failed" and "test_deep_ep_moe[3]" in ht["detail"]
    assert ht["junit"]["failures"] == 1


def test_crash_after_passing_is_a_teardown_crash(engine, standin_image, fake_host, workdir):
    args = moe(fake_host, "--mode", "high-throughput", mode="teardown-crash")
    done = run_invoke(*args, env=run_env(standin_image, workdir))
    assert done.returncode == 11, done.stdout + done.stderr
    ht = results_of(done)["moe-tests high-throughput"]
    assert ht["outcome"] == "crashed at teardown" and ht["exit_code"] == 139
    assert "4 passed, then the process died by SIGSEGV" in ht["detail"]
    assert "ROCm/rocm-systems#6942" in ht["detail"] and "rocprofiler-register-teardown was applied" in ht["detail"]
    table = run_invoke(*args[:-5], "--env", "STANDIN_MODE=teardown-crash", env=run_env(standin_image, workdir))
    assert "crashed at teardown" in table.stdout


def test_nothing_collected_is_named_and_fails_only_when_strict(engine, standin_image, fake_host, workdir):
    done = run_invoke(*moe(fake_host, "--mode", "low-latency", mode="empty"), env=run_env(standin_image, workdir))
    assert done.returncode == 0  # vLLM's runner: pytest exit 5 is success
    assert results_of(done)["moe-tests low-latency"]["outcome"] == "no tests collected"
    strict = run_invoke(
        *moe(fake_host, "--mode", "low-latency", "--strict", mode="empty"), env=run_env(standin_image, workdir)
    )
    assert strict.returncode == 10


def test_dp_example_gets_the_exact_command_and_hf_token_by_name(engine, standin_image, fake_host, workdir):
    env = run_env(standin_image, workdir, HF_TOKEN=CANARY)
    done = run_invoke("run.dp-example", "--host-root", str(fake_host), "--gpus", "2,3", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    argv = json.loads(done.stdout.split("standin argv: ")[1].splitlines()[0])
    assert argv == [
        "examples/offline_inference/data_parallel.py",
        "--model=Qwen/Qwen1.5-MoE-A2.7B",
        "-tp=1",
        "-dp=2",
        "--max-model-len=2048",
        "--all2all-backend=deepep_high_throughput",
    ]
    assert "standin VLLM_LOGGING_LEVEL=DEBUG" in done.stdout
    assert "standin devices: renderD130,renderD131" in done.stdout  # GPUs 2 and 3 only
    assert "standin HF_TOKEN received: yes; value ***" in done.stdout
    logs = list((workdir / "results").glob("dp-example-*.log"))
    assert len(logs) == 1 and "DP rank 1 needs to process" in logs[0].read_text()
    for text in (done.stdout, done.stderr, logs[0].read_text(), (workdir / "results" / "results.json").read_text()):
        assert CANARY not in text
    dry = run_invoke("run.dp-example", "--host-root", str(fake_host), "--dry-run", env=env)
    assert "--env HF_TOKEN \\" in dry.stdout and CANARY not in dry.stdout + dry.stderr
    assert f"--device {fake_host}/dev/dri/renderD128:/dev/dri/renderD128" in dry.stdout
    assert "--init" in dry.stdout and "--group-add" in dry.stdout


def test_dp_example_path_follows_the_image(engine, standin_image, fake_host, workdir):
    done = run_invoke("run.dp-example", "--host-root", str(fake_host), env=run_env(f"{standin_image}-moved", workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"examples/features/data_parallel/data_parallel_offline.py"' in done.stdout


def test_timeout_stops_and_removes_the_container(engine, standin_image, fake_host, workdir):
    args = moe(fake_host, "--mode", "high-throughput", "--timeout", "5", mode="sleep")
    done = run_invoke(*args, env=run_env(standin_image, workdir))
    assert done.returncode == 13
    assert results_of(done)["moe-tests high-throughput"]["outcome"] == "timed out"
    assert leftovers(engine) == []


def workload_started(engine) -> bool:
    mine = {"label": RUN_SELECTOR, "name": "rocmci-moe-tests-"}
    return bool(engine.sdk.containers.list(all=True, sparse=True, filters=mine))


def test_ctrl_c_removes_the_container(engine, standin_image, fake_host, workdir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update(run_env(standin_image, workdir), PYTHONUNBUFFERED="1")  # a failure shows how far it got
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "invoke",
            "--search-root",
            str(REPO),
            *moe(fake_host, "--mode", "high-throughput", mode="sleep"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        # The workload's own container, not a probe's: the interrupt must find the workload running. The
        # bound is above a probe's own (120 s), so a hung probe is rocmci's to report, not this loop's.
        deadline = time.monotonic() + 300
        while not workload_started(engine) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not workload_started(engine):
            proc.kill()
            out, err = proc.communicate(timeout=60)
            pytest.fail(
                f"the workload container never started (rocmci exit {proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}"
            )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "rocmci: interrupted" in err
        assert leftovers(engine) == []
    finally:
        # Only after a failure: the run is stopped and its container removed, so no later test inherits them.
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        for name in leftovers(engine):
            engine.remove_container(name)


def test_shards_run_at_once_on_disjoint_gpus(engine, standin_image, fake_host, workdir):
    args = moe(fake_host, "--mode", "high-throughput", "--shards", "2", mode="slow")
    done = run_invoke(*args, env=run_env(standin_image, workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    merged = results_of(done)["moe-tests high-throughput (2 shards)"]
    assert merged["outcome"] == "passed" and merged["junit"]["tests"] == 4
    from rocmci.runs.results import parse_junit

    assert parse_junit(workdir / "results" / "junit-moe-high-throughput.xml").tests == 4  # merged file
    stamps = {}
    for path in (workdir / "results" / "reports").glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        times = [r["time"] for r in rows]
        devices = {(r["devices"]["kfd"], ",".join(r["devices"]["dri"])) for r in rows}
        stamps[path.stem] = (min(times), max(times), {d for kfd, d in devices if kfd}, len(rows))
    assert sorted(stamps) == ["29500", "29600"]  # distinct rendezvous ports
    (a_start, a_end, a_dev, a_n), (b_start, b_end, b_dev, b_n) = stamps["29500"], stamps["29600"]
    assert a_n == b_n == 4  # two cases each, start and end stamps
    assert a_start < b_end and b_start < a_end, "the shards did not overlap in time"
    assert a_dev == {"renderD128,renderD129"} and b_dev == {"renderD130,renderD131"}


def test_preflight_refuses_an_image_built_for_other_archs(engine, standin_image, tmp_path, workdir):
    root = tmp_path / "mi250"
    make_node(root / "sys/class/kfd/kfd/topology/nodes", 1, 90010, render=128)
    make_node(root / "sys/class/kfd/kfd/topology/nodes", 2, 90010, render=129)
    (root / "dev").mkdir()
    (root / "dev/kfd").write_text("")
    done = run_invoke("run.moe-tests", "--host-root", str(root), env=run_env(standin_image, workdir))
    assert done.returncode == 5
    assert "gfx90a (MI210/MI250/MI250X)" in done.stderr and "gfx942;gfx950" in done.stderr
    assert leftovers(engine) == []


def test_host_mode_runs_the_same_workload_without_a_container(engine, fake_host, workdir):
    """--no-container, as in a Buildkite step that already runs inside the image: here, this host's Python."""
    env = run_env("unused", workdir)
    standin = REPO / "tests" / "data" / "standin" / "vllm-workspace"
    done = run_invoke(*moe(fake_host, "--no-container", "--workdir", str(standin), "--mode", "both"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    found = results_of(done)
    assert found["moe-tests high-throughput"]["outcome"] == "passed"  # env reached the spawned worker
    assert found["moe-tests low-latency"]["junit"]["tests"] == 4
    assert leftovers(engine) == []
