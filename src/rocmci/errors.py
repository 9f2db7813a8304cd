"""Typed errors. Each kind owns an exit code; its message is one line that says what to do next.

Callers at the edge (tasks.py) turn these into an exit code and a single line on stderr;
nothing below them prints a traceback for an expected failure.
"""

from __future__ import annotations

import signal
import threading


class RocmciError(Exception):
    """Base class: an expected failure the user can act on."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.message.rstrip(".")
        line = f"{text}. {self.hint}" if self.hint else text
        return " ".join(line.split())  # one line, whatever a library put into the message


class FindingsError(RocmciError):
    """Validation ran and found errors in the input."""

    exit_code = 1


class UsageError(RocmciError):
    """A flag, setting or argument value is wrong."""

    exit_code = 2


class InputError(RocmciError):
    """An input file is unreadable, malformed or of the wrong shape."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message, hint=hint)


class EngineError(RocmciError):
    """The Docker engine is missing, not running or refused the request."""

    exit_code = 3


class BuildError(RocmciError):
    """An image build failed."""

    exit_code = 4


class PreflightError(RocmciError):
    """The host cannot run the requested workload (devices, archs, image)."""

    exit_code = 5


class WorkloadError(RocmciError):
    """A workload ran and did not pass; the exit code says how (see results.Outcome)."""

    def __init__(self, message: str, *, exit_code: int, hint: str | None = None) -> None:
        self.exit_code = exit_code
        super().__init__(message, hint=hint)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that `finally` blocks and KeyboardInterrupt handlers clean up
    (temporary files, containers); tasks.py reports it with one line and exit code 143 (128 + 15)."""

    exit_code = 143


def _terminated(signum, frame):
    raise Terminated()


def raise_on_sigterm() -> None:
    """Turn SIGTERM into Terminated in the main thread (Python delivers signals only there)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
