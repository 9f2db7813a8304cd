"""Steps + template inputs -> the Buildkite pipeline ci-infra's test-template-amd.j2 renders for them.

Pure: the same source and options always give the same pipeline. tests/functional/test_conformance.py
renders the real template with minijinja and compares the two field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rocmci.pipeline import amdsteps as amd
from rocmci.pipeline import scalars
from rocmci.pipeline.bootstrap import TemplateInputs
from rocmci.pipeline.source import SourceFile, SourceStep

IMAGE_STEP_KEY = amd.IMAGE_STEP_KEY
ORIGIN_ENV = "AMD_CI_STEP_SOURCE"  # lets a later validation of the written file point back at the step file
RUNNER_SCRIPT = ".buildkite/scripts/hardware_ci/run-amd-test.sh"


class Options(NamedTuple):
    inputs: TemplateInputs = TemplateInputs()
    ci_image: str = amd.CI_IMAGE
    deepep_arch: str | None = None  # DEEPEP_ROCM_ARCH for the image steps, when the user configured one
    origin_env: bool = True  # add AMD_CI_STEP_SOURCE (an intentional addition; off for conformance checks)


class Decision(NamedTuple):
    step: SourceStep
    action: str  # "run", "block" or "skip"
    reason: str


class Problem(NamedTuple):
    """Step-file text that would break the template's YAML (reported as a finding by validate)."""

    step: SourceStep
    key: str  # the step-file key whose text is at fault
    message: str


@dataclass
class Generated:
    pipeline: dict[str, Any]
    origins: list[SourceStep | None] = field(default_factory=list)  # per entry of the group's steps
    decisions: list[Decision] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.pipeline["steps"][0]["steps"]


def slug(step: SourceStep) -> str:
    """amd_step_slug(): the block key's tail, exactly as the template makes it."""
    label = amd.rust_text(step.data.get("label")).replace(" ", "-").lower()
    for old, new in (("(", ""), (")", ""), ("%", ""), (",", "-"), ("+", "-")):
        label = label.replace(old, new)
    pool = step.data.get("agent_pool")
    return f"{amd.rust_text(pool)}-{label}" if pool else label


def decide(step: SourceStep, inputs: TemplateInputs, changed: list[str]) -> Decision:
    data = step.data
    mirrors = data.get("mirror_hardwares")
    if not (mirrors and inputs.mirror_hw in mirrors):
        return Decision(step, "skip", f"mirror_hardwares lacks {inputs.mirror_hw}")
    why_runs = None
    if inputs.run_all == "1":
        why_runs = "run_all"
    elif inputs.nightly == "1":
        why_runs = "nightly"
    deps = data.get("source_file_dependencies")
    if not deps:
        why_runs = why_runs or "no source_file_dependencies: always runs"
    else:
        for dep in deps:
            hit = next((f for f in changed if f and f[: len(dep)] == dep), None)
            if hit is not None:
                why_runs = why_runs or f"{hit} matches {dep}"
                break
        if data.get("dind") is False and RUNNER_SCRIPT in changed:
            why_runs = why_runs or f"{RUNNER_SCRIPT} changed and the step runs natively (dind: false)"
    optional = bool(data.get("optional")) and inputs.nightly != "1"
    if why_runs is None or optional:
        if data.get("autorun_on_main") is True and inputs.branch == "main":
            return Decision(step, "run", "autorun_on_main on branch main")
        if optional:
            return Decision(step, "block", "optional: runs unblocked only in nightly builds")
        return Decision(step, "block", "no changed file matches its source_file_dependencies")
    return Decision(step, "run", why_runs)


def _text(problems: list[Problem], step: SourceStep, key: str, fn, text: str) -> Any:
    try:
        return fn(text)
    except scalars.TemplateBreak as exc:
        problems.append(Problem(step, key, str(exc)))
        return text


def test_step(step: SourceStep, gated: bool, opts: Options, problems: list[Problem]) -> dict[str, Any]:
    data = step.data
    pool = amd.rust_text(data.get("agent_pool"))
    requested = data.get("timeout_in_minutes") or amd.MAX_TIMEOUT
    timeout = requested if requested <= amd.MAX_TIMEOUT else amd.MAX_TIMEOUT
    label = _text(problems, step, "label", scalars.double_quoted, f"{pool}: {amd.rust_text(data.get('label'))}")
    out: dict[str, Any] = {
        "label": label,
        "depends_on": _text(problems, step, "label", scalars.plain, f"block-{slug(step)}") if gated else IMAGE_STEP_KEY,
        "timeout_in_minutes": timeout,
        "agents": {"queue": _text(problems, step, "agent_pool", scalars.plain, f"amd_{pool}")},
    }
    native = data.get("dind") is False
    if native and isinstance(data.get("agent_tags"), dict):
        for key, value in data["agent_tags"].items():
            if key != "queue" and key and value:
                name = _text(problems, step, "agent_tags", scalars.plain, amd.rust_text(key))
                out["agents"][name] = _text(problems, step, "agent_tags", scalars.double_quoted, amd.rust_text(value))
    if native:
        out["plugins"] = amd.native_plugin(data)
    joined = data.get("command") or " && ".join(amd.rust_text(c) for c in data.get("commands") or [])
    joined = amd.rust_text(joined)
    if data.get("no_plugin"):
        out["command"] = _text(problems, step, "commands", scalars.plain, joined)
        if data.get("env"):
            out["env"] = {
                _text(problems, step, "env", scalars.plain, amd.rust_text(k)): _text(
                    problems, step, "env", scalars.plain, amd.rust_text(v)
                )
                for k, v in data["env"].items()
            }
    else:
        out["command"] = amd.RUNNER
        out["artifact_paths"] = [f"{amd.DIAGNOSTICS_DIR}/*/diagnostics.log"]
        try:
            out["env"] = amd.runner_env(data, timeout, joined, opts.ci_image)
        except scalars.TemplateBreak as exc:
            problems.append(Problem(step, "commands", str(exc)))
            out["env"] = {}
    out["priority"] = 100
    out["soft_fail"] = True
    if data.get("parallelism"):
        out["parallelism"] = data["parallelism"]
    out["retry"] = amd.retry()
    return out


def generate(source: SourceFile, opts: Options) -> Generated:
    inputs = opts.inputs
    group_steps = amd.image_chain(
        inputs.rocm_base_refresh_skip, inputs.rocm_base_refresh_force, opts.ci_image, opts.deepep_arch
    )
    group = {"group": amd.GROUP_LABEL, "depends_on": None, "steps": group_steps}
    result = Generated(pipeline={"steps": [group]}, origins=[None] * len(group_steps))
    changed = inputs.changed
    origin_of = _origin_lines(source) if opts.origin_env else {}
    for step in source.steps:
        decision = decide(step, inputs, changed)
        result.decisions.append(decision)
        if decision.action == "skip":
            continue
        gated = decision.action == "block"
        if gated:
            block_label = f"Run {amd.rust_text(step.data.get('agent_pool'))}: {amd.rust_text(step.data.get('label'))}"
            group_steps.append(
                {
                    "block": _text(result.problems, step, "label", scalars.double_quoted, block_label),
                    "depends_on": IMAGE_STEP_KEY,
                    "key": _text(result.problems, step, "label", scalars.plain, f"block-{slug(step)}"),
                }
            )
            result.origins.append(step)
        generated = test_step(step, gated, opts, result.problems)
        if opts.origin_env and isinstance(generated.get("env"), dict):
            generated["env"][ORIGIN_ENV] = origin_of[step.index]
        group_steps.append(generated)
        result.origins.append(step)
    return result


def _origin_lines(source: SourceFile) -> dict[int, str]:
    return {s.index: f"{source.filename}:{source.doc.pos(('steps', s.index)).line}" for s in source.steps}
