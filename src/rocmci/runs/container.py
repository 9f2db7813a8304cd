"""The one module that starts workload containers (and, in host mode, workload processes).

Specs are plain data and `run_argv` is pure, so what `--dry-run` prints is exactly what runs.
Every container gets a unique name and the rocmci label, and is removed on success, failure,
timeout and Ctrl-C alike.
"""

from __future__ import annotations

import grp
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmci import labels as label
from rocmci import process
from rocmci.engine import Completed, Engine
from rocmci.errors import EngineError, PreflightError
from rocmci.gpus import Gpu
from rocmci.process import Running

HF_HOME = "/root/.cache/huggingface"

# Where rocmci's `docker run` differs from the one in vLLM's run-amd-test.sh, and why. Keys are flags,
# volume targets and variable names; tests/unit/test_runner_parity.py reads the runner's command from
# the file, compares it with run_argv, and fails on any difference not listed here, and README lists these.
INTENDED_DIFFERENCES = {
    # Only in the runner.
    "-i": "rocmci streams the workload's output through a pipe and gives it no stdin",
    "-t": "no TTY: the output is logged and redacted line by line",
    "--rm": "rocmci inspects the container for an OOM kill first, then removes it itself, whatever happened",
    "TERM": "colour only when rocmci's own output is a colour terminal (pytest gets --color=yes then)",
    "FORCE_COLOR": "as TERM",
    "CLICOLOR_FORCE": "as TERM",
    "PY_COLORS": "as TERM",
    "VLLM_TARGET_DEVICE": "set per step: run.step sets VLLM_TARGET_DEVICE=cpu for a step without GPUs",
    # Only in rocmci.
    "--init": "an init process as PID 1, so a crash signal at teardown shows as exit 139 and is not swallowed",
    "--label": "rocmci finds and removes its own containers by label (and only those)",
    "--workdir": "the workspace named explicitly, not left to the image's WORKDIR",
    "/rocmci-results": "JUnit XML and reports are written to the host's results folder through this mount",
}


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
    ulimits: tuple[str, ...] = ()  # e.g. core=0:-1, as the runner disables core dumps
    cap_add: tuple[str, ...] = ()  # IPC_LOCK with the host's RDMA devices, as the runner adds it


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


def core_ulimit() -> str:
    """The runner's `--ulimit core=0:<hard>`: no core files, the host's hard limit kept (-1: unlimited)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    return f"core=0:{-1 if hard == resource.RLIM_INFINITY else hard}"


def rdma_flags(root: Path = Path("/")) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(devices, capabilities): the host's RDMA devices and IPC_LOCK when /dev/infiniband exists, as the runner."""
    if (root / "dev/infiniband").is_dir():
        return ((str(root / "dev/infiniband"), "/dev/infiniband"),), ("IPC_LOCK",)
    return (), ()


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
    for key, value in sorted({label.MANAGED: "1", **spec.labels}.items()):
        argv += ["--label", f"{key}={value}"]
    if spec.network:
        argv += ["--network", spec.network]
    for host, inside in spec.devices:
        argv += ["--device", host if host == inside else f"{host}:{inside}"]
    for cap in spec.cap_add:
        argv += ["--cap-add", cap]
    for gid in spec.group_add:
        argv += ["--group-add", gid]
    for limit in spec.ulimits:
        argv += ["--ulimit", limit]
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
    oom = False
    started = time.time()
    # No client at all is the engine's typed error (with its install hint), raised before anything starts.
    client = engine.client
    try:
        done = process.stream(
            run_argv(spec, client), on_line, env=env, timeout=timeout,
            stop=lambda: remove(engine, spec.name), running=running,
        )  # fmt: skip
        if not done.timed_out:
            oom = engine.oom_killed(spec.name)
    except (OSError, EngineError) as exc:
        # The client is missing, not executable or not a file: nothing ran, and that is what the result says.
        why = exc.strerror if isinstance(exc, OSError) else exc.message
        return RunResult(127, False, 0.0, started, f"docker client {client!r} could not be started: {why}")
    finally:
        remove(engine, spec.name)  # Ctrl-C, timeout or normal end: never leave it behind
    infra = None
    if done.returncode == 125 and not done.timed_out:
        infra = "docker could not start the container (exit 125)"
    return RunResult(done.returncode, done.timed_out, done.seconds, done.started, infra, oom)


def remove(engine: Engine, name: str) -> None:
    engine.remove_container(name)


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
    try:
        done = process.stream(argv, on_line, cwd=workdir, env=env, timeout=timeout, group=True, running=running)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        return RunResult(127, False, 0.0, started, f"cannot start {argv[0]!r} in {workdir}: {exc.strerror}")
    return RunResult(done.returncode, done.timed_out, done.seconds, done.started)


def leftovers(engine: Engine) -> list[str]:
    return engine.containers(f"{label.MANAGED}=1")


def probe(engine: Engine, image: str, argv: Sequence[str]) -> Completed:
    """A short throw-away container without network: a look inside an image.

    No --rm: with it the client waits for the engine's removal event, and a docker run that misses it
    hangs after the command ended (seen in CI, docker/for-linux#115); this one is removed by name instead."""
    name = container_name("probe")
    try:
        return engine.cli(
            "run",
            "--name",
            name,
            "--label",
            f"{label.MANAGED}=1",
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
    return probe(engine, image, ["test", "-e", path]).returncode == 0


def read_file(engine: Engine, image: str, path: str) -> str | None:
    done = probe(engine, image, ["cat", path])
    return done.stdout.strip() or None if done.returncode == 0 else None
