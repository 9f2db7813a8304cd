"""A native (`dind: false`) step's Kubernetes pod as one `docker run`: pure, so --dry-run prints what runs.

The container is the generated podSpecPatch's first container: its image, env (field references
filled in as the kubelet would), volumes, `amd.com/gpu` (the device plugin's /dev/kfd and that many
render nodes), capabilities and privilege settings. Inside it the step's command, vLLM's runner, runs
as agent-stack-k8s runs it: with the agent's shell, in the checkout, in native mode (the pod env says so).
What rocmci adds is in POD_DIFFERENCES, each with its reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmci import labels as label
from rocmci.errors import UsageError
from rocmci.gpus import Gpu
from rocmci.runs.agent import AGENT_SHELL, POD_CHECKOUT, Job

AGENT_STANDIN = "/usr/local/bin/buildkite-agent"
RESULTS_MOUNT = "/rocmci-results"

# Where the container rocmci starts differs from the pod CI starts, and why (README lists these).
POD_DIFFERENCES = {
    "--label": "rocmci finds and removes its own containers by label, and only those",
    "--cidfile": "proof that the container was created: a run whose container never existed is no pass",
    "--network": "a pod has a network of its own; the container uses the run_network setting (default host)",
    "checkout": f"your checkout is mounted read-only at {POD_CHECKOUT}, where agent-stack-k8s checks it out",
    "HF_HOME": "the hf_cache setting is mounted at the pod's HF_HOME, standing in for CI's NFS cache",
    RESULTS_MOUNT: "the job's diagnostics and the agent stand-in's artifacts land in the results folder",
    "VLLM_CI_DIAGNOSTICS_DIR": f"under {RESULTS_MOUNT}, as your checkout is read-only",
    AGENT_STANDIN: "a buildkite-agent stand-in that keeps artifacts, annotations and meta-data in results",
}
_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName")
_QUANTITY = re.compile(r"([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
_DOCKER_UNIT = {None: "b", "Ki": "k", "k": "k", "Mi": "m", "M": "m", "Gi": "g", "G": "g", "Ti": "g", "T": "g"}


@dataclass(frozen=True)
class Host:
    """What the host gives the pod: paths on this machine, GPUs, field values."""

    client: str
    name: str  # the container's name: the pod's metadata.name
    node: str  # spec.nodeName: this host
    gpus: tuple[Gpu, ...]
    root: Path
    checkout: str
    results: str
    hf_cache: str
    agent_standin: str
    network: str | None
    cidfile: str
    job_label: str
    image: str | None = None  # overrides the pod's image (--image)


def shm_size(quantity: str) -> str:
    """A Kubernetes quantity (16Gi) as docker's --shm-size (16g); Ti becomes g (docker has no t)."""
    m = _QUANTITY.fullmatch(str(quantity).strip())
    if not m:
        raise UsageError(f"pod volume sizeLimit {quantity!r} is not a quantity", hint="e.g. 16Gi")
    number, unit = int(m.group(1)), m.group(2)
    if unit in ("Ti", "T"):
        number *= 1024
    return f"{number}{_DOCKER_UNIT[unit]}"


def env_of(job: Job, host: Host) -> list[tuple[str, str]]:
    """The container's env: the job's (agent-stack-k8s passes it), then the pod spec's, field refs filled."""
    fields = {"metadata.name": host.name, "metadata.namespace": "rocmci", "spec.nodeName": host.node}
    out = dict(job.env)
    for item in (job.pod or {}).get("env") or ():
        name = str(item.get("name", ""))
        if "value" in item:
            out[name] = "" if item["value"] is None else str(item["value"])
            continue
        ref = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if ref not in _FIELDS:
            raise UsageError(f"pod env {name}: valueFrom {ref!r} is not one rocmci can fill", hint=", ".join(_FIELDS))
        out[name] = fields[ref]
    out["VLLM_CI_DIAGNOSTICS_DIR"] = f"{RESULTS_MOUNT}/diagnostics"
    out["ROCMCI_AGENT_DIR"] = f"{RESULTS_MOUNT}/agent"
    return list(out.items())


def run_argv(job: Job, host: Host, pass_by_name: Sequence[str] = ()) -> list[str]:
    """The pod's container as `docker run` words."""
    pod = job.pod or {}
    mounts = {m.get("name"): str(m.get("mountPath")) for m in pod.get("volumeMounts") or () if m.get("mountPath")}
    argv = [host.client, "run", "--rm", "--name", host.name, "--cidfile", host.cidfile]
    for key, value in sorted({label.MANAGED: "1", label.JOB: host.job_label}.items()):
        argv += ["--label", f"{key}={value}"]
    if host.network:
        argv += ["--network", host.network]
    for volume in job.volumes:
        path = mounts.get(volume.get("name"))
        if path is None:
            continue
        empty = volume.get("emptyDir")
        if isinstance(empty, dict) and path == "/dev/shm":
            argv += ["--shm-size", shm_size(empty.get("sizeLimit", "64Mi"))]
        elif isinstance(empty, dict):
            argv += ["--mount", f"type=volume,destination={path}"]  # anonymous: gone with the container
        elif isinstance(volume.get("hostPath"), dict):
            argv += ["--volume", f"{volume['hostPath'].get('path')}:{path}"]
        else:
            raise UsageError(f"pod volume {volume.get('name')!r} is of a kind rocmci cannot stand in for",
                             hint="emptyDir and hostPath volumes are supported")  # fmt: skip
    if job.gpus:
        argv += _device(host.root, "/dev/kfd")
        for gpu in host.gpus:
            if gpu.render_node is None:
                raise UsageError(
                    f"GPU {gpu.index} ({gpu.arch}) has no render node in KFD sysfs", hint="name other --gpus"
                )
            argv += _device(host.root, gpu.render_node)
    security = pod.get("securityContext") or {}
    for cap in (security.get("capabilities") or {}).get("add") or ():
        argv += ["--cap-add", str(cap)]
    if security.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    if security.get("privileged") is True:
        argv.append("--privileged")
    if security.get("runAsUser") is not None:
        argv += ["--user", str(security["runAsUser"])]
    env = env_of(job, host)
    hf_home = dict(env).get("HF_HOME")
    if hf_home:
        argv += ["--volume", f"{host.hf_cache}:{hf_home}"]
    argv += ["--volume", f"{host.checkout}:{POD_CHECKOUT}:ro", "--volume", f"{host.results}:{RESULTS_MOUNT}"]
    argv += ["--volume", f"{host.agent_standin}:{AGENT_STANDIN}:ro"]
    for key, value in env:
        argv += ["--env", f"{key}={value}"]
    for name in pass_by_name:
        argv += ["--env", name]
    argv += ["--workdir", POD_CHECKOUT, host.image or str(pod.get("image", "")), *AGENT_SHELL, job.command]
    return argv


def _device(root: Path, path: str) -> list[str]:
    on_host = str(root / path.lstrip("/"))
    return ["--device", path if on_host == path else f"{on_host}:{path}"]
