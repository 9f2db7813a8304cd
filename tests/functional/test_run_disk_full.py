"""A disk that fills during a host-mode run: one `rocmci:` line naming the results folder setting, exit 2
(InputError, errors.py), the workload stopped and no log left behind.

The results folder is a 64 kB tmpfs (needs root: mount); prepare_folder's check passes before the run, then
the stand-in workload's output (PYTHONVERBOSE: every import it makes) fills it while the test sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.conftest import REPO
from tests.functional.test_host_runs import args, make_host, tagged_processes
from tests.integration.test_faults import small_disk  # noqa: F401 (a fixture: a 64 kB tmpfs)


def test_a_disk_that_fills_during_the_run_is_one_line_and_stops_the_workload(small_disk, tmp_path):  # noqa: F811
    host = make_host(tmp_path)
    results = small_disk / "results"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update({"ROCMCI_IMAGE": "unused", "ROCMCI_RESULTS_DIR": str(results), "ROCMCI_RUN_TIMEOUT": "300"})
    # mode=sleep: the test sleeps 600 s, so only rocmci stopping it ends the run in time.
    argv = args(host, "--mode", "high-throughput", "--env", "PYTHONVERBOSE=1", mode="sleep")
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "invoke", "--search-root", str(REPO), *argv],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        for pid in tagged_processes(host["tag"]):  # the sleeping workload rocmci failed to stop
            os.kill(pid, signal.SIGKILL)
        raise
    assert done.returncode == 2, done.stderr[-3000:]
    assert time.monotonic() - started < 120
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rocmci: {results}: cannot write the workload log during the run: No space left on device")
    assert "setting results_dir, ROCMCI_RESULTS_DIR" in last and "every workload was stopped" in last
    assert [line for line in done.stderr.splitlines() if "cannot write" in line] == [last]
    assert list(results.iterdir()) == []  # the cut log is removed, no JUnit or summary was written
    deadline = time.monotonic() + 10
    while tagged_processes(host["tag"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged_processes(host["tag"]) == []
