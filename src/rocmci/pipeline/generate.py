"""Steps + template inputs -> the Buildkite pipeline ci-infra's test-template-amd.j2 renders for them.

Pure: the same source and options always give the same pipeline. tests/functional/test_conformance.py
renders the real template with minijinja and compares the two field by field.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, NamedTuple

from rocmci.pipeline import amdsteps as amd
from rocmci.pipeline import scalars
from rocmci.pipeline.bootstrap import TemplateInputs
from rocmci.pipeline.source import SourceFile, SourceStep, mirror_matches

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
    rule: str = "template-escape"  # or "yaml-meaning": the value reaches the CI changed (scalars.py)
    # A changed timeout or parallelism still runs the step's command on its GPUs: the real CI does not
    # break on it, so it is a warning; a changed command, env value or agent tag is an error.
    severity: str = "error"


class Generated:
    """The pipeline, and for each group member the step-file step it came from."""

    __slots__ = ("pipeline", "origins", "decisions", "problems", "mirror_hw")

    def __init__(self, pipeline: dict[str, Any], origins: list[SourceStep | None], mirror_hw: str) -> None:
        self.pipeline = pipeline
        self.origins = origins  # per entry of the group's steps
        self.decisions: list[Decision] = []
        self.problems: list[Problem] = []
        self.mirror_hw = mirror_hw  # the mirror the steps were rendered for: validation judges those steps

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


class ChangedFiles(list):
    """The changed paths in the template's order, with decide()'s two questions answered from an index built
    once: the first path (in order) starting with a dependency, and whether a path is among them. A scan
    per step and dependency cost steps x dependencies x files: 1,000,000 files took 110 s in pipeline.plan.
    """

    def __init__(self, files=()) -> None:
        super().__init__(files)
        self._members: frozenset[str] | None = None
        self._keys: list[str] = []  # the non-empty paths, sorted
        self._order: list[int] | None = None  # _keys[k] is self[_order[k]]
        self._first: dict[str, str | None] = {}

    def __contains__(self, path: object) -> bool:
        if self._members is None:
            self._members = frozenset(self)
        return path in self._members

    def first_with_prefix(self, prefix: str) -> str | None:
        """`next(f for f in self if f and f.startswith(prefix))`, in O(log n) plus the matches' count."""
        if prefix not in self._first:
            if self._order is None:
                self._order = sorted((i for i, f in enumerate(self) if f), key=self.__getitem__)
                self._keys = [self[i] for i in self._order]
            # Paths starting with `prefix` are one run of the sorted keys (keys cut to its length stay sorted).
            lo = bisect_left(self._keys, prefix)
            hi = bisect_right(self._keys, prefix, lo, key=lambda k: k[: len(prefix)])
            self._first[prefix] = self[min(self._order[lo:hi])] if hi > lo else None
        return self._first[prefix]


def decide(step: SourceStep, inputs: TemplateInputs, changed: list[str]) -> Decision:
    data = step.data
    if not mirror_matches(data.get("mirror_hardwares"), inputs.mirror_hw):
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
        if not isinstance(changed, ChangedFiles):
            changed = ChangedFiles(changed)
        # Only text can match a path (a list or mapping never equals one); a number stops the template, whose
        # error validate reports, and matches nothing here.
        for dep in deps if isinstance(deps, (str, list, dict)) else ():
            if not isinstance(dep, str):
                continue
            hit = changed.first_with_prefix(dep)
            if hit is not None:
                why_runs = why_runs or f"{hit} matches {dep}"
                break
        if scalars.jinja_eq(data.get("dind"), False) and RUNNER_SCRIPT in changed:
            why_runs = why_runs or f"{RUNNER_SCRIPT} changed and the step runs natively (dind: false)"
    optional = bool(data.get("optional")) and inputs.nightly != "1"
    if why_runs is None or optional:
        if scalars.jinja_eq(data.get("autorun_on_main"), True) and inputs.branch == "main":
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


def _received(problems: list[Problem], step: SourceStep, key: str, fn, text: str, what: str, written=None) -> Any:
    """`fn(text)` (what the CI receives), with a yaml-meaning finding when it differs from what was written."""
    try:
        value = fn(text)
    except scalars.TemplateBreak as exc:
        problems.append(Problem(step, key, f"{what} {exc}"))
        return text
    written = text if written is None else written
    if value != written or type(value) is not type(written):
        problems.append(Problem(step, key, scalars.change_message(what, written, value), "yaml-meaning"))
    return value


def _iterated(value: Any) -> list[Any]:
    """What minijinja's `join` iterates: a list's items, a mapping's keys, a text's characters; a number or
    boolean stops the template (validate reports it) and joins to nothing here."""
    return list(value) if isinstance(value, (str, list, dict)) else []


def test_step(
    step: SourceStep, gated: bool, opts: Options, problems: list[Problem], shared: dict | None = None
) -> dict[str, Any]:
    """One test step as the template renders it. `shared` holds the parts every step repeats (the pod patch
    per GPU count, the retry rules) so that one pipeline holds each once: validation walks a shared part
    once, not 190 times. Nothing edits a generated step's nested parts in place (keepgoing copies first)."""
    shared = {} if shared is None else shared
    data = step.data
    pool = amd.rust_text(data.get("agent_pool"))
    requested = data.get("timeout_in_minutes") or amd.MAX_TIMEOUT
    # minijinja compares kinds first: a timeout read as text ("0100") is never <= 180, so the cap applies.
    timeout = requested if scalars.jinja_le(requested, amd.MAX_TIMEOUT) else amd.MAX_TIMEOUT
    if isinstance(requested, str):
        message = scalars.timeout_message(requested, timeout)
        problems.append(Problem(step, "timeout_in_minutes", message, "yaml-meaning", "warning"))
    label = _text(problems, step, "label", scalars.double_quoted, f"{pool}: {amd.rust_text(data.get('label'))}")
    out: dict[str, Any] = {
        "label": label,
        "depends_on": _text(problems, step, "label", scalars.plain, f"block-{slug(step)}") if gated else IMAGE_STEP_KEY,
        "timeout_in_minutes": _text(problems, step, "timeout_in_minutes", scalars.plain, amd.rust_text(timeout)),
        "agents": {"queue": _text(problems, step, "agent_pool", scalars.plain, f"amd_{pool}")},
    }
    native = scalars.jinja_eq(data.get("dind"), False)
    # `agent_tags | items` stops the template on anything but a mapping (validate reports it): none here.
    if native and isinstance(data.get("agent_tags"), dict):
        for key, value in data["agent_tags"].items():
            if key != "queue" and key and value:
                name = _received(problems, step, "agent_tags", scalars.plain_key, amd.rust_text(key), "agent tag")
                out["agents"][name] = _text(problems, step, "agent_tags", scalars.double_quoted, amd.rust_text(value))
    if native:
        # Keyed apart from "retry": a num_gpus written as the text "retry" once got the retry rules as its pod.
        gpus = ("plugins", amd.rust_text(amd.gpu_count(data)))
        out["plugins"] = shared.get(gpus) or shared.setdefault(gpus, amd.native_plugin(data))
    joined = data.get("command") or " && ".join(amd.rust_item(c) for c in _iterated(data.get("commands")))
    joined = amd.rust_text(joined)
    if data.get("no_plugin"):
        out["command"] = _received(problems, step, "commands", scalars.plain_string, joined, "the command")
        # `env | items` stops the template on anything but a mapping (validate reports it): none here.
        if data.get("env") and isinstance(data["env"], dict):
            out["env"] = {}
            for k, v in data["env"].items():
                name = _received(problems, step, "env", scalars.plain_key, amd.rust_text(k), "env name")
                # An explicit null prints as "none" in minijinja (undefined would print nothing).
                text, written = ("none", "") if v is None else (amd.rust_text(v), amd.rust_text(v))
                what = f"env {name}"
                out["env"][name] = _received(problems, step, "env", scalars.plain_string, text, what, written)
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
        printed = amd.rust_text(data["parallelism"])  # printed bare: the agent reads it again
        out["parallelism"] = _text(problems, step, "parallelism", scalars.plain, printed)
        if out["parallelism"] != data["parallelism"]:
            message = scalars.change_message("parallelism", printed, out["parallelism"])
            problems.append(Problem(step, "parallelism", message, "yaml-meaning", "warning"))
    out["retry"] = shared.get("retry") or shared.setdefault("retry", amd.retry())
    return out


def generate(source: SourceFile, opts: Options) -> Generated:
    inputs = opts.inputs
    group_steps = amd.image_chain(
        inputs.rocm_base_refresh_skip, inputs.rocm_base_refresh_force, opts.ci_image, opts.deepep_arch
    )
    group = {"group": amd.GROUP_LABEL, "depends_on": None, "steps": group_steps}
    result = Generated({"steps": [group]}, [None] * len(group_steps), inputs.mirror_hw)
    changed = ChangedFiles(inputs.changed)
    origin_of = _origin_lines(source) if opts.origin_env else {}
    shared: dict[str, Any] = {}
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
        generated = test_step(step, gated, opts, result.problems, shared)
        if opts.origin_env and isinstance(generated.get("env"), dict):
            generated["env"][ORIGIN_ENV] = origin_of[step.index]
        group_steps.append(generated)
        result.origins.append(step)
    return result


def _origin_lines(source: SourceFile) -> dict[int, str]:
    return {s.index: f"{source.filename}:{source.doc.pos(('steps', s.index)).line}" for s in source.steps}
