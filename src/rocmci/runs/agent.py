"""rocmci as the Buildkite agent of one job: what an agent of the step's pool hands the step's command.

Pure planning. The job is the generated step (pipeline/generate.py, equal to ci-infra's render) as
`buildkite-agent pipeline upload` hands it to an agent: its env interpolated as the upload does, plus
what the agent and its host add (BUILDKITE_*, the agent's render devices, HOME). The command itself,
vLLM's `run-amd-test.sh`, is then executed as it is (runs/jobs.py); nothing of it is re-implemented here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmci.errors import UsageError
from rocmci.gpus import Gpu

# The agent's shell: Buildkite runs a step's command with `/bin/bash -e -c` unless told otherwise.
AGENT_SHELL = ("/bin/bash", "-e", "-c")
# agent-stack-k8s checks the repository out here in the pod's containers.
POD_CHECKOUT = "/workspace"
_QUEUE_GPUS = re.compile(r"amd_[a-z0-9]+_([0-9]+)")  # amd_mi300_2: an agent of this queue owns 2 GPUs
_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """What `buildkite-agent pipeline upload` makes of a value: `$$` is `$`, `$NAME`/`${NAME}` the uploading
    job's value or empty. (Its `${NAME:-default}` forms are left as they are: the generator writes none.)"""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1) or m.group(2), "")

    return _VARIABLE.sub(one, text)


def agent_gpus(queue: str, expected: int) -> int:
    """How many GPUs an agent of `queue` owns (its name's suffix); a queue without one (mi355_dpx: one
    partition) gets what the step expects. A step that expects none gets none."""
    if expected == 0:
        return 0
    m = _QUEUE_GPUS.fullmatch(queue)
    return int(m.group(1)) if m else max(expected, 1)


def render_devices(gpus: Sequence[Gpu], root: Path = Path("/")) -> str:
    """BUILDKITE_AGENT_META_DATA_RENDER_DEVICES: the runner splits it into `docker run` words unquoted."""
    words = []
    for gpu in gpus:
        if gpu.render_node is None:
            raise UsageError(f"GPU {gpu.index} ({gpu.arch}) has no render node in KFD sysfs", hint="name other --gpus")
        host = str(root / gpu.render_node.lstrip("/"))
        if any(c.isspace() for c in host):
            raise UsageError(f"render node path {host!r} holds a space", hint="give a --host-root without spaces")
        words += ["--device", host if host == gpu.render_node else f"{host}:{gpu.render_node}"]
    return " ".join(words)


@dataclass(frozen=True)
class Ids:
    """The build and job a run stands for: Buildkite's ids are UUIDs; --build-id names a real build."""

    build_id: str
    job_id: str
    commit: str
    branch: str

    @classmethod
    def new(cls, build_id: str | None, commit: str, branch: str) -> Ids:
        return cls(build_id or str(uuid.uuid4()), str(uuid.uuid4()), commit, branch)


@dataclass(frozen=True)
class Job:
    """One job of a step as an agent runs it. `env` is what the agent adds to its own environment."""

    label: str
    queue: str
    command: str  # the step's command, run with AGENT_SHELL in the checkout
    env: dict[str, str]
    gpus: int  # render devices the agent hands over (docker path) or the pod's amd.com/gpu (native)
    timeout_s: int  # the job's timeout_in_minutes: Buildkite cancels the job then
    pod: dict[str, Any] | None = None  # the native step's pod container (podSpecPatch), interpolated
    volumes: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def native(self) -> bool:
        return self.pod is not None


def job(
    data: Mapping[str, Any],
    *,
    parallel_job: int | None,
    ids: Ids,
    checkout: str,
) -> Job:
    """The job the agent runs for one generated step (and one of its parallel jobs)."""
    upload_env = {
        "BUILDKITE_BUILD_ID": ids.build_id,
        "BUILDKITE_COMMIT": ids.commit,
        "BUILDKITE_BRANCH": ids.branch,
    }
    step_env = {str(k): interpolate(str(v), upload_env) for k, v in (data.get("env") or {}).items()}
    queue = str((data.get("agents") or {}).get("queue", ""))
    expected = _int(step_env.get("VLLM_CI_EXPECTED_GPU_COUNT"), 1)
    pod, volumes = _pod(data, upload_env)
    native = pod is not None
    gpus = _pod_gpus(pod) if native else agent_gpus(queue, expected)
    env = {
        "CI": "true",
        "BUILDKITE": "true",
        "BUILDKITE_BUILD_ID": ids.build_id,
        "BUILDKITE_JOB_ID": ids.job_id,
        "BUILDKITE_COMMIT": ids.commit,
        "BUILDKITE_BRANCH": ids.branch,
        "BUILDKITE_LABEL": str(data.get("label", "")),
        "BUILDKITE_COMMAND": interpolate(str(data.get("command", "")), upload_env),
        "BUILDKITE_BUILD_CHECKOUT_PATH": POD_CHECKOUT if native else checkout,
        "BUILDKITE_AGENT_META_DATA_QUEUE": queue,
    }
    count = data.get("parallelism")
    if count:
        env["BUILDKITE_PARALLEL_JOB"] = str(parallel_job or 0)
        env["BUILDKITE_PARALLEL_JOB_COUNT"] = str(count)
    env.update(step_env)
    return Job(
        label=str(data.get("label", "")),
        queue=queue,
        command=env["BUILDKITE_COMMAND"],
        env=env,
        gpus=gpus,
        timeout_s=60 * _int(data.get("timeout_in_minutes"), 180),
        pod=pod,
        volumes=volumes,
    )


def _int(value: Any, default: int) -> int:
    try:
        return int(str(value)) if value is not None and str(value).strip() else default
    except ValueError:
        return default


def _pod(data: Mapping[str, Any], upload_env: Mapping[str, str]) -> tuple[dict[str, Any] | None, tuple]:
    """The first container of the step's kubernetes podSpecPatch, its strings interpolated as uploaded."""
    for plugin in data.get("plugins") or ():
        if isinstance(plugin, dict) and isinstance(plugin.get("kubernetes"), dict):
            spec = _interpolated(plugin["kubernetes"].get("podSpecPatch") or {}, upload_env)
            containers = spec.get("containers") or [{}]
            return dict(containers[0]), tuple(spec.get("volumes") or ())
    return None, ()


def _interpolated(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, list):
        return [_interpolated(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _interpolated(v, env) for k, v in value.items()}
    return value


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    limits = ((pod.get("resources") or {}).get("limits")) or {}
    return _int(limits.get("amd.com/gpu"), 0)
