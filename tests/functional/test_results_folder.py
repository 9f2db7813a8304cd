"""A results folder the run cannot use is one `rocmci:` line naming the results folder setting, never `--out`.

Real runs in host mode (`--no-container`) on a fake GPU host (tests/functional/test_host_runs.py), with
ROCMCI_RESULTS_DIR pointing where no folder can be made or written: a file, a path under /proc or /sys,
a folder on a read-only mount, and a folder whose file writes fail (RLIMIT_FSIZE, as a full disk would).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.functional.test_host_runs import args, make_host

NAMED = "ROCMCI_RESULTS_DIR"


@pytest.fixture
def host(tmp_path):
    return make_host(tmp_path)


def run(host, results: str, *, preexec=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update(ROCMCI_IMAGE="unused", ROCMCI_RESULTS_DIR=results, ROCMCI_RUN_TIMEOUT="300")
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args(host, "--mode", "low-latency")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False, preexec_fn=preexec,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]
    assert "--out" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if NAMED in line]
    assert len(errors) == 1 and errors[0].startswith("rocmci: "), done.stderr[-2000:]
    assert done.stderr.rstrip().endswith(errors[0])  # the last word, not one line among others
    return errors[0]


def test_a_file_where_the_folder_should_be(host, tmp_path):
    (tmp_path / "taken").write_text("not a folder\n")
    done = run(host, str(tmp_path / "taken"))
    assert done.returncode == 2
    assert "is a file, not a folder" in one_line(done)
    assert (tmp_path / "taken").read_text() == "not a folder\n"


@pytest.mark.parametrize("where", ["/proc/rocmci-results", "/sys/rocmci-results", "/proc/self"])
def test_a_folder_under_a_kernel_file_system(host, where):
    done = run(host, where)
    assert done.returncode == 2
    assert "kernel file system" in one_line(done)
    assert not os.path.exists("/proc/rocmci-results") and not os.path.exists("/sys/rocmci-results")


def test_a_read_only_folder(host, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    mounted = False
    if os.access(folder, os.W_OK):
        # Root ignores mode bits; a read-only bind mount stops root's writes too (EROFS).
        subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
        mounted = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
    try:
        done = run(host, str(folder))
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)
    assert done.returncode == 2
    assert "cannot write" in one_line(done)


def _small_files():
    # What a full disk does to a write, without filling one: every write past 1 byte fails (EFBIG).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1))


def test_a_folder_that_takes_no_more_bytes(host, tmp_path):
    done = run(host, str(tmp_path / "full"), preexec=_small_files)
    assert done.returncode == 2, done.stdout[-1000:] + done.stderr[-2000:]
    assert "cannot write" in one_line(done)
