"""A signal in rocmci's start-up (issue 32, class 4): from the first import of the package by a console script,
Ctrl-C and SIGTERM are one line and the documented code, before main() takes the signals over; the pre-commit
hook (rocmci-validate) ends the same way while it reads files. A library import keeps Python's own handling.

The signal is sent by the child itself at a fixed point (no timing race): right after `import rocmci`, while
the rest of the command's modules would still be loading.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_INSTALLED

# The child's own rocmci: the tree's, or under `nox -s installed` the wheel this interpreter has.
CHILD_ENV = {**os.environ, **({} if TEST_INSTALLED else {"PYTHONPATH": str(REPO / "src")})}


def default_dispositions() -> None:
    """In the child: the signals sent here at their defaults, whatever this suite was started with (`nohup`
    ignores SIGHUP, a script's background job SIGINT), so what is tested is rocmci's handling, not the parent's."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)

# What pip's launcher does, then a signal before main() runs: the early handler must end the process.
LAUNCHER = """import sys, os, signal, time
import rocmci
os.kill(os.getpid(), {signum})
time.sleep(20)
print("not stopped")
"""


def launch(tmp_path: Path, name: str, signum: int) -> subprocess.CompletedProcess:
    script = tmp_path / name
    script.write_text(LAUNCHER.format(signum=int(signum)))
    return subprocess.run([sys.executable, str(script)], env=CHILD_ENV, capture_output=True, text=True, timeout=60,
                          preexec_fn=default_dispositions)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "signum", "line", "code"),
    [("rocmci", signal.SIGINT, "rocmci: interrupted", 130), ("rocmci", signal.SIGTERM, "rocmci: terminated", 143),
     ("rocmci-validate", signal.SIGINT, "rocmci-validate: interrupted", 130)],
)  # fmt: skip
def test_a_signal_while_the_console_script_imports_is_one_line(tmp_path, name, signum, line, code):
    done = launch(tmp_path, name, signum)
    assert (done.returncode, done.stderr, done.stdout) == (code, line + "\n", "")


def test_a_library_import_keeps_pythons_handling(tmp_path):
    done = launch(tmp_path, "tool.py", signal.SIGINT)
    assert done.returncode != 130 and "KeyboardInterrupt" in done.stderr


@pytest.mark.parametrize(("signum", "line", "code"), [(signal.SIGINT, "interrupted", 130),
                                                      (signal.SIGTERM, "terminated", 143),
                                                      (signal.SIGHUP, "stopped by SIGHUP", 129)])  # fmt: skip
def test_the_hook_interrupted_while_it_reads_is_one_line(tmp_path, signum, line, code):
    """rocmci-validate's main(), in process, with the signal raised while it checks the files."""
    probe = (
        "import os, signal, sys\n"
        "from rocmci import hook\n"
        "real = hook.check_files\n"
        f"hook.check_files = lambda args: (os.kill(os.getpid(), {int(signum)}), real(args))[1]\n"
        "sys.exit(hook.main(sys.argv[1:]))\n"
    )
    steps = tmp_path / "test-amd.yaml"
    steps.write_text("steps: []\n")
    done = subprocess.run([sys.executable, "-c", probe, str(steps)], env=CHILD_ENV, capture_output=True, text=True,
                          timeout=60, preexec_fn=default_dispositions)  # fmt: skip
    assert (done.returncode, done.stderr) == (code, f"rocmci-validate: {line}\n")
