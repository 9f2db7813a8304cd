"""Every signal that can end rocmci ends its children first (issue 32, class 4): real processes, real signals.

Each child's signal disposition is set explicitly (preexec_fn), so these tests neither hang nor pass by luck
when pytest itself was started with SIGINT ignored (a script's background job) or SIGHUP ignored (nohup).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rocmci.errors import HANDLED, STOPPING
from tests.conftest import REPO
from tests.functional.test_host_runs import _stop_leftovers, _wait_for_workers, args, make_host, tagged_processes

PROGRAM = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]
INVOKE = [sys.executable, "-m", "invoke", "--search-root", str(REPO)]


def dispositions(ignored: tuple[int, ...] = ()):
    """preexec_fn: every signal rocmci handles at its default, but those in `ignored`; none blocked."""

    def apply() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)
        for signum in HANDLED:
            signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)

    return apply


@pytest.fixture
def host(tmp_path) -> dict:
    return make_host(tmp_path)


def _start(host: dict, command: list[str], ignored: tuple[int, ...] = ()) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update(host["env"])
    return subprocess.Popen(
        [*command, *args(host, "--mode", "high-throughput", mode="sleep")], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=dispositions(ignored),
    )  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM])
def test_a_signal_that_ends_rocmci_ends_the_host_run_first(host, sig):
    proc = _start(host, PROGRAM)
    try:
        _wait_for_workers(host, 2, proc)  # the workload and the worker it spawned
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        name = signal.Signals(sig).name
        assert (proc.returncode, err.strip().splitlines()[-1]) == (128 + sig, f"rocmci: stopped by {name}"), err
        assert "Traceback" not in err
        assert tagged_processes(host["tag"]) == []
    finally:
        _stop_leftovers(host, proc)


def test_sighup_through_invoke_ends_the_host_run_first(host):
    proc = _start(host, INVOKE)
    try:
        _wait_for_workers(host, 2, proc)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=60)
        assert (proc.returncode, err.strip().splitlines()[-1]) == (129, "rocmci: stopped by SIGHUP"), err
        assert tagged_processes(host["tag"]) == []
    finally:
        _stop_leftovers(host, proc)


def test_sigint_interrupts_rocmci_started_with_sigint_ignored(host):
    """A background job of a script inherits SIGINT ignored; Python then installs no handler of its own."""
    proc = _start(host, PROGRAM, ignored=(signal.SIGINT,))
    try:
        _wait_for_workers(host, 2, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert (proc.returncode, err.strip().splitlines()[-1]) == (130, "rocmci: interrupted"), err
        assert tagged_processes(host["tag"]) == []
    finally:
        _stop_leftovers(host, proc)


def test_nohup_keeps_sighup_ignored(host):
    """`nohup rocmci ...`: a hang-up is ignored on purpose; the run goes on until it is stopped otherwise."""
    proc = _start(host, PROGRAM, ignored=(signal.SIGHUP,))
    try:
        _wait_for_workers(host, 2, proc)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None and tagged_processes(host["tag"]), "SIGHUP ended a run started under nohup"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert tagged_processes(host["tag"]) == []
    finally:
        _stop_leftovers(host, proc)


STREAMED = textwrap.dedent("""
    import sys
    from rocmci import errors, process
    errors.raise_on_signals()
    child = [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"]
    process.stream(child, lambda line: print(line, flush=True))
""")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT])
def test_a_streamed_client_outside_a_process_group_is_stopped(sig):
    """A `docker build` or `docker run` client is streamed without a group of its own: stopped all the same."""
    proc = subprocess.Popen([sys.executable, "-c", STREAMED], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=dispositions())  # fmt: skip
    try:
        child = int(proc.stdout.readline())
        proc.send_signal(sig)
        proc.communicate(timeout=30)
        assert proc.returncode != 0
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{child}"), f"the streamed child survived {signal.Signals(sig).name}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_every_stopping_signal_is_handled_and_the_faults_are_not():
    assert {signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM} <= set(STOPPING)
    assert not {signal.SIGSEGV, signal.SIGABRT, signal.SIGPIPE, signal.SIGKILL} & set(HANDLED)
