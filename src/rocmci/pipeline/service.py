"""The pipeline tasks end to end: settings -> load -> generate -> validate -> render.

pipeline/tasks.py holds what the tasks call (flags already parsed, cli/flags.py); `validate_source_file`
is what the pre-commit hook calls.
"""

from __future__ import annotations

import difflib
import gc
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import yaml

from rocmci import yamldoc
from rocmci.arch import parse_arch_list
from rocmci.errors import UsageError
from rocmci.files import read_lines
from rocmci.pipeline import bootstrap as boot
from rocmci.pipeline import generate as gen
from rocmci.pipeline import inventory as inv
from rocmci.pipeline import rules, source, validate
from rocmci.settings import Settings

try:
    from yaml import CSafeDumper as _Dumper
except ImportError:  # pragma: no cover
    from yaml import SafeDumper as _Dumper  # type: ignore[assignment]


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


def inputs(s: Settings, source_override: str | None = None) -> Inputs:
    # realpath, not Path.resolve()/is_file(): a loop, a NUL or an over-long name reaches the file reader,
    # which names it (and the flag or setting) in one line.
    src = Path(os.path.realpath(source_override)) if source_override else s.path("source")
    inventory_path = s.path("inventory")
    inventory_what = s.describe("inventory")
    if s.origin("inventory") == "default" and not os.path.lexists(inventory_path):
        inventory_path = packaged_inventory()  # e.g. the pre-commit hook in another repository
        inventory_what = "the packaged inventory"
    return Inputs(
        source_path=src,
        source_name=display_name(src, s.workspace),
        inventory_path=inventory_path,
        archs=parse_arch_list(s.require("arch"), what="arch list"),
        source_what="--source" if source_override else s.describe("source"),
        inventory_what=inventory_what,
    )


def context(i: Inputs, workspace: Path) -> rules.Context:
    doc = yamldoc.load(i.inventory_path, display_name(i.inventory_path, workspace), what=i.inventory_what)
    inventory = inv.from_document(doc)
    return rules.Context(inventory=inventory, archs=i.archs)


def changed_files(changed_file: str | None, diff_base: str | None, workspace: Path) -> tuple[str, ...] | None:
    """The changed paths: from a file, or `git diff` against the merge base as bootstrap-amd.sh computes them."""
    if changed_file and diff_base:
        raise UsageError("give --changed-files or --diff-base, not both")
    if changed_file:
        return read_lines(Path(changed_file), what="--changed-files")
    if diff_base:
        return boot.git_changed_files(diff_base, workspace)
    return None


def bootstrap_request(s: Settings, changed: tuple[str, ...] | None, run_all: bool, nightly: bool, env=None):
    """What bootstrap-amd.sh would read: the settings stand in for its environment variables."""
    env = os.environ if env is None else env
    return boot.Request(
        changed=changed or (),
        branch=s.branch or env.get("BUILDKITE_BRANCH", ""),
        run_all=run_all,
        nightly=nightly,
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


def options(s: Settings, changed: tuple[str, ...] | None, run_all: bool, nightly: bool, env=None):
    """(generator options, bootstrap decision) for these settings and changed files."""
    decision = boot.decide(bootstrap_request(s, changed, run_all, nightly, env))
    opts = gen.Options(inputs=decision.inputs, ci_image=s.ci_image, deepep_arch=user_deepep_arch(s))
    return opts, decision


def plan(i: Inputs, opts: gen.Options, decision: boot.Decision) -> dict:
    """Why the pipeline looks as it does: bootstrap's decisions, then each step's."""
    inputs = decision.inputs
    lines = [f"no pipeline: {decision.skip}"] if decision.skip else []
    lines += list(decision.reasons) or ["run_all 0, nightly 0: steps run when a changed file matches them"]
    changed = [f for f in inputs.changed if f]
    if changed and inputs.run_all != "1" and inputs.nightly != "1":
        lines.append(
            f"changed files ({len(changed)}): " + ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else "")
        )
    elif not changed:
        lines.append("no changed files given (--changed-files or --diff-base): only steps without dependencies run")
    lines.append(f"mirror_hw {inputs.mirror_hw}; branch {inputs.branch or '(none)'}")
    steps = []
    if not decision.skip:
        src = load(i)
        check_mirror_hw(src, inputs.mirror_hw)
        for step in src.steps:
            d = gen.decide(step, inputs, inputs.changed)
            steps.append({"action": d.action, "pool": step.pool, "label": step.label, "reason": d.reason})
    return {"bootstrap": lines, "inputs": inputs.variables(), "steps": steps}


def diff(template: Path, i: Inputs, opts: gen.Options):
    """ci-infra's render of `template` vs rocmci's generator, field by field."""
    from rocmci.pipeline import citemplate, conformance

    rendered = citemplate.render_ci_infra(template, i.source_path, opts.inputs)
    reference = citemplate.parse_pipeline(rendered, f"{template} rendered")
    src = load(i)
    ours = gen.generate(src, opts).pipeline["steps"]
    return conformance.compare(reference, ours)


def load(i: Inputs) -> source.SourceFile:
    return source.load_source(i.source_path, i.source_name, what=i.source_what)


def check_mirror_hw(src: source.SourceFile, mirror_hw: str) -> None:
    """A mirror_hw no step lists would give a pipeline with only the image steps: a typo, not a choice."""
    known = sorted({m for step in src.steps for m in (step.data.get("mirror_hardwares") or []) if isinstance(m, str)})
    if known and mirror_hw not in known:
        close = difflib.get_close_matches(mirror_hw, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"the steps list: {', '.join(known)}"
        raise UsageError(f"no step in {src.filename} lists mirror_hw {mirror_hw!r}", hint=hint)


def build(i: Inputs, opts: gen.Options, workspace: Path) -> tuple[source.SourceFile, gen.Generated, validate.Report]:
    src = load(i)
    check_mirror_hw(src, opts.inputs.mirror_hw)
    ctx = context(i, workspace)
    generated = gen.generate(src, opts)
    report = validate.validate_generated(src, generated, ctx)
    return src, generated, report


def render(pipeline: dict, fmt: str, source_name: str) -> str:
    if fmt == "json":
        return json.dumps(pipeline, indent=2, ensure_ascii=False) + "\n"
    if fmt != "yaml":
        raise UsageError(f"unknown --format {fmt!r}", hint="choose yaml or json")
    body = yaml.dump(pipeline, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1_000_000)
    return f"# Generated by rocmci from {source_name}; edit that file, not this one.\n{body}"


def load_pipeline_report(path: Path, ctx: rules.Context, workspace: Path) -> validate.Report:
    doc = yamldoc.load(path, display_name(path, workspace), what="--pipeline")
    return validate.validate_pipeline_document(doc, ctx)


# ------------------------------------------------------------------------------ what the tasks call

# An image reference, plus Buildkite's upload-time $VAR / ${VAR}, for tags written into the pipeline.
_CI_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*(?:\$\{?[A-Z_][A-Z0-9_]*\}?[A-Za-z0-9._-]*)*")


@contextmanager
def no_gc():
    """Pipeline work builds many small acyclic objects: cyclic GC passes over them cost time, free nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def generate_options(s: Settings, changed_file=None, diff_base=None, run_all=False, nightly=False):
    """(generator options, bootstrap decision): the inputs bootstrap-amd.sh would give the template."""
    if not _CI_IMAGE.fullmatch(s.ci_image):
        raise UsageError(
            f"ci_image {s.ci_image!r} ({s.origin('ci_image')}) is not an image reference",
            hint="e.g. rocm/vllm-ci:build-$BUILDKITE_BUILD_ID; it is written into the pipeline's env",
        )
    return options(s, changed_files(changed_file, diff_base, s.workspace), run_all, nightly)


def validate_source_file(path: str, s: Settings) -> tuple[str, validate.Report]:
    """Generate a step file in memory and validate it, as `pipeline.validate --source` does: (name, report).

    The pre-commit hook's one call; expected failures are RocmciErrors (one line, exit code).
    """
    i = inputs(s, path)
    opts, _ = generate_options(s)
    with no_gc():
        _, _, report = build(i, opts, s.workspace)
    return i.source_name, report
