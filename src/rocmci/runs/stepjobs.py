"""`run.step` as Buildkite jobs: the generated step handed to rocmci-as-agent (runs/agent.py), run by the
checkout's own runner (runs/jobs.py) or as its pod (runs/pod.py).

Planning here decides the job env, the GPUs an agent of the step's pool owns, the image, and what a dry
run prints (the runner's traced `docker run`, or the pod's container); runs/execute.py runs the result
with the same logging, redaction, retry and outcome rules as every run task.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmci.engine import Engine
from rocmci.errors import PreflightError, UsageError
from rocmci.gpus import Gpu
from rocmci.report import plural
from rocmci.runs import agent, jobs, standins
from rocmci.runs import pod as podmod
from rocmci.runs import workloads as wl
from rocmci.runs.execute import host_gpus, preflight
from rocmci.runs.steps import Step, about
from rocmci.runs.steps import jobs as step_jobs
from rocmci.runs.types import PlannedRun, Prepared, RunOptions
from rocmci.secrets import is_secret

# What a native pod receives by name from the host (its values never printed): the runner's own list.
POD_SECRETS = ("HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
COMMIT_FILE = "/opt/vllm-ci/commit.txt"  # where vLLM's CI image records the commit it was built for


@dataclass(frozen=True)
class Where:
    checkout: Path
    commit: str
    branch: str


def checkout_of(path: Path) -> Where:
    """The vLLM checkout the job runs from, with its commit and branch (git's own answer)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    return Where(path, git("rev-parse", "HEAD") or "0" * 40, git("rev-parse", "--abbrev-ref", "HEAD") or "main")


def image_commit(where: Where, engine: Engine, image: str) -> Where:
    """A native pod's BUILDKITE_COMMIT is the commit its image was built for (/opt/vllm-ci/commit.txt):
    the runner refuses any other. The checkout's HEAD when the image cannot be asked."""
    from rocmci.errors import EngineError
    from rocmci.runs import container as ctr

    try:
        if engine.image_labels(image) is None:
            return where
        commit = ctr.read_file(engine, image, COMMIT_FILE)
    except EngineError:
        return where
    return Where(where.checkout, commit.strip(), where.branch) if commit else where


def stand_in_gpus(count: int) -> list[Gpu]:
    """A dry run on a host without (enough) GPUs: the render nodes an agent of the pool would have."""
    return [Gpu(i, -1, "unknown", 128 + i) for i in range(count)]


def choose(step: Step, need: int, opts: RunOptions) -> list[Gpu]:
    """The agent's GPUs: --gpus (exactly as many as the agent owns), else the host's first ones."""
    if opts.gpus is not None and need and len(opts.gpus) != need:
        raise UsageError(
            f"--gpus names {plural(len(opts.gpus), 'GPU')}; an agent of {step.label.split(':')[0]!r} owns {need}",
            hint=f"name {need} GPU indices, e.g. --gpus {','.join(str(i) for i in range(need))}",
        )
    if opts.gpus is not None and not need:
        raise UsageError(f"step {step.label!r} uses no GPU", hint="leave out --gpus")
    if not need:
        return []
    found = host_gpus(opts)
    by_index = {g.index: g for g in found}
    wanted = list(opts.gpus) if opts.gpus is not None else [g.index for g in found[:need]]
    chosen = [by_index[i] for i in wanted if i in by_index]
    if len(chosen) < need and (opts.dry_run or opts.skip_preflight):
        chosen = [*chosen, *stand_in_gpus(need)[len(chosen) :]]
    return chosen


def plan(
    step: Step,
    opts: RunOptions,
    engine: Engine | None,
    *,
    where: Where,
    parallel_job: int | None,
    build_id: str | None,
    image_given: bool,
    place: jobs.Place,
) -> Prepared:
    """The jobs of one step (one per parallel job), each with how it starts; check() is its preflight."""
    ids = agent.Ids.new(build_id, where.commit, where.branch)
    notes: list[str] = []
    runs: list[PlannedRun] = []
    for number in step_jobs(step, parallel_job):
        ids = dataclasses.replace(ids, job_id=str(uuid.uuid4()))  # each parallel job is a job of its own
        # Where the job runs: results/jobs/<job id>/checkout, whose entries link to the checkout (runs/jobs.py).
        job = agent.job(step.data, parallel_job=number, ids=ids, checkout=str(jobs.job_checkout(place, ids.job_id)))
        job = _with_image(job, opts.image, image_given or build_id is None)
        name = f"step {step.label}" + (f" job {number}/{step.parallelism}" if number is not None else "")
        workload = wl.Workload(name, "step", (*agent.AGENT_SHELL, job.command), gpus=job.gpus,
                               needs_deepep=step.uses_deepep, about=about(step))  # fmt: skip
        runs.append(_planned(step, job, workload, opts, engine, place))
    image = _image_of(runs[0], opts)
    queue = (step.data.get("agents") or {}).get("queue", "?")
    given = (
        "the pod's amd.com/gpu" if step.native else "an agent of this queue owns that many; the runner gives them all"
    )
    notes.append(
        f"job: queue {queue}, {plural(runs[0].workload.gpus, 'GPU')} ({given}), build {ids.build_id}, "
        f"commit {where.commit[:12]}, image {image}"
    )
    return Prepared([[r] for r in runs], [], notes)


def image_of(prepared: Prepared, opts: RunOptions) -> str:
    """The image the jobs run in: the traced `docker run`'s, or the pod's."""
    return _image_of(prepared.runs[0], opts)


def check(prepared: Prepared, opts: RunOptions, engine: Engine | None) -> None:
    """Preflight of the jobs (after any pull): the host, the GPUs and the image's DeepEP archs."""
    runs = prepared.runs
    checked = dataclasses.replace(opts, image=image_of(prepared, opts))
    _, warnings = preflight([r.workload for r in runs], checked, engine, host_gpus(opts) if runs[0].gpus else [],
                            notes=prepared.notes)  # fmt: skip
    prepared.warnings[:0] = warnings


def as_step_commands(workload: wl.Workload, workdir: str) -> str:
    """A workload as the commands of a step (VLLM_TEST_COMMANDS, which the runner hands to bash -c): its
    env exported and its argv quoted word by word, so the shell sees exactly the argv."""
    exports = [f"export {k}={shlex.quote(v)}" for k, v in workload.env.items()]
    return " && ".join(
        ["(command rocm-smi || true)", f"cd {shlex.quote(workdir)}", *exports, shlex.join(workload.argv)]
    )


def plan_workloads(
    step: Step,
    workloads: Sequence[wl.Workload],
    opts: RunOptions,
    engine: Engine | None,
    *,
    where: Where,
    build_id: str | None,
    image_given: bool,
    place: jobs.Place,
) -> Prepared:
    """DeepEP workloads as jobs of the step they follow: each the step's job (its queue's GPUs, its pod or
    the runner's container) with the workload's commands in place of the step's."""
    ids = agent.Ids.new(build_id, where.commit, where.branch)
    runs: list[PlannedRun] = []
    for workload in workloads:
        ids = dataclasses.replace(ids, job_id=str(uuid.uuid4()))
        data = {
            **step.data,
            "env": {**step.data.get("env", {}), "VLLM_TEST_COMMANDS": as_step_commands(workload, wl.WORKSPACE)},
        }
        data.pop("parallelism", None)
        job = agent.job(data, parallel_job=None, ids=ids, checkout=str(jobs.job_checkout(place, ids.job_id)))
        job = _with_image(job, opts.image, image_given or build_id is None)
        as_job = dataclasses.replace(
            workload, gpus=job.gpus, about=(f"{workload.name}: a job of step {step.label!r} ({step.origin})",)
        )
        runs.append(_planned(step, job, as_job, opts, engine, place))
    return Prepared([[r] for r in runs], [], [])


def _with_image(job: agent.Job, image: str, override: bool) -> agent.Job:
    """--image, or no --build-id (the configured image): the runner's DOCKER_IMAGE_NAME / the pod's image."""
    if not override:
        return job
    env = {**job.env, "DOCKER_IMAGE_NAME": image} if not job.native else job.env
    pod = {**job.pod, "image": image} if job.native else None
    return agent.Job(job.label, job.queue, job.command, env, job.gpus, job.timeout_s, pod, job.volumes)


def _image_of(planned: PlannedRun, opts: RunOptions) -> str:
    return planned.shown and _image_in(planned.shown) or opts.image


def _image_in(argv: Sequence[str]) -> str:
    """The image of a printed `docker run`: the word before the command (/bin/bash ...)."""
    words = list(argv)
    for i, word in enumerate(words):
        if word == "/bin/bash" and i > 0:
            return words[i - 1]
    return ""


def _planned(
    step: Step, job: agent.Job, workload: wl.Workload, opts: RunOptions, engine, place: jobs.Place
) -> PlannedRun:
    gpus = choose(step, job.gpus, opts)
    if opts.no_container:
        return _on_host(step, job, workload, gpus, opts, engine, place)
    if job.native:
        return _pod(job, workload, gpus, opts, engine, place)
    render = agent.render_devices(gpus, place.root)
    traced = jobs.trace(job, place, render)
    runs = traced.runs()
    if traced.exit_code != 0 or not runs:
        reason = _refusal(traced.output)
        raise PreflightError(
            f"vLLM's runner refuses step {step.label!r} (exit {traced.exit_code}): {reason}",
            hint="this step cannot run as CI runs it; see the runner, .buildkite/scripts/hardware_ci/run-amd-test.sh",
        )
    if len(runs) > 1:
        raise PreflightError(f"vLLM's runner starts {len(runs)} containers for step {step.label!r}",
                             hint="multi-node steps are not run by rocmci")  # fmt: skip
    shown = runs[0]
    start = functools.partial(_start_runner, job, place, render, engine, opts)
    return PlannedRun(workload, gpus, None, 0, env=_printed_env(job), start=start, shown=shown)


def _printed_env(job: agent.Job) -> dict[str, str]:
    return {k: v for k, v in job.env.items() if not is_secret(k)}


def _start_runner(job, place, render, engine, opts, on_line, running):
    return jobs.run_on_host(job, place, render, engine, timeout=opts.timeout, on_line=on_line, running=running)


def _pod(job: agent.Job, workload, gpus, opts: RunOptions, engine, place: jobs.Place) -> PlannedRun:
    standin_dir = place.results / "agent" / "bin"
    host = jobs.pod_host(job, place, gpus, image=None, standin=standin_dir / "buildkite-agent")
    by_name = [n for n in POD_SECRETS] + sorted(k for k in opts.env if is_secret(k) and k not in POD_SECRETS)
    extra = {k: v for k, v in opts.env.items() if not is_secret(k)}
    job = agent.Job(
        job.label, job.queue, job.command, {**job.env, **extra}, job.gpus, job.timeout_s, job.pod, job.volumes
    )

    cidfile = place.results / "jobs" / job.env["BUILDKITE_JOB_ID"] / "cid"
    shown = tuple(podmod.run_argv(job, _with_cid(host, str(cidfile)), by_name))

    def start(on_line, running):
        standins.write(standin_dir, host_tools=False)
        environ = {**os.environ, **{k: v for k, v in opts.env.items() if is_secret(k)}}
        return jobs.run_pod(list(shown), cidfile, job, engine, timeout=opts.timeout, on_line=on_line,
                            running=running, environ=environ)  # fmt: skip

    return PlannedRun(workload, gpus, None, 0, env=_printed_env(job), start=start, shown=shown)


def _with_cid(host: podmod.Host, cidfile: str) -> podmod.Host:
    return podmod.Host(**{**host.__dict__, "cidfile": cidfile})


def _on_host(step, job: agent.Job, workload, gpus, opts: RunOptions, engine, place: jobs.Place) -> PlannedRun:
    """--no-container: this host is the job's container (a CI image): the runner in its native mode."""
    env = dict(job.env)
    if job.native:
        for key, value in podmod.env_of(job, jobs.pod_host(job, place, gpus, image=None, standin=Path())):
            env.setdefault(key, value)
    env.update({"AMD_CI_RUNTIME": "native", "NATIVE_CI": "true"})
    env.update({k: v for k, v in opts.env.items() if not is_secret(k)})
    native = agent.Job(job.label, job.queue, job.command, env, job.gpus, job.timeout_s, None, ())
    render = agent.render_devices(gpus, place.root)
    start = functools.partial(_start_runner, native, place, render, engine, opts)
    shown = ("env", *(f"{k}={v}" for k, v in _printed_env(native).items()), *agent.AGENT_SHELL, native.command)
    return PlannedRun(workload, gpus, None, 0, env=_printed_env(native), start=start, shown=shown)


def _refusal(output: Sequence[str]) -> str:
    """The runner's own words: its last line that says Error or refuses, else its last line."""
    for line in reversed(output):
        if line.startswith(("Error", "Native CI", "Multi-node")) or "refus" in line.lower():
            return line.strip()
    return output[-1].strip() if output else "no output"
