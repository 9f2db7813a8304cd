"""Running one Buildkite job of a step: vLLM's runner as an agent of the step's pool would run it.

Docker-path steps: the step's command (`bash .buildkite/scripts/hardware_ci/run-amd-test.sh`) runs in
the checkout with the agent's shell and job env, the stand-ins of runs/standins.py first on its PATH.
The runner decides everything (refusals, the container, its timeout, exit codes); rocmci's `docker`
adds only RUNNER_DIFFERENCES. A dry run executes the same runner with every host tool a stand-in and
prints the `docker run` it asked for: exact by construction.

Native steps: the pod's container (runs/pod.py) runs the runner inside, in native mode, as in CI.
"""

from __future__ import annotations

import contextlib
import getpass
import grp
import os
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmci import labels as label
from rocmci import process
from rocmci.engine import Engine
from rocmci.errors import UsageError
from rocmci.runs import pod as podmod
from rocmci.runs import standins
from rocmci.runs.agent import AGENT_SHELL, Job
from rocmci.runs.container import RunResult

RUNNER = Path(".buildkite/scripts/hardware_ci/run-amd-test.sh")
TRACE_SECONDS = 120  # a dry run's runner with stand-ins takes well under a second; a hung one is stopped
# Where the `docker run` rocmci starts for a docker-path step differs from the runner's, and why.
RUNNER_DIFFERENCES = {
    "--cidfile": "proof that the container was created: a run whose container never existed is no pass",
    "--label": "rocmci finds and removes its own containers by label (rocmci.job), and only those",
    "/rocmci-results": "a mount of the results folder, for JUnit XML and reports written there",
    "ROCM_DOCKER_TTY=0": "the runner's own switch: rocmci logs and redacts the output line by line, so no TTY",
    "docker pull": "rocmci pulls before the job (--pull, or a registry image missing here); "
    "a local image is used as it is",
    "HOME": "a folder under results/agent, whose huggingface/ is the hf_cache setting "
    "(the runner mounts ~/huggingface)",
    "--env NAME": "each --env NAME=VALUE given to rocmci reaches the container by name (its value is never printed)",
    "checkout": "the job runs in results/jobs/<job id>/checkout, whose entries link to your checkout: what the runner "
    "writes there (its failure diagnostics under artifacts/) lands in results, not in your checkout",
}
# Host variables an agent's job does not inherit: another job's ids, and rocmci's own.
_NOT_INHERITED = ("BUILDKITE_", "ROCMCI_")


@dataclass(frozen=True)
class Place:
    """Where a job runs on this host."""

    checkout: Path  # the vLLM checkout whose runner runs (BUILDKITE_BUILD_CHECKOUT_PATH)
    results: Path  # the results folder (resolved)
    hf_cache: str
    root: Path = Path("/")  # --host-root: a stand-in host's /dev and /etc/group
    client: str = "docker"
    network: str | None = "host"
    given: tuple[tuple[str, str], ...] = ()  # --env NAME=VALUE: to the container by name


def runner_of(checkout: Path) -> Path | None:
    path = checkout / RUNNER
    return path if path.is_file() else None


def render_gid(root: Path) -> str | None:
    """The render group's gid: the host's, or a stand-in host's etc/group."""
    if root == Path("/"):
        try:
            return str(grp.getgrnam("render").gr_gid)
        except KeyError:
            return None
    with contextlib.suppress(OSError):
        for line in (root / "etc/group").read_text(encoding="utf-8").splitlines():
            parts = line.split(":")
            if len(parts) >= 3 and parts[0] == "render":
                return parts[2]
    return None


def job_checkout(place: Place, job_id: str) -> Path:
    return place.results / "jobs" / job_id / "checkout"


def shadow_checkout(checkout: Path, folder: Path) -> Path:
    """A folder whose entries link to the checkout's (all but artifacts/): the runner reads the checkout's
    files, and what it writes below its checkout root stays here."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in checkout.iterdir():
        if entry.name != "artifacts" and not (folder / entry.name).is_symlink():
            (folder / entry.name).symlink_to(entry)
    return folder


def agent_env(job: Job, place: Place, work: Path, checkout: Path, render: str, *, trace: bool,
              environ: Mapping[str, str]) -> dict[str, str]:  # fmt: skip
    """The runner's environment: the agent host's (less other jobs' ids), the job's, and the stand-ins'.
    `work` holds the stand-ins and their record; `checkout` is where the job runs (shadow_checkout)."""
    agent_dir = (work if trace else place.results) / "agent"
    job_dir = place.results / "jobs" / job.env.get("BUILDKITE_JOB_ID", "job")
    env = {k: v for k, v in environ.items() if not k.startswith(_NOT_INHERITED)}
    env.update(job.env)
    env.update(dict(place.given))
    env.update(
        {
            "HOME": str(agent_dir / "home"),
            "BUILDKITE_BUILD_CHECKOUT_PATH": str(checkout),
            "PATH": f"{work / 'bin'}:{environ.get('PATH', '/usr/bin:/bin')}",
            "ROCM_DOCKER_TTY": "0",
            "BUILDKITE_AGENT_META_DATA_RENDER_DEVICES": render,
            "ROCMCI_MODE": "trace" if trace else "run",
            "ROCMCI_TRACE": str(work / "trace"),
            "ROCMCI_CIDFILE": str(job_dir / "cid"),  # a dry run writes nothing: its docker starts nothing
            "ROCMCI_JOB": job.env.get("BUILDKITE_JOB_ID", ""),
            "ROCMCI_RESULTS": str(place.results),
            "ROCMCI_AGENT_DIR": str(job_dir / "agent"),
            "ROCMCI_DOCKER": place.client,
            "ROCMCI_PASS_ENV": " ".join(name for name, _ in place.given),
        }
    )
    if place.root != Path("/"):
        env["ROCMCI_HOST_ROOT"] = str(place.root)
    gid = render_gid(place.root)
    if trace or place.root != Path("/"):
        # A dry run on a host without the group shows the name: docker resolves it in the image.
        env["ROCMCI_RENDER_GID"] = gid or "render"
    return env


def _home(place: Place) -> None:
    """HOME for the runner: its ~/huggingface is the hf_cache setting."""
    home = place.results / "agent" / "home"
    home.mkdir(parents=True, exist_ok=True)
    link = home / "huggingface"
    target = Path(os.path.expanduser(place.hf_cache)).resolve()
    target.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    link.symlink_to(target)


@dataclass(frozen=True)
class Trace:
    exit_code: int
    output: list[str]
    calls: list[standins.Call]

    def runs(self) -> list[tuple[str, ...]]:
        """The `docker run` commands rocmci's docker would start, in order."""
        return [c.argv for c in self.calls if c.kind == "exec"]

    def timeouts(self) -> list[tuple[str, ...]]:
        return [c.argv for c in self.calls if c.kind == "call" and c.argv[:1] == ("timeout",)]


def trace(job: Job, place: Place, render: str, *, docker_exit: int = 0, environ=None) -> Trace:
    """Execute the checkout's runner with every host tool a stand-in: what would it run?"""
    environ = os.environ if environ is None else environ
    with tempfile.TemporaryDirectory(prefix="rocmci-trace-") as scratch:
        work = Path(scratch)
        standins.write(work / "bin", host_tools=True)
        checkout = shadow_checkout(place.checkout, work / "checkout")
        (work / "agent" / "home").mkdir(parents=True)
        env = agent_env(job, place, work, checkout, render, trace=True, environ=environ)
        env["ROCMCI_TRACE_EXIT"] = str(docker_exit)
        process.check_exec_sizes([*AGENT_SHELL, job.command], env)  # refused before the trace, not E2BIG in it
        try:
            done = subprocess.run(
                [*AGENT_SHELL, job.command], cwd=checkout, env=env, stdin=subprocess.DEVNULL,
                capture_output=True, text=True, errors="replace", timeout=TRACE_SECONDS, start_new_session=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise UsageError(
                f"the runner {RUNNER} did not finish within {TRACE_SECONDS} s under rocmci's stand-ins",
                hint="run it by hand to see where it waits",
            ) from exc
        output = (done.stdout + done.stderr).splitlines()
        # The runner mounts $(realpath ~)/huggingface: in a run that is results/agent/home's.
        home, real_home = str(work / "agent" / "home"), str(place.results / "agent" / "home")
        calls = [standins.Call(c.kind, tuple(w.replace(home, real_home) for w in c.argv))
                 for c in standins.read(work / "trace")]  # fmt: skip
        return Trace(done.returncode, output, calls)


def remove_job_containers(engine: Engine, job_id: str) -> None:
    for name in engine.containers(f"{label.JOB}={job_id}"):
        engine.remove_container(name)


def run_on_host(job: Job, place: Place, render: str, engine: Engine, *, timeout: float,
                on_line: Callable[[str], None], running=None, environ=None) -> RunResult:  # fmt: skip
    """A docker-path job: the runner on this host, as the agent runs it; its containers removed whatever happens."""
    environ = os.environ if environ is None else environ
    started = time.time()
    _home(place)
    job_id = job.env.get("BUILDKITE_JOB_ID", "")
    checkout = shadow_checkout(place.checkout, job_checkout(place, job_id))
    with tempfile.TemporaryDirectory(prefix="rocmci-job-") as scratch:
        work = Path(scratch)
        standins.write(work / "bin", host_tools=place.root != Path("/"))
        env = agent_env(job, place, work, checkout, render, trace=False, environ=environ)
        cidfile = Path(env["ROCMCI_CIDFILE"])
        cidfile.parent.mkdir(parents=True, exist_ok=True)
        cidfile.unlink(missing_ok=True)  # docker refuses an existing one (a retried job)
        try:
            done = process.stream(
                [*AGENT_SHELL, job.command], on_line, cwd=str(checkout), env=env, timeout=timeout,
                group=True, stop=lambda: remove_job_containers(engine, job_id), running=running,
            )  # fmt: skip
        finally:
            remove_job_containers(engine, job_id)
        started_any = cidfile.is_file() and cidfile.read_text(encoding="utf-8").strip()
        asked = any(c.kind == "exec" for c in standins.read(work / "trace"))
    infra = None
    if asked and not started_any and not done.timed_out:
        infra = f"the runner's docker run created no container (client {place.client!r})"
    return RunResult(done.returncode, done.timed_out, done.seconds, started, infra)


def pod_host(job: Job, place: Place, gpus, *, image: str | None, standin: Path) -> podmod.Host:
    name = f"rocmci-pod-{uuid.uuid4().hex[:10]}"
    return podmod.Host(
        client=place.client, name=name, node=socket.gethostname() or getpass.getuser(), gpus=tuple(gpus),
        root=place.root, checkout=str(place.checkout), results=str(place.results),
        hf_cache=str(Path(os.path.expanduser(place.hf_cache)).resolve()), agent_standin=str(standin),
        network=place.network, cidfile="", job_label=job.env.get("BUILDKITE_JOB_ID", ""), image=image,
    )  # fmt: skip


def run_pod(argv: list[str], cidfile: Path, job: Job, engine: Engine, *, timeout: float,
            on_line: Callable[[str], None], running=None, environ=None) -> RunResult:  # fmt: skip
    """A native job: the pod's container, the runner inside; removed whatever happens."""
    environ = os.environ if environ is None else environ
    started = time.time()
    job_id = job.env.get("BUILDKITE_JOB_ID", "")
    cidfile.parent.mkdir(parents=True, exist_ok=True)
    cidfile.unlink(missing_ok=True)  # docker refuses an existing one (a retried job)
    try:
        done = process.stream(
            argv, on_line, env=dict(environ), timeout=timeout,
            stop=lambda: remove_job_containers(engine, job_id), running=running,
        )  # fmt: skip
    except OSError as exc:
        return RunResult(127, False, 0.0, started, f"docker client {argv[0]!r} could not be started: {exc.strerror}")
    finally:
        remove_job_containers(engine, job_id)
    created = cidfile.is_file() and cidfile.read_text(encoding="utf-8").strip()
    infra = None
    if not created and not done.timed_out:
        infra = f"no container was created for the pod (client {argv[0]!r}, exit {done.returncode})"
    elif done.returncode == 125:
        infra = "docker could not start the pod's container (exit 125)"
    return RunResult(done.returncode, done.timed_out, done.seconds, started, infra)
