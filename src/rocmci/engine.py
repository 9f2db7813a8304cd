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

# What a user's machine needs (the service); how this project's own sandbox starts an engine by hand is
# .ci/run's business, not advice for users.
START_HINT = (
    "start the Docker service (e.g. `sudo systemctl start docker`) or set DOCKER_HOST to a running engine, then retry"
)
# Debian's docker.io installs its client here; it builds with BuildKit without the buildx plugin.
DEBIAN_CLIENT = "/usr/bin/docker"
LABEL_KEY = label.MANAGED
CLI_PLUGIN_DIRS = (
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)
DEFAULT_TIMEOUT = 30.0  # seconds for one engine call (SDK or a short CLI call): registry.py's engine_timeout
TIMEOUT_HINT = "the bound is the setting engine_timeout (ROCMCI_ENGINE_TIMEOUT)"


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


def _run(
    argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
    input: str | None = None,  # noqa: A002
) -> Completed:
    from rocmci import process

    try:
        proc = process.run_captured(argv, env=env, timeout=timeout, input=input)
    except FileNotFoundError:
        raise EngineError(
            f"docker client {argv[0]!r} not found", hint="install docker.io or set ROCMCI_DOCKER"
        ) from None
    except OSError as exc:  # not executable, a folder, a wrong binary format: the client, not rocmci
        raise client_error(argv[0], exc) from None
    except subprocess.TimeoutExpired:
        raise EngineError(
            f"`{' '.join(argv[:3])}` did not answer within {timeout:g} s", hint=f"{START_HINT}; {TIMEOUT_HINT}"
        ) from None
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def client_error(client: str, exc: OSError) -> EngineError:
    why = exc.strerror or type(exc).__name__
    return EngineError(
        f"docker client {client!r} cannot be run: {why}",
        hint="set ROCMCI_DOCKER to an executable docker client (or auto), or fix its permissions",
    )


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


ENGINE_SCHEMES = ("unix", "tcp", "http", "https", "ssh")  # what the Docker SDK and the 20.10 client connect to
HOST_HINT = "unset DOCKER_HOST, or give unix:///var/run/docker.sock, tcp://HOST:PORT or ssh://USER@HOST"


def check_docker_host(environ: dict[str, str] | os._Environ = os.environ) -> None:
    """DOCKER_HOST, read from the environment like a flag: a malformed one is one line (UsageError), checked
    whenever rocmci makes an Engine, dry runs included; the SDK would raise a ValueError traceback."""
    from urllib.parse import urlsplit

    from rocmci.errors import UsageError
    from rocmci.values import shown

    text = environ.get("DOCKER_HOST", "")
    if not text:
        return

    def bad(why: str) -> UsageError:
        return UsageError(f"DOCKER_HOST={shown(text)} is not an engine address: {why}", hint=HOST_HINT)

    if len(text) > 4096 or any(ord(c) < 0x21 or ord(c) == 0x7F for c in text):
        raise bad("it holds a blank or control character" if len(text) <= 4096 else "it is over 4096 characters")
    try:
        parts = urlsplit(text if "://" in text else f"tcp://{text}")
        port = parts.port  # ValueError past 65535 or not a number
        host = parts.hostname
    except ValueError as exc:
        raise bad(str(exc)) from None
    if parts.scheme not in ENGINE_SCHEMES:
        raise bad(f"unknown scheme {parts.scheme!r} (one of {', '.join(ENGINE_SCHEMES)})")
    if parts.scheme == "unix":
        if not parts.path:
            raise bad("no socket path")
        return
    if not host:
        raise bad("no host")
    if port == 0:
        raise bad("port 0")


class Engine:
    def __init__(self, client_setting: str = "auto", timeout: float = DEFAULT_TIMEOUT) -> None:
        check_docker_host()
        self._setting = client_setting
        self.timeout = float(timeout)
        self._hung: EngineError | None = None  # once the engine did not answer, no later call waits again

    @cached_property
    def client(self) -> str:
        return pick_client(self._setting)

    @cached_property
    def sdk(self):
        """The Docker SDK client for DOCKER_HOST (or the default socket); connecting is deferred to first use."""
        import docker
        import requests

        try:
            return docker.DockerClient.from_env(timeout=self.timeout, version="auto")
        except requests.exceptions.Timeout:
            raise self._not_answering() from None
        except docker.errors.DockerException as exc:
            if "timed out" in str(exc).lower() or "timeout" in str(exc).lower():
                raise self._not_answering() from None
            raise _sdk_error(exc) from None

    def _not_answering(self) -> EngineError:
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        from rocmci.values import shown

        self._hung = EngineError(
            f"the Docker engine at {shown(where)} did not answer within {self.timeout:g} s",
            hint=f"check the engine, or {TIMEOUT_HINT}",
        )
        return self._hung

    def _call(self, fn: Callable[[], object]):
        import docker
        import requests

        if self._hung is not None:
            raise self._hung
        try:
            return fn()
        except (docker.errors.NotFound, docker.errors.ImageNotFound):
            raise
        except requests.exceptions.Timeout:
            raise self._not_answering() from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if "timed out" in str(exc).lower():
                raise self._not_answering() from None
            raise _sdk_error(exc) from None

    def ping(self) -> bool:
        return bool(self._call(lambda: self.sdk.ping()))

    @property
    def build_env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_BUILDKIT": "1"}

    def cli(
        self, *args: str, timeout: float | None = None, check: bool = True, input: str | None = None  # noqa: A002
    ) -> Completed:
        """`docker ARGS`; `input` is its standard input (none otherwise); timeout: engine_timeout unless given."""
        done = _run([self.client, *args], timeout=self.timeout if timeout is None else timeout, input=input)
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
            detail = err.message if err else _client_words(done.stderr)
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
        except OSError as exc:
            raise client_error(argv[0], exc) from None

    # --- images: identity, pulls, what the builder can parse -------------------------------------

    def registry_digest(self, ref: str) -> str | None:
        """The digest a registry holds for `ref`, asked through the engine without pulling; None when the
        registry has no such tag (or cannot be reached: said by the caller as "no image")."""
        import docker

        try:
            data = self._call(lambda: self.sdk.images.get_registry_data(ref))
        except (docker.errors.NotFound, docker.errors.APIError, EngineError):
            return None
        return str(data.id) or None

    def image_attrs(self, ref: str) -> dict | None:
        """`docker image inspect` of a local image (Id, RepoDigests, Config), or None when there is none."""
        import docker

        try:
            return dict(self._call(lambda: self.sdk.api.inspect_image(ref)))
        except docker.errors.NotFound:
            return None

    def image_digest(self, ref: str) -> str | None:
        """An immutable name for what `ref` is now: its pinned digest, a registry digest, or the local image ID.

        A registry digest (RepoDigests) is preferred: it names the same image on every host. An image
        that was only built or imported here has none, and its ID (the sha256 of its config) is
        content-addressed too. None when the engine holds no such image.
        """
        if "@sha256:" in ref:
            return ref.rsplit("@", 1)[1]
        attrs = self.image_attrs(ref)
        if attrs is None:
            return None
        repo = _repository(ref)
        for pinned in attrs.get("RepoDigests") or ():
            if _repository(pinned) == repo:
                return pinned.rsplit("@", 1)[1]
        return str(attrs.get("Id") or "") or None

    def pull(self, ref: str, timeout: float = 3600) -> None:
        done = self.cli("pull", "--quiet", ref, timeout=timeout, check=False)
        if done.returncode != 0:
            raise _engine_error(done.stderr) or EngineError(
                f"docker pull {ref} failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}",
                hint="check the name and registry access, or drop --pull to use the local image",
            )

    def parses(self, dockerfile: str) -> tuple[bool, str]:
        """Whether the builder `docker build` reaches accepts this Dockerfile's syntax.

        The probe is built for real and fails on purpose right after parsing (a missing file, an
        unreachable URL, a command on an empty image): only a parse error counts as "cannot", so
        the answer is the builder's own, whatever its version. Nothing is created, nothing is fetched.
        """
        import tempfile

        with tempfile.TemporaryDirectory(prefix="rocmci-probe-") as ctx:
            with open(os.path.join(ctx, "Dockerfile"), "w", encoding="utf-8") as fh:
                fh.write(dockerfile)
            done = _run([self.client, "build", "--network", "none", "-q", ctx], env=self.build_env, timeout=60)
        text = done.stderr + done.stdout
        err = _engine_error(text)
        if err is not None:
            raise err
        if _NO_BUILDER.search(text):  # the client never reached a builder: no answer about the file at all
            raise EngineError(f"{self.client} cannot build with BuildKit: {_client_words(text)}", hint=NO_BUILDER_HINT)
        m = _PARSE_ERROR.search(text)
        return (False, m.group(0).strip()) if m else (True, "accepted")

    def builder(self) -> tuple[str, str] | None:
        """The active buildx builder (name, driver), or None when the client has no buildx."""
        if not _has_buildx(self.client):
            return None
        done = _run([self.client, "buildx", "inspect"], timeout=30)
        return parse_buildx_inspect(done.stdout) if done.returncode == 0 else None


# Docker >= 23 with DOCKER_BUILDKIT=1 and no buildx plugin: "ERROR: BuildKit is enabled but the buildx component
# is missing or broken." Every build fails in its first second, whatever the Dockerfile.
_NO_BUILDER = re.compile(r"buildx component is missing|BuildKit is enabled but", re.I)
NO_BUILDER_HINT = ("install the buildx plugin (docker-buildx-plugin / docker-buildx), or use a docker client older "
                   "than 23 (set ROCMCI_DOCKER)")  # fmt: skip


def _client_words(text: str) -> str:
    """The client's own line: the one naming the builder problem, else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = next((line for line in lines if _NO_BUILDER.search(line)), None)
    return named or (lines[-1] if lines else "failed")


_PARSE_ERROR = re.compile(r"(?:dockerfile parse error|unknown instruction|Unknown flag)[^\n]*", re.I)


def parse_buildx_inspect(text: str) -> tuple[str, str] | None:
    """Name and driver from `docker buildx inspect` (its first "Name:" and "Driver:" lines)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("Name", "Driver") and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return (fields["Name"], fields["Driver"]) if {"Name", "Driver"} <= fields.keys() else None


def _repository(ref: str) -> str:
    """The repository part of a reference: without @digest and :tag (a registry port stays)."""
    name = ref.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
