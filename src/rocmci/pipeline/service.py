"""The pipeline tasks end to end: settings -> load -> generate -> validate -> render.

pipeline/tasks.py holds what the tasks call (flags already parsed, cli/flags.py); `validate_source_file`
is what the pre-commit hook calls.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import NamedTuple

from rocmci import yamldoc
from rocmci.arch import parse_arch_list, require_deepep_support
from rocmci.errors import InputError, UsageError
from rocmci.files import read_lines
from rocmci.heap import no_gc
from rocmci.pipeline import bootstrap as boot
from rocmci.pipeline import generate as gen
from rocmci.pipeline import inventory as inv
from rocmci.pipeline import rules, scalars, source, validate
from rocmci.settings import Settings


class Inputs(NamedTuple):
    source_path: Path
    source_name: str
    inventory_path: Path
    archs: tuple[str, ...]
    source_what: str = "--source"  # the flag or setting each path came from, for one-line errors
    inventory_what: str = "inventory"


def display_name(path: Path, workspace: Path) -> str:
    try:
        return str(Path(os.path.realpath(path)).relative_to(workspace))
    except ValueError:
        return str(path)


def packaged_inventory() -> Path:
    """The inventory shipped in the package (the same file as this repository's .buildkite/agents.yaml)."""
    return Path(__file__).resolve().parents[1] / "data" / "agents.yaml"


def step_file(s: Settings, source_override: str | None = None) -> tuple[Path, str]:
    """(the step file, where its path came from): --source, else the 'source' setting; its default
    (.buildkite/test-amd.yaml) is read from the vLLM checkout (vllm_src, e.g. ROCMCI_VLLM_SRC) when there is one."""
    if source_override:
        return Path(os.path.realpath(source_override)), "--source"
    if s.origin("source") == "default" and s.vllm_src:
        where = f"setting 'source' (default, in the vLLM checkout of setting 'vllm_src' ({s.origin('vllm_src')}))"
        return Path(os.path.realpath(Path(s.vllm_src) / s.source)), where
    return s.path("source"), s.describe("source")


def inventory_file(s: Settings) -> tuple[Path, str]:
    """(the inventory, how messages name it): the 'inventory' setting, else the packaged one when the
    default path has no file (a vLLM checkout has none)."""
    if s.origin("inventory") == "default" and not os.path.lexists(s.path("inventory")):
        return packaged_inventory(), "the packaged inventory"  # e.g. the pre-commit hook in another repository
    return s.path("inventory"), s.describe("inventory")


def inputs(s: Settings, source_override: str | None = None) -> Inputs:
    # realpath, not Path.resolve()/is_file(): a loop, a NUL or an over-long name reaches the file reader,
    # which names it (and the flag or setting) in one line.
    src, source_what = step_file(s, source_override)
    inventory_path, inventory_what = inventory_file(s)
    return Inputs(
        source_path=src,
        source_name=display_name(src, s.workspace),
        inventory_path=inventory_path,
        archs=_deepep_archs(s),
        source_what=source_what,
        inventory_what=inventory_what,
    )


def _deepep_archs(s: Settings) -> tuple[str, ...]:
    """The image's DeepEP arch list, refused as the image tasks refuse it when DeepEP cannot be built for one."""
    archs = parse_arch_list(s.require("arch"), what="arch list")
    require_deepep_support(archs)
    return archs


def context(i: Inputs, workspace: Path) -> rules.Context:
    doc = yamldoc.load(i.inventory_path, display_name(i.inventory_path, workspace), what=i.inventory_what)
    inventory = inv.from_document(doc)
    return rules.Context(inventory=inventory, archs=i.archs, inventory_what=i.inventory_what)


def changed_files(
    changed_file: str | None, diff_base: str | None, workspace: Path, git_timeout: float = boot.GIT_SECONDS
) -> tuple[str, ...] | None:
    """The changed paths: from a file, or `git diff` against the merge base as bootstrap-amd.sh computes them."""
    if changed_file and diff_base:
        raise UsageError("give --changed-files or --diff-base, not both")
    if changed_file:
        return read_lines(Path(changed_file), what="--changed-files")
    if diff_base:
        return boot.git_changed_files(diff_base, workspace, git_timeout)
    return None


def pr_labels(given: tuple[str, ...] = (), env=None) -> tuple[tuple[str, ...], bool]:
    """(labels, is a PR build): --label values, else Buildkite's comma-separated label variable.

    bootstrap-amd.sh reads labels only on a PR build (BUILDKITE_PULL_REQUEST not "false"); labels given
    with --label say it is one.
    """
    env = os.environ if env is None else env
    if given:
        return tuple(given), True
    labels = tuple(p.strip() for p in env.get(boot.LABELS_ENV, "").split(",") if p.strip())
    pull_request = env.get("BUILDKITE_PULL_REQUEST", "false") not in ("", "false")
    return (labels if pull_request else ()), pull_request


def bootstrap_request(
    s: Settings, changed: tuple[str, ...] | None, run_all: bool, nightly: bool, env=None, labels: tuple[str, ...] = ()
):  # fmt: skip
    """What bootstrap-amd.sh would read: the settings stand in for its environment variables."""
    env = os.environ if env is None else env
    pr_label_names, pull_request = pr_labels(labels, env)
    unavailable = isinstance(changed, boot.DiffUnavailable)
    return boot.Request(
        changed=None if unavailable else (changed or ()),
        diff_problem=changed.reason if unavailable else "",
        labels=pr_label_names,
        pull_request=pull_request,
        branch=s.branch or env.get("BUILDKITE_BRANCH", ""),
        # bootstrap-amd.sh reads RUN_ALL and NIGHTLY from its environment ("1" turns them on); the flags do the same
        run_all=run_all or env.get("RUN_ALL") == "1",
        nightly=nightly or env.get("NIGHTLY") == "1",
        run_all_why="--run-all was given" if run_all else "RUN_ALL=1 was set",
        nightly_why="--nightly was given" if nightly else "NIGHTLY=1 was set",
        pipeline_slug=env.get("BUILDKITE_PIPELINE_SLUG", ""),
        mirror_hw=s.mirror_hw,
        base_refresh_skip=s.base_refresh_skip,
        base_refresh_force=s.base_refresh_force,
    )


def user_deepep_arch(s: Settings) -> str | None:
    """DEEPEP_ROCM_ARCH for the image steps, only when the user set the arch (not the Dockerfile default)."""
    if not s.origin("arch").startswith(("flag", "env", "pyproject")):
        return None
    return ";".join(parse_arch_list(s.require("arch"), what="arch list"))


def options(s: Settings, changed: tuple[str, ...] | None, run_all: bool, nightly: bool, env=None, labels=()):
    """(generator options, bootstrap decision) for these settings and changed files."""
    decision = boot.decide(bootstrap_request(s, changed, run_all, nightly, env, labels))
    opts = gen.Options(inputs=decision.inputs, ci_image=s.ci_image, deepep_arch=user_deepep_arch(s))
    return opts, decision


PLAN_ACTIONS = {"run": "run", "blocked": "block", "skipped": "skip"}  # --only's words -> the generator's actions


def _changed_line(changed: list[str]) -> str:
    shown = ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else "")
    return f"changed files ({len(changed)}): {shown}"


def plan(i: Inputs, opts: gen.Options, decision: boot.Decision, changed: tuple[str, ...] | None = None) -> dict:
    """Why the pipeline looks as it does: a one-line summary, bootstrap's decisions, then each step's.

    `changed` is what the user gave (None: nothing); the decision's own list is empty when bootstrap stops
    early (docs only) or replaced by a sentinel (run_all, nightly).
    """
    inputs = decision.inputs
    given = [f for f in (changed or ()) if f]
    full = inputs.run_all == "1" or inputs.nightly == "1"
    lines = list(decision.reasons)
    if not decision.skip and not any(r.startswith(("run_all", "nightly")) for r in lines):
        lines.insert(0, "run_all 0, nightly 0: steps run when a changed file matches them")
    if given and (decision.skip or not full):
        lines.append(_changed_line(given))
    elif changed is None and not full:
        lines.append("no changed files given (--changed-files or --diff-base): only steps without dependencies run")
    lines.append(f"mirror_hw {inputs.mirror_hw}; branch {inputs.branch or '(none)'}")
    steps = []
    if not decision.skip:
        src = load(i)
        changed_files = gen.ChangedFiles(inputs.changed)  # split and indexed once, not once per step
        for step in src.steps:
            d = gen.decide(step, inputs, changed_files)
            steps.append({"action": d.action, "pool": step.pool, "label": step.label, "reason": d.reason})
    counts = {word: sum(s["action"] == action for s in steps) for word, action in PLAN_ACTIONS.items()}
    selected = sum(s["action"] == "run" and s["reason"] not in _RUNS_ANYWAY for s in steps)
    return {
        "summary": plan_summary(decision, counts, len(given), selected, full, inputs.mirror_hw),
        "counts": counts,
        "bootstrap": lines,
        "inputs": inputs.variables(),
        "steps": steps,
    }


# Reasons generate.decide gives a step that runs whatever changed; any other "run" was selected by a changed file.
_RUNS_ANYWAY = ("run_all", "nightly", "no source_file_dependencies: always runs", "autorun_on_main on branch main")


def plan_summary(
    decision: boot.Decision, counts: dict[str, int], changed: int, selected: int, full: bool, mirror: str
) -> str:
    """The plan in one sentence, printed first: what runs, and when nothing does, why."""
    from rocmci.report import plural

    if decision.skip:
        why = decision.skip.removesuffix(": no pipeline")
        return f"no pipeline: {why} ({plural(changed, 'changed file')}); bootstrap-amd.sh stops before the upload"
    total = sum(counts.values())
    head = (f"{counts['run']} of {total} steps run, {counts['blocked']} wait behind a block step, "
            f"{counts['skipped']} are not on {mirror}")  # fmt: skip
    if full:
        told = [r for r in decision.reasons if r.startswith(("nightly", "run_all")) and ": " in r]
        why = told[0].split(": ", 1)[1] if told else ""
        why = why or ("nightly" if decision.inputs.nightly == "1" else "run_all")
        if not counts["blocked"]:
            return f"{head}: {why}, every step on {mirror} runs"
        # the template blocks an optional step unless nightly is 1: run_all alone leaves those waiting
        return (f"{head}: {why}, every step on {mirror} runs except the {plural(counts['blocked'], 'optional step')}, "
                "which wait unless nightly (--nightly)")  # fmt: skip
    if changed and not selected:
        return f"{head}: no step's source_file_dependencies match the {plural(changed, 'changed file')}"
    if not changed:
        return f"{head}: no changed files given (--changed-files, --diff-base)"
    return head


def diff(template: Path, i: Inputs, opts: gen.Options, fuel: int | None = None):
    """ci-infra's render of `template` vs rocmci's generator, field by field."""
    from rocmci.pipeline import citemplate, conformance

    rendered = citemplate.render_ci_infra(template, i.source_path, opts.inputs, fuel=fuel)
    reference = citemplate.parse_pipeline(rendered, f"{template} rendered")
    src = load(i)
    # rocmci's side as it is uploaded too: written, then read back the way buildkite-agent reads it
    written = render(gen.generate(src, opts).pipeline, "yaml", i.source_name)
    ours = citemplate.parse_pipeline(written, f"rocmci's pipeline for {i.source_name}")
    return conformance.compare(reference, ours)


def load(i: Inputs) -> source.SourceFile:
    return source.load_source(i.source_path, i.source_name, what=i.source_what)


def build(i: Inputs, opts: gen.Options, workspace: Path) -> tuple[source.SourceFile, gen.Generated, validate.Report]:
    src = load(i)  # a file with no step for the mirror is valid: a no-step-for-mirror warning, not an exit 2
    ctx = context(i, workspace)
    generated = gen.generate(src, opts)
    report = validate.validate_generated(src, generated, ctx)
    return src, generated, report


def render(pipeline: dict, fmt: str, source_name: str) -> str:
    if fmt == "json":
        try:  # strict JSON: the model never puts a NaN or an infinity into a pipeline (scalars.py)
            return json.dumps(pipeline, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        except ValueError as exc:
            raise InputError(f"the pipeline cannot be written as JSON: {exc}", hint="write it as YAML") from None
    if fmt != "yaml":
        raise UsageError(f"unknown --format {fmt!r}", hint="choose yaml or json")
    from rocmci.pipeline import emit

    with no_gc():  # thousands of small strings, no cycles: a collection over the whole heap here costs ~30 ms
        return f"# Generated by rocmci from {source_name}; edit that file, not this one.\n{emit.dump(pipeline)}"


def load_pipeline_report(path: Path, ctx: rules.Context, workspace: Path) -> validate.Report:
    """A pipeline file, read as buildkite-agent reads it on upload (scalars.read_pipeline, bounded)."""
    from rocmci.files import read_bytes

    name = display_name(path, workspace)
    doc = scalars.read_pipeline(read_bytes(path, what="--pipeline", limit=yamldoc.MAX_BYTES, display=name), name)
    return validate.validate_pipeline_document(doc, ctx)


# ------------------------------------------------------------------------------ what the tasks call

# An image reference, plus Buildkite's upload-time $VAR / ${VAR}, for tags written into the pipeline.
# The variable's name is possessive (*+): the text after it may hold the same letters, and letting the two
# share them made a failed match try every split of every $VAR (exponential: 'x' + '$AAAA' * 25 + '!' hung).
_CI_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*(?:\$\{?[A-Z_][A-Z0-9_]*+\}?[A-Za-z0-9._-]*)*")


def generate_options(
    s: Settings, changed_file=None, diff_base=None, run_all=False, nightly=False, labels=(), changed=None
):  # fmt: skip
    """(generator options, bootstrap decision): the inputs bootstrap-amd.sh would give the template.

    `changed`: the changed files when the caller read them already (pipeline.plan shows them too).
    """
    if not _CI_IMAGE.fullmatch(s.ci_image):
        raise UsageError(
            f"ci_image {s.ci_image!r} ({s.origin('ci_image')}) is not an image reference",
            hint="e.g. rocm/vllm-ci:build-$BUILDKITE_BUILD_ID; it is written into the pipeline's env",
        )
    if changed is None:
        changed = changed_files(changed_file, diff_base, s.workspace, s.git_timeout)
    return options(s, changed, run_all, nightly, labels=labels)


def validate_source_file(path: str, s: Settings) -> tuple[str, validate.Report]:
    """Generate a step file in memory and validate it, as `pipeline.validate --source` does: (name, report).

    The pre-commit hook's one call; expected failures are RocmciErrors (one line, exit code).
    """
    i = inputs(s, path)
    opts, _ = generate_options(s)
    with no_gc():
        _, _, report = build(i, opts, s.workspace)
    return i.source_name, report
