"""The one way rocmci runs a long child process and streams its output: builds, containers, host workloads.

Each line of the child's merged stdout/stderr goes to `on_line` (from a reader thread, so a timeout
can fire while the child is silent). Whatever happens (normal end, timeout, Ctrl-C, SIGTERM, an
error in the caller) the child is stopped before `stream` returns or raises: a build, a `docker run`
client or a workload's whole process group never outlives the command that started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL for a process group (or a lone child that ignores SIGTERM)
WAIT_AFTER_STOP = 30.0  # for the child to exit once it was asked to stop
THREADS_AFTER_STOP = 15.0  # for worker threads to finish their clean-up once everything was stopped


# Linux's limit on one argument or one NAME=value environment string of execve (MAX_ARG_STRLEN, 32 pages):
# past it execve fails with E2BIG ("Argument list too long") however small the rest is.
MAX_ARG_BYTES = 131072


def check_exec_sizes(argv: Sequence[str], env: dict[str, str] | None = None) -> None:
    """Refuse, before anything starts, a child whose argument or environment string execve would refuse (E2BIG):
    a step of thousands of commands is one `bash -c` word. One line naming the word, its size and the limit."""
    from rocmci.errors import UsageError

    def size(text: str) -> int:
        return len(text.encode("utf-8", "surrogateescape")) + 1  # with its NUL

    for index, word in enumerate(argv):
        if size(word) > MAX_ARG_BYTES:
            raise UsageError(
                f"argument {index} of `{os.path.basename(str(argv[0]))}` is {size(word):,} bytes; Linux takes at most "
                f"{MAX_ARG_BYTES:,} bytes in one argument (MAX_ARG_STRLEN)",
                hint="split the step's commands into several steps, or put them in a script the step runs",
            )
    for name, value in (env or {}).items():
        if size(f"{name}={value}") > MAX_ARG_BYTES:
            raise UsageError(
                f"environment variable {name} is {size(value):,} bytes; Linux takes at most {MAX_ARG_BYTES:,} bytes "
                "in one NAME=value string (MAX_ARG_STRLEN)",
                hint="split the step's commands into several steps, or put them in a script the step runs",
            )


@dataclass(frozen=True)
class Finished:
    returncode: int
    timed_out: bool
    seconds: float
    started: float  # wall clock, for reports


class Running:
    """What is running now, and how to stop each: the interrupt handler stops them all, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops: dict[int, Callable[[], None]] = {}
        self._stopping = False

    def add(self, stop: Callable[[], None]) -> int:
        """Register how to stop a child that has just started; once stop_all ran, it is stopped at once.

        A worker thread starts its child a moment before it can register it: an interrupt in between
        must not leave that child running after rocmci has exited.
        """
        with self._lock:
            key = id(stop)
            if not self._stopping:
                self._stops[key] = stop
                return key
        stop()
        return key

    def discard(self, key: int) -> None:
        with self._lock:
            self._stops.pop(key, None)

    def stop_all(self) -> None:
        with self._lock:
            self._stopping = True
            stops = list(self._stops.values())
        for stop in stops:
            try:
                stop()
            except Exception:  # noqa: BLE001, S112 - one child that cannot be stopped must not keep the rest running
                continue


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """While rocmci stops what it started, a second Ctrl-C or SIGTERM must not cut the clean-up short.

    Outside the main thread (where Python runs signal handlers) this does nothing. The clean-up it guards
    is bounded in time, so a user pressing Ctrl-C again waits seconds, not forever.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from rocmci.errors import HANDLED

    previous = {sig: signal.signal(sig, lambda *_: None) for sig in HANDLED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: a handler set outside Python, which cannot be put back from here
                signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM, SIGHUP, ... while native code that calls back into Python runs (minijinja renders a
    template in Rust and calls rocmci's finalizer): an exception raised inside such a callback becomes a Rust
    panic, not the interrupt. The first signal that came is delivered again once the block ends, to the
    handler that was in place; the block must be bounded (the render is, by its fuel).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from rocmci.errors import HANDLED

    came: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: came.append(signum)) for sig in HANDLED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)
        if came:
            signal.raise_signal(came[0])


def run_threads(
    targets: Sequence[Callable[[], None]], running: Running, after_stop: float = THREADS_AFTER_STOP
) -> None:
    """Run each target in a thread of its own and wait for all of them.

    On Ctrl-C, SIGTERM or any error while waiting: every child registered in `running` is stopped, the
    threads get `after_stop` seconds to finish their own clean-up, and the exception propagates.
    Waiting is on an Event each thread sets when it ends, not on Thread.join: a KeyboardInterrupt
    that lands inside join() on Python 3.11 marks a still-running thread as stopped (bpo-45274's
    recovery), and a later join() then returns at once, without waiting for that thread's clean-up.
    """
    done = [threading.Event() for _ in targets]

    def body(target: Callable[[], None], finished: threading.Event) -> None:
        try:
            target()
        finally:
            finished.set()

    threads = [threading.Thread(target=body, args=pair, daemon=True) for pair in zip(targets, done, strict=True)]
    try:
        for thread in threads:  # inside the try: an interrupt between two starts stops the first
            thread.start()
        for finished in done:
            while not finished.wait(0.2):  # short waits: a signal taken by another thread wakes no one
                pass
    except BaseException:
        with interrupts_deferred():
            running.stop_all()
            deadline = time.monotonic() + after_stop
            for thread, finished in zip(threads, done, strict=True):
                if thread.ident is not None:  # started
                    finished.wait(max(0.0, deadline - time.monotonic()))
        raise


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal every process of the group; False when none is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies waiting for their parent do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_group(pgid: int, grace: float = GRACE_SECONDS) -> None:
    """SIGTERM the whole group (the child and every worker it spawned), SIGKILL what is left after grace."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)


def _pump(stream, on_line: Callable[[str], None]) -> None:
    for line in stream:
        on_line(line.rstrip("\n"))


def _end(proc: subprocess.Popen, wait: float) -> None:
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stream(
    argv: Sequence[str],
    on_line: Callable[[str], None],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    group: bool = False,
    stop: Callable[[], None] | None = None,
    running: Running | None = None,
) -> Finished:
    """Run `argv` to completion, handing each output line to on_line.

    group: the child leads a new session and process group; stopping it stops the group, and what the
        child left behind is killed when it ends.
    stop: how to stop it on timeout or interrupt besides signalling the child (e.g. remove its container).
    running: where the caller's interrupt handler finds how to stop it.
    OSError from starting the child (no such program or folder) propagates: the caller names it.
    """
    check_exec_sizes(argv, env)
    started = time.time()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,  # a workload never reads rocmci's terminal (`docker run -i` gets EOF)
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=group,
    )
    pgid = proc.pid  # with start_new_session the child leads its own group

    def halt() -> None:
        if stop is not None:
            stop()
        if group:
            stop_group(pgid)
        elif proc.poll() is None:
            proc.terminate()
            # A `docker run` client passes SIGTERM on to its container and stays: it must not outlive us.
            try:
                proc.wait(timeout=GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()

    reader = threading.Thread(target=_pump, args=(proc.stdout, on_line), daemon=True)
    reader.start()
    key = running.add(halt) if running is not None else None
    timed_out = False
    try:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            halt()
            _end(proc, WAIT_AFTER_STOP)
    finally:
        if key is not None:
            running.discard(key)
        if proc.poll() is None:  # interrupted, or an error while waiting
            halt()
            _end(proc, 10)
        if group:  # also after a normal end: workers the child left behind go with it
            _signal_group(pgid, signal.SIGKILL)
        reader.join(timeout=10)
    return Finished(proc.returncode, timed_out, time.monotonic() - t0, started)


def run_captured(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,  # noqa: A002 - subprocess.run's name
) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True) that ends within `timeout` seconds whatever the child does.

    subprocess.run kills only its child on timeout, then waits for the output pipes to close: a `git fetch`
    whose transport helper or ssh still holds them waits for ever. Here the child leads a process group of
    its own, and on timeout, Ctrl-C or any signal that unwinds rocmci the whole group is killed before
    the pipes are read to their end. subprocess.TimeoutExpired propagates (the caller names what hung).
    """
    check_exec_sizes(argv, env)
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt, errors.Signalled
        _signal_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=WAIT_AFTER_STOP)  # every writer of the pipes is dead: they close now
        raise
    finally:
        _signal_group(proc.pid, signal.SIGKILL)  # what the child left behind in its group goes with it
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
