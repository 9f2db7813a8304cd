"""Stand-in for vLLM's tests/kernels/moe/test_deepep_moe.py; STANDIN_MODE picks the behaviour."""

import multiprocessing
import os
import time

import pytest

MODE = os.environ.get("STANDIN_MODE", "pass")
CASES = list(range(1, int(os.environ.get("STANDIN_CASES", "4")) + 1))
SLOW_SECONDS = float(os.environ.get("STANDIN_SLOW_SECONDS", "1.5"))


def _worker_env(queue):
    queue.put(os.environ.get("ROCPROFILER_REGISTER_ENABLED"))


def env_in_spawned_worker():
    ctx = multiprocessing.get_context("spawn")  # as torch.multiprocessing.spawn does
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker_env, args=(queue,))
    proc.start()
    value = queue.get(timeout=60)
    proc.join()
    return value


def _stamp(name):
    folder = "/rocmci-results/stamps"
    if os.path.isdir("/rocmci-results"):
        os.makedirs(folder, exist_ok=True)
        devices = ",".join(sorted(os.listdir("/dev/dri"))) if os.path.isdir("/dev/dri") else ""
        with open(f"{folder}/{os.environ.get('MASTER_PORT', 'none')}.txt", "a") as fh:
            fh.write(f"{name} {time.time()} {devices}\n")


@pytest.mark.parametrize("case", CASES)
def test_deep_ep_moe(case):
    _stamp(f"ht{case}-start")
    if MODE == "sleep":
        time.sleep(600)
    if MODE == "oom":
        hog = bytearray(400 * 2**20)  # zero-filled: every page is touched
        assert hog
    if MODE == "slow":
        time.sleep(SLOW_SECONDS)
    assert env_in_spawned_worker() == "0", "ROCPROFILER_REGISTER_ENABLED=0 did not reach the spawned worker"
    if MODE == "fail-one" and case == 3:
        pytest.fail("stand-in failure in case 3")
    _stamp(f"ht{case}-end")


@pytest.mark.parametrize("case", CASES)
def test_low_latency_deep_ep_moe(case):
    assert env_in_spawned_worker() is None, "the high-throughput workaround leaked into low-latency tests"
