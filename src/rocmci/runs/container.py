"""The one module that starts workload containers (and, in host mode, workload processes).

Specs are plain data and `run_argv` is pure, so what `--dry-run` prints is exactly what runs.
Every container gets a unique name and the rocmci label, and is removed on success, failure,
timeout and Ctrl-C alike.
"""

from __future__ import annotations

import grp
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmci.engine import LABEL_KEY, Completed, Engine
from rocmci.errors import EngineError, PreflightError
from rocmci.gpus import Gpu

HF_HOME = "/root/.cache/huggingface"


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    readonly: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    argv: tuple[str, ...]
    workdir: str
    env: dict[str, str] = field(default_factory=dict)  # values we set; printed by --dry-run
    pass_env: tuple[str, ...] = ()  # host variables passed by name only: values never leave the host env
    devices: tuple[tuple[str, str], ...] = ()  # (host path, container path)
    group_add: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    shm_size: str = "16g"
    memory: str | None = None  # --memory limit, e.g. "64g"; None: no limit
    network: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    name: str = ""


def container_name(prefix: str) -> str:
    return f"rocmci-{prefix}-{uuid.uuid4().hex[:10]}"


def device_flags(gpus: Sequence[Gpu], root: Path = Path("/")) -> tuple[tuple[str, str], ...]:
    """/dev/kfd plus exactly the chosen GPUs' render nodes; the container sees them renumbered from 0."""
    devices = [(str(root / "dev/kfd"), "/dev/kfd")]
    if gpus:
        for gpu in gpus:
            if gpu.render_node is None:
                raise PreflightError(f"GPU {gpu.index} ({gpu.arch}) has no render node in KFD sysfs")
            devices.append((str(root / gpu.render_node.lstrip("/")), gpu.render_node))
    else:
        devices.append((str(root / "dev/dri"), "/dev/dri"))  # no GPU list known: all of them
    return tuple(devices)


def host_gids(names: Sequence[str] = ("render", "video")) -> tuple[str, ...]:
    """Numeric gids, because the image's /etc/group need not know the host's group names."""
    out = []
    for name in names:
        try:
            out.append(str(grp.getgrnam(name).gr_gid))
        except KeyError:
            continue
    return tuple(out)


def run_argv(spec: ContainerSpec, client: str) -> list[str]:
    # No --rm: the container is inspected (OOM kill?) and then removed by us, whatever happened.
    argv = [client, "run", "--init", "--name", spec.name]
    for key, value in sorted({LABEL_KEY: "1", **spec.labels}.items()):
        argv += ["--label", f"{key}={value}"]
    if spec.network:
        argv += ["--network", spec.network]
    for host, inside in spec.devices:
        argv += ["--device", host if host == inside else f"{host}:{inside}"]
    for gid in spec.group_add:
        argv += ["--group-add", gid]
    if spec.devices:
        argv += ["--security-opt", "seccomp=unconfined"]
    argv += ["--shm-size", spec.shm_size]
    if spec.memory:
        argv += ["--memory", spec.memory]
    for mount in spec.mounts:
        argv += ["--volume", f"{mount.host}:{mount.container}{':ro' if mount.readonly else ''}"]
    for key, value in spec.env.items():
        argv += ["--env", f"{key}={value}"]
    for name in spec.pass_env:
        argv += ["--env", name]
    argv += ["--workdir", spec.workdir, spec.image, *spec.argv]
    return argv


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    timed_out: bool
    seconds: float
    started: float
    infra_error: str | None = None
    oom_killed: bool = False


def _pump(stream, on_line: Callable[[str], None]) -> None:
    for line in stream:
        on_line(line.rstrip("\n"))


class Running:
    """What is running now, and how to stop each: the interrupt handler stops them all, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops: dict[int, Callable[[], None]] = {}

    def add(self, stop: Callable[[], None]) -> int:
        with self._lock:
            key = id(stop)
            self._stops[key] = stop
            return key

    def discard(self, key: int) -> None:
        with self._lock:
            self._stops.pop(key, None)

    def stop_all(self) -> None:
        with self._lock:
            stops = list(self._stops.values())
        for stop in stops:
            stop()


def _wait(proc: subprocess.Popen, reader: threading.Thread, timeout: float, stop: Callable[[], None]) -> bool:
    """Wait for the process; on timeout call stop() and return True."""
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        stop()
        timed_out = True
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    return timed_out


def run_container(
    spec: ContainerSpec,
    engine: Engine,
    *,
    timeout: float,
    on_line: Callable[[str], None],
    env: dict[str, str] | None = None,
    running: Running | None = None,
) -> RunResult:
    """Run to completion; `env` is the docker client's environment (where pass-by-name values come from)."""
    argv = run_argv(spec, engine.client)
    started = time.time()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
        )
    except FileNotFoundError:
        raise EngineError(f"docker client {engine.client!r} not found") from None
    reader = threading.Thread(target=_pump, args=(proc.stdout, on_line), daemon=True)
    reader.start()
    oom = False
    key = (running or Running()).add(lambda: remove(engine, spec.name))
    try:
        timed_out = _wait(proc, reader, timeout, lambda: remove(engine, spec.name))
        if not timed_out:
            oom = engine.oom_killed(spec.name)
    finally:
        if running is not None:
            running.discard(key)
        if proc.poll() is None:
            proc.terminate()
        remove(engine, spec.name)  # Ctrl-C, timeout or normal end: never leave it behind
    code = proc.returncode
    infra = None
    if code == 125 and not timed_out:
        infra = "docker could not start the container (exit 125)"
    return RunResult(code, timed_out, time.monotonic() - t0, started, infra, oom)


def remove(engine: Engine, name: str) -> None:
    engine.remove_container(name)


GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL for a host-mode process group


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal every process of the group; False when none is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_group(pgid: int, grace: float = GRACE_SECONDS) -> None:
    """SIGTERM the whole group (the workload and every worker it spawned), SIGKILL what is left after grace."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)


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


def run_host(
    argv: Sequence[str],
    *,
    workdir: str,
    env: dict[str, str],
    timeout: float,
    on_line: Callable[[str], None],
    running: Running | None = None,
) -> RunResult:
    """Host mode: the workload as a process of this host, for steps that already run inside the image.

    `env` is the whole environment of the workload. It runs in a session and process group of its
    own, so a timeout, Ctrl-C or SIGTERM stops it and every worker it spawned, and nothing is left.
    """
    started = time.time()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        return RunResult(127, False, 0.0, started, f"cannot start {argv[0]!r} in {workdir}: {exc.strerror}")
    reader = threading.Thread(target=_pump, args=(proc.stdout, on_line), daemon=True)
    reader.start()
    pgid = proc.pid  # start_new_session: the workload leads its own group

    key = (running or Running()).add(lambda: stop_group(pgid))
    try:
        timed_out = _wait(proc, reader, timeout, lambda: stop_group(pgid))
    finally:
        if running is not None:
            running.discard(key)
        # Also after a normal end: workers the workload left behind go with it.
        _signal_group(pgid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
    return RunResult(proc.returncode, timed_out, time.monotonic() - t0, started)


def leftovers(engine: Engine) -> list[str]:
    return engine.containers(f"{LABEL_KEY}=1")


def _probe(engine: Engine, image: str, argv: Sequence[str]) -> Completed:
    name = container_name("probe")
    try:
        return engine.cli(
            "run",
            "--rm",
            "--name",
            name,
            "--label",
            f"{LABEL_KEY}=1",
            "--network",
            "none",
            image,
            *argv,
            check=False,
            timeout=120,
        )
    finally:
        remove(engine, name)


def file_exists(engine: Engine, image: str, path: str) -> bool:
    return _probe(engine, image, ["test", "-e", path]).returncode == 0


def read_file(engine: Engine, image: str, path: str) -> str | None:
    done = _probe(engine, image, ["cat", path])
    return done.stdout.strip() or None if done.returncode == 0 else None
