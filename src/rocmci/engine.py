"""The one module that talks to the Docker engine.

State and lifecycle (ping, version, image labels, container state, containers by label, removal) go
through the Docker SDK (`docker` package): typed answers instead of parsing CLI output. Builds and
workload containers go through the docker CLI with argument lists, never a shell: the exact argv is
what `--dry-run` prints, and the 20.10 client Debian ships can build with BuildKit, which the SDK
(legacy builder only) cannot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rocmci import labels as label
from rocmci.errors import EngineError

START_HINT = "start it (as root: dockerd --bridge=none --iptables=false &, or systemctl start docker) and retry"
# Debian's docker.io installs its client here; it builds with BuildKit without the buildx plugin.
DEBIAN_CLIENT = "/usr/bin/docker"
LABEL_KEY = label.MANAGED
CLI_PLUGIN_DIRS = (
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


def _run(argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 60) -> Completed:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except FileNotFoundError:
        raise EngineError(
            f"docker client {argv[0]!r} not found", hint="install docker.io or set ROCMCI_DOCKER"
        ) from None
    except subprocess.TimeoutExpired:
        raise EngineError(f"`{' '.join(argv[:3])}` did not answer within {timeout:.0f}s", hint=START_HINT) from None
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def _client_major(client: str) -> int | None:
    """Major version from `docker --version`, which, unlike `docker version`, does not ask the engine."""
    m = re.search(r"version (\d+)\.", _run([client, "--version"], timeout=20).stdout)
    return int(m.group(1)) if m else None


def _has_buildx(client: str) -> bool:
    """Whether the buildx plugin is installed where the docker CLI looks for plugins (no process needed)."""
    folders = [Path.home() / ".docker" / "cli-plugins", *map(Path, CLI_PLUGIN_DIRS)]
    return any((folder / "docker-buildx").exists() for folder in folders)


def pick_client(setting: str = "auto") -> str:
    """The client to use: the named one, or the first on PATH that can build with BuildKit."""
    if setting != "auto":
        return setting
    candidates = [c for c in (shutil.which("docker"), DEBIAN_CLIENT) if c and os.path.exists(c)]
    if not candidates:
        raise EngineError("no docker client found", hint="install Debian's docker.io (apt-get install docker.io)")
    for client in dict.fromkeys(candidates):
        major = _client_major(client)
        # Clients before 23 build with BuildKit when DOCKER_BUILDKIT=1; later ones need buildx.
        if (major is not None and major < 23) or _has_buildx(client):
            return client
    return candidates[0]


def _engine_error(stderr: str) -> EngineError | None:
    text = stderr.strip()
    if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
        return EngineError("the Docker engine is not running", hint=START_HINT)
    if "permission denied" in text and "docker.sock" in text:
        return EngineError(
            "no permission to use the Docker engine", hint="add yourself to the docker group or run as root"
        )
    return None


def _sdk_error(exc: Exception) -> EngineError:
    """One line for an SDK failure; the common ones get the same words and hints as the CLI's."""
    text = str(exc)
    if "Permission denied" in text or "PermissionError" in text:
        return EngineError(
            "no permission to use the Docker engine", hint="add yourself to the docker group or run as root"
        )
    if any(
        s in text for s in ("Connection refused", "No such file or directory", "Connection aborted", "FileNotFound")
    ):
        return EngineError("the Docker engine is not running", hint=START_HINT)
    return EngineError(f"the Docker engine refused the request: {text.splitlines()[0] if text else type(exc).__name__}")


class Engine:
    def __init__(self, client_setting: str = "auto") -> None:
        self._setting = client_setting

    @cached_property
    def client(self) -> str:
        return pick_client(self._setting)

    @cached_property
    def sdk(self):
        """The Docker SDK client for DOCKER_HOST (or the default socket); connecting is deferred to first use."""
        import docker

        try:
            return docker.DockerClient.from_env(timeout=60, version="auto")
        except docker.errors.DockerException as exc:
            raise _sdk_error(exc) from None

    def _call(self, fn: Callable[[], object]):
        import docker
        import requests

        try:
            return fn()
        except (docker.errors.NotFound, docker.errors.ImageNotFound):
            raise
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise _sdk_error(exc) from None

    def ping(self) -> bool:
        return bool(self._call(lambda: self.sdk.ping()))

    @property
    def build_env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_BUILDKIT": "1"}

    def cli(self, *args: str, timeout: float = 60, check: bool = True) -> Completed:
        done = _run([self.client, *args], timeout=timeout)
        if done.returncode != 0 and check:
            raise _engine_error(done.stderr) or EngineError(
                f"`docker {' '.join(args[:2])}` failed: {done.stderr.strip().splitlines()[-1:] or ['no output']}"
            )
        return done

    def server_version(self) -> str:
        return str(self._call(lambda: self.sdk.version()).get("Version", ""))

    def buildkit_works(self) -> tuple[bool, str]:
        """Build a one-line scratch image with BuildKit; needs no registry and no network."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="rocmci-probe-") as ctx:
            with open(os.path.join(ctx, "Dockerfile"), "w") as fh:
                fh.write("FROM scratch\nLABEL rocmci.probe=1\n")
            tag = "rocmci-probe:buildkit"
            done = _run(
                [self.client, "build", "--network", "none", "-q", "-t", tag, ctx], env=self.build_env, timeout=60
            )
        if done.returncode != 0:
            err = _engine_error(done.stderr)
            detail = err.message if err else (done.stderr.strip().splitlines() or ["failed"])[-1]
            return False, detail
        self.cli("rmi", "-f", tag, check=False)
        return True, f"BuildKit via {self.client}"

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """Labels of a local image, or None when there is no such image."""
        import docker

        try:
            image = self._call(lambda: self.sdk.images.get(ref))
        except docker.errors.NotFound:
            return None
        return dict(image.labels or {})

    def containers(self, label: str) -> list[str]:
        """Short ids of every container (running or not) with this label (`key=value` or `key`)."""
        # sparse: ids from the list call only; a container removed meanwhile cannot fail a later inspect.
        found = self._call(lambda: self.sdk.containers.list(all=True, filters={"label": label}, sparse=True))
        return [c.short_id for c in found]

    def _container_attrs(self, name: str) -> dict | None:
        import docker

        try:
            return self._call(lambda: self.sdk.api.inspect_container(name))
        except docker.errors.NotFound:
            return None

    def oom_killed(self, name: str) -> bool:
        """Whether the kernel's OOM killer ended the container (False when it is gone or the engine is)."""
        try:
            attrs = self._container_attrs(name)
        except EngineError:
            return False
        return bool(attrs and attrs.get("State", {}).get("OOMKilled"))

    def remove_container(self, name: str) -> None:
        """Remove it, running or not; a container that is already gone is fine, so is an engine that is."""
        import docker

        try:
            self._call(lambda: self.sdk.api.remove_container(name, force=True))
        except (docker.errors.NotFound, EngineError):
            pass

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None], *, env: dict[str, str] | None = None) -> int:
        """Run a long command (a build, a push), handing each line of its merged output to on_line; its exit code.

        The child is stopped if we are interrupted, so a Ctrl-C never leaves a build running.
        """
        from rocmci import process

        try:
            return process.stream(argv, on_line, env=env).returncode
        except FileNotFoundError:
            raise EngineError(f"docker client {argv[0]!r} not found", hint="install docker.io") from None
