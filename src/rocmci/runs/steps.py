"""`run.step`: one step of the step file, run as vLLM's AMD CI runs it.

Everything about the step comes from the generated pipeline (pipeline/generate.py, which equals
ci-infra's render): its command and env (VLLM_TEST_COMMANDS holds the `cd <working_dir>` and the
step's commands), its GPU count and parallelism. Nothing is re-derived from the step file here, so a
run follows upstream's template wherever the generator does.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from rocmci.errors import UsageError
from rocmci.runs import workloads as wl

RUNNER = "bash .buildkite/scripts/hardware_ci/run-amd-test.sh"


@dataclass(frozen=True)
class Step:
    label: str  # as the generated pipeline shows it: "mi300_2: DeepEP MoE"
    source_label: str
    key: str  # the template's step slug (the block key without "block-"): "mi300_2-deepep-moe"
    origin: str  # file:line of the step in the step file
    native: bool  # dind: false: a Kubernetes pod in the native ci_base, no docker run
    gpus: int
    parallelism: int | None
    working_dir: str
    command: str  # the generated step's command
    env: dict[str, str]  # the generated step's env
    data: dict = field(default_factory=dict, compare=False, repr=False)  # the generated step, as uploaded
    # The source step's values ci-infra's template stops on ("'commands' (reason)"): rocmci generates the step
    # without them, but vLLM's CI uploads no pipeline at all, so it never runs this step.
    stops: tuple[str, ...] = ()

    @property
    def through_runner(self) -> bool:
        return self.command == RUNNER

    @property
    def test_commands(self) -> str:
        """What the runner runs: VLLM_TEST_COMMANDS (or the command itself for a no_plugin step)."""
        return self.env.get("VLLM_TEST_COMMANDS", "") if self.through_runner else self.command

    @property
    def uses_deepep(self) -> bool:
        return "deepep" in self.test_commands.lower() or "deep_ep" in self.test_commands


def candidates(src, query: str):
    """The step file with only the steps `query` may name (label, "pool: label", key, part of a label), so
    one step is generated, not the whole file; the file itself when none matches (for "did you mean")."""
    import copy

    from rocmci.pipeline import amdsteps, generate

    q = query.strip()
    folded = q.casefold()

    def names(step) -> tuple[str, str, str]:
        label = amdsteps.rust_text(step.data.get("label"))
        pool = step.data.get("agent_pool")
        shown = f"{amdsteps.rust_text(pool)}: {label}" if pool else label
        return label, shown, generate.slug(step)

    hits = []
    for step in src.steps:
        label, shown, key = names(step)
        if q in (label, shown, key, f"block-{key}") or folded in shown.casefold():
            hits.append(step)
    if not hits:
        return src
    subset = copy.copy(src)
    subset.steps = hits
    return subset


def generated_steps(src, mirror_hw: str, ci_image: str) -> list[Step]:
    """Every test step the template renders for this mirror, as the generator writes it (run_all: no gates)."""
    from rocmci.pipeline import amdsteps, generate, source
    from rocmci.pipeline.bootstrap import TemplateInputs

    opts = generate.Options(
        inputs=TemplateInputs(mirror_hw=mirror_hw, run_all="1"), ci_image=ci_image, origin_env=False
    )
    result = generate.generate(src, opts)
    out = []
    for data, origin in zip(result.steps, result.origins, strict=True):
        if origin is None or "command" not in data:
            continue  # the image chain and block steps
        raw = origin.data
        env = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
        out.append(
            Step(
                label=str(data["label"]),
                source_label=origin.label,
                key=generate.slug(origin),
                origin=origin.where.rsplit(":", 1)[0],
                native=raw.get("dind") is False,
                gpus=amdsteps.gpu_count(raw),
                parallelism=data.get("parallelism"),
                working_dir=amdsteps.rust_text(raw.get("working_dir") or amdsteps.DEFAULT_WORKDIR),
                command=str(data["command"]),
                env=env,
                data=data,
                stops=tuple(f"'{key}' ({why})" for key, why in source.template_stops(raw).items()),
            )
        )
    return out


def find(steps: Sequence[Step], query: str, filename: str) -> Step:
    """The step a label, a "pool: label" or a key names; one line with candidates when that is not one step."""
    q = query.strip()
    hits = [s for s in steps if q in (s.label, s.key, f"block-{s.key}")]
    if not hits:
        hits = [s for s in steps if s.source_label == q]
    exact = bool(hits)
    if not hits and q:
        # Part of a label, as someone copies it from a Buildkite job title ("DeepEP", "moe test").
        hits = [s for s in steps if q.casefold() in s.label.casefold()]
    if len(hits) == 1:
        return hits[0]
    if hits:
        shown = ", ".join(repr(s.label) for s in hits[:6]) + (f" and {len(hits) - 6} more" if len(hits) > 6 else "")
        what = f"are labelled {q!r}" if exact else f"have {q!r} in their label"
        raise UsageError(f"{len(hits)} steps of {filename} {what}", hint=f"name one of them: {shown}")
    names = [s.label for s in steps] + [s.source_label for s in steps] + [s.key for s in steps]
    close = difflib.get_close_matches(q, names, n=3, cutoff=0.6)
    raise UsageError(
        f"no step {q!r} in {filename}",
        hint=f"did you mean {' or '.join(repr(c) for c in dict.fromkeys(close))}?"
        if close
        else "run `rocmci pipeline.plan` to list the steps",
    )


MAX_PARALLELISM = 256  # jobs one box runs one after the other; more is a typo or a job for Buildkite


def parallelism(step: Step) -> int | None:
    """The step's parallelism as a count, or a one-line refusal: text, a fraction, a list, a bool, 0 or less."""
    raw = step.parallelism
    if raw is None or raw == "" or raw is False:
        return None
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_PARALLELISM:
        raise UsageError(
            f"step {step.label!r} ({step.origin}) has parallelism {text[:40]!r}: "
            f"not a count of jobs 1..{MAX_PARALLELISM}",
            hint="fix it in the step file (`rocmci pipeline.validate` shows what Buildkite makes of it)",
        )
    return int(text)


def jobs(step: Step, parallel_job: int | None) -> list[int | None]:
    """Which of the step's parallel jobs to run: the one asked for, else all of them one after the other."""
    count = parallelism(step)
    if count is None:
        if parallel_job not in (None, 0):
            raise UsageError(f"step {step.label!r} has no parallelism", hint="leave out --parallel-job")
        return [None]
    if parallel_job is None:
        return list(range(count))
    if parallel_job >= count:
        raise UsageError(
            f"--parallel-job {parallel_job}: step {step.label!r} has parallelism {count}",
            hint=f"give 0..{count - 1}",
        )
    return [parallel_job]


def unescape(command: str) -> str:
    """Buildkite's upload turns `$$` into `$`: the runner receives the command that way."""
    return command.replace("$$", "$")


def workloads(step: Step, parallel_job: int | None, *, host: bool) -> list[wl.Workload]:
    """The step as workloads: one per parallel job, each with the command the runner would run."""
    if not step.through_runner and not host:
        raise UsageError(
            f"step {step.label!r} runs on the agent itself (no_plugin), not in an image",
            hint="run it with --no-container",
        )
    commands = unescape(step.test_commands)
    if host:
        argv: tuple[str, ...] = ("/bin/bash", "-c", commands)
    else:
        argv = ("/bin/bash", "-c", f"{wl.PREFLIGHT} && {commands}")
    out = []
    for job in jobs(step, parallel_job):
        env = wl.parallel_env(job, parallelism(step))
        if step.gpus == 0:
            env["VLLM_TARGET_DEVICE"] = "cpu"  # the runner's cpu_platform_env for a step without GPUs
        if not step.through_runner:
            env.update(step.env)  # a no_plugin step's env is the agent's environment for its command
        name = f"step {step.label}" + (f" job {job}/{step.parallelism}" if job is not None else "")
        out.append(
            wl.Workload(name, "step", argv, env, gpus=step.gpus, needs_deepep=step.uses_deepep, about=about(step))
        )
    return out


def about(step: Step) -> tuple[str, ...]:
    """What the dry run shows of the generated step, before the command rocmci runs for it."""
    lines = [
        f"step {step.label!r} from {step.origin} ({'native pod' if step.native else 'docker run by the runner'})",
        f"generated command: {step.command}",
        f"working_dir: {step.working_dir}",
        "generated env:",
    ]
    lines += [f"  {k}={v}" for k, v in step.env.items()]
    return tuple(lines)
