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
    try:
        timed_out = _wait(proc, reader, timeout, lambda: remove(engine, spec.name))
        if not timed_out:
            oom = _oom_killed(engine, spec.name)
    finally:
        if proc.poll() is None:
            proc.terminate()
        remove(engine, spec.name)  # Ctrl-C, timeout or normal end: never leave it behind
    code = proc.returncode
    infra = None
    if code == 125 and not timed_out:
        infra = "docker could not start the container (exit 125)"
    return RunResult(code, timed_out, time.monotonic() - t0, started, infra, oom)


def _oom_killed(engine: Engine, name: str) -> bool:
    try:
        done = engine.cli("inspect", "--format", "{{.State.OOMKilled}}", name, check=False, timeout=30)
    except EngineError:
        return False
    return done.stdout.strip() == "true"


def remove(engine: Engine, name: str) -> None:
    engine.cli("rm", "-f", name, check=False, timeout=60)


def run_host(
    argv: Sequence[str], *, workdir: str, env: dict[str, str], timeout: float, on_line: Callable[[str], None]
) -> RunResult:
    """Host mode: the same workload without a container, for steps that already run inside the image."""
    started = time.time()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=workdir,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except (FileNotFoundError, NotADirectoryError) as exc:
        return RunResult(127, False, 0.0, started, f"cannot start {argv[0]!r} in {workdir}: {exc.strerror}")
    reader = threading.Thread(target=_pump, args=(proc.stdout, on_line), daemon=True)
    reader.start()

    def stop() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    try:
        timed_out = _wait(proc, reader, timeout, stop)
    finally:
        if proc.poll() is None:
            stop()
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
