"""An interrupt test still works when the suite itself was started with SIGINT ignored.

A background job of a non-interactive shell (`pytest ... &` in a script, CI wrappers, some nohup set-ups)
starts with SIGINT ignored, and exec keeps an ignored disposition: a child rocmci would then have no
KeyboardInterrupt handler, and a test's SIGINT would do nothing. Interrupt tests therefore give their child
SIGINT's default disposition explicitly (tests.conftest.interruptible); this runs one of them that way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.conftest import REPO

# One SIGINT test of the suite, run by a pytest that was started with SIGINT ignored.
INTERRUPT_TEST = ("tests/integration/test_faults.py", "test_signal_to_rocmci_mid_run and interrupted")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_an_interrupt_test_passes_under_a_parent_that_ignores_sigint(engine, standin_image):
    # The set-up is what it claims: a Python started this way inherits the ignored SIGINT.
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"]
    seen = subprocess.run(probe, preexec_fn=_ignore_sigint, capture_output=True, text=True, timeout=60, check=True)
    assert seen.stdout.strip() == "True"
    path, selection = INTERRUPT_TEST
    env = {**os.environ, "REQUIRE_DOCKER_TESTS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path, "-k", selection],
        cwd=REPO, env=env, preexec_fn=_ignore_sigint, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout, done.stdout[-2000:]
