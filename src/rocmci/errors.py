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


class Signalled(KeyboardInterrupt):
    """A signal that ends rocmci (SIGHUP, SIGQUIT, SIGUSR1, ...), raised like Ctrl-C in the main thread so that
    every `finally` and KeyboardInterrupt handler runs: children stopped, temporary files removed. The edge
    says `rocmci: stopped by SIGHUP` and exits 128 + the signal's number, as a shell reports a killed command."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = int(signum)
        self.exit_code = 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class Terminated(Signalled):
    """SIGTERM; tasks.py reports it with one line and exit code 143 (128 + 15)."""

    def __init__(self) -> None:
        super().__init__(signal.SIGTERM)


def _terminated(signum, frame):
    raise Terminated()


def _signalled(signum, frame):
    raise Signalled(signum)


# Signals whose default action ends the process (POSIX "T" and "A" of signal(7)) and that another process
# sends on purpose: a hang-up, SIGQUIT (Ctrl-\), SIGUSR1/2, timers, CPU limits. Without a handler they end
# rocmci at once and leave its children running. Not here: SIGKILL and SIGSTOP (cannot be caught), SIGPIPE
# and SIGXFSZ (Python ignores them and reports EPIPE/EFBIG as errors), and the faults a program raises on
# itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP), which a handler would only loop on.
STOPPING = tuple(
    getattr(signal, name)
    for name in ("SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR",
                 "SIGXCPU", "SIGSTKFLT")
    if hasattr(signal, name)
)  # fmt: skip
HANDLED = (signal.SIGINT, signal.SIGTERM, *STOPPING)


def raise_on_sigterm() -> None:
    """Turn SIGTERM into Terminated in the main thread (Python delivers signals only there)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)


def raise_on_signals() -> None:
    """The start-up of the rocmci process: every signal of HANDLED unwinds the main thread.

    SIGINT gets Python's own handler whatever the parent left it as: a shell starts a background job with
    SIGINT ignored, and Python then installs none, so nothing could interrupt rocmci. SIGTERM raises
    Terminated. Each of STOPPING raises Signalled, unless the parent ignored it on purpose (`nohup rocmci`
    keeps ignoring SIGHUP). Outside the main thread this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)
    for signum in STOPPING:
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _signalled)
