"""Benchmark stand-in for vLLM's test_deepep_moe.py: BENCH_CASES cases per test function.

Each case does what a real case does on the host: it spawns one fresh interpreter per GPU (as
torch.multiprocessing.spawn does for its 2 ranks), each imports modules and burns BENCH_CPU_FRACTION of
the case length in CPU time, then waits out the rest of BENCH_CASE_SECONDS, standing in for GPU time.
So the cost per case is interpreter start-up, imports and CPU work that shards compete for, not only sleep.
"""

import multiprocessing
import os
import time

import pytest

CASES = range(int(os.environ.get("BENCH_CASES", "28")))
CASE_SECONDS = float(os.environ.get("BENCH_CASE_SECONDS", "20"))
CPU_FRACTION = float(os.environ.get("BENCH_CPU_FRACTION", "0.05"))
RANKS = 2  # multi_gpu_test(num_gpus=2)


def _rank(deadline):
    import decimal  # noqa: F401 - import work, as a real rank imports torch and vLLM
    import email.parser  # noqa: F401
    import json  # noqa: F401
    import unittest  # noqa: F401

    stop = time.process_time() + CPU_FRACTION * CASE_SECONDS
    n = 0
    while time.process_time() < stop:
        n = (n * 1103515245 + 12345) % 2**31
    time.sleep(max(0.0, deadline - time.monotonic()))


def _case():
    deadline = time.monotonic() + CASE_SECONDS
    ctx = multiprocessing.get_context("spawn")
    ranks = [ctx.Process(target=_rank, args=(deadline,)) for _ in range(RANKS)]
    for proc in ranks:
        proc.start()
    for proc in ranks:
        proc.join()
        assert proc.exitcode == 0


@pytest.mark.parametrize("case", CASES)
def test_deep_ep_moe(case):
    _case()


@pytest.mark.parametrize("case", CASES)
def test_low_latency_deep_ep_moe(case):
    _case()
