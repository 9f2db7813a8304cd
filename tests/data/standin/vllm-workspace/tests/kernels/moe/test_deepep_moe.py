"""Stand-in for vLLM's tests/kernels/moe/test_deepep_moe.py; STANDIN_MODE picks the behaviour.

Every case writes what it saw (devices, its environment, and the environment of a worker it spawned
the way torch.multiprocessing.spawn does) as one JSON line into the report folder: /rocmci-results in
a container, STANDIN_REPORT_DIR on the host. Values of secret-looking variables are never written.
"""

import json
import multiprocessing
import os
import re
import signal
import time

import pytest

MODE = os.environ.get("STANDIN_MODE", "pass")
CASES = list(range(1, int(os.environ.get("STANDIN_CASES", "4")) + 1))
SLOW_SECONDS = float(os.environ.get("STANDIN_SLOW_SECONDS", "1.5"))
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY$|^KEY$", re.I)
WATCHED = "ROCPROFILER_REGISTER_ENABLED"


def report_dir():
    folder = os.environ.get("STANDIN_REPORT_DIR") or ("/rocmci-results" if os.path.isdir("/rocmci-results") else "")
    return os.path.join(folder, "reports") if folder else None


def visible_env():
    return {k: ("<secret>" if SECRET.search(k) else v) for k, v in sorted(os.environ.items())}


def devices():
    dri = sorted(os.listdir("/dev/dri")) if os.path.isdir("/dev/dri") else []
    return {"kfd": os.path.exists("/dev/kfd"), "dri": dri}


def _worker(queue, sleep):
    queue.put(visible_env())
    if sleep:
        time.sleep(sleep)


def spawn_worker(sleep=0.0):
    ctx = multiprocessing.get_context("spawn")  # as torch.multiprocessing.spawn does
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(queue, sleep))
    proc.start()
    return proc, queue.get(timeout=60)


def env_in_spawned_worker():
    proc, env = spawn_worker()
    proc.join()
    return env


def record(name, worker_env=None):
    folder = report_dir()
    if folder is None:
        return
    os.makedirs(folder, exist_ok=True)
    entry = {
        "case": name,
        "time": time.time(),
        "pid": os.getpid(),
        "devices": devices(),
        "env": visible_env(),
        "worker_env": worker_env,
    }
    with open(os.path.join(folder, f"{os.environ.get('MASTER_PORT', 'none')}.jsonl"), "a") as fh:
        fh.write(json.dumps(entry) + "\n")


@pytest.mark.parametrize("case", CASES)
def test_deep_ep_moe(case):
    record(f"ht{case}-start")
    if MODE == "sleep":
        spawn_worker(sleep=600)  # a worker that outlives nothing: the runner must stop it with us
        time.sleep(600)
    if MODE == "oom":
        hog = bytearray(400 * 2**20)  # zero-filled: every page is touched
        assert hog
    if MODE == "slow":
        time.sleep(SLOW_SECONDS)
    if MODE == "abort-once" and case == 1:
        marker = os.path.join(report_dir() or ".", "aborted-once")
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGABRT)  # as a GPU hang ends a ROCm process
    worker = env_in_spawned_worker()
    record(f"ht{case}-end", worker)
    assert worker.get(WATCHED) == "0", "the high-throughput workaround did not reach the spawned worker"
    if MODE == "fail-one" and case == 3:
        pytest.fail("stand-in failure in case 3")


@pytest.mark.parametrize("case", CASES)
def test_low_latency_deep_ep_moe(case):
    worker = env_in_spawned_worker()
    record(f"ll{case}", worker)
    assert worker.get(WATCHED) is None, "the high-throughput workaround leaked into low-latency tests"
