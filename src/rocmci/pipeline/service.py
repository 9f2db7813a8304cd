"""The pipeline tasks end to end: settings -> load -> generate -> validate -> render."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from rocmci.arch import parse_arch_list
from rocmci.errors import InputError, UsageError
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


_GIT_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/~^@{}-]{0,199}")


@dataclass(frozen=True)
class Inputs:
    source_path: Path
    source_name: str
    inventory_path: Path
    archs: tuple[str, ...]


def display_name(path: Path, workspace: Path) -> str:
    try:
        return str(path.resolve().relative_to(workspace))
    except ValueError:
        return str(path)


def packaged_inventory() -> Path:
    """The inventory shipped in the package (the same file as this repository's .buildkite/agents.yaml)."""
    return Path(__file__).resolve().parents[1] / "data" / "agents.yaml"


def inputs(s: Settings, source_override: str | None = None) -> Inputs:
    src = Path(source_override).resolve() if source_override else s.path("source")
    inventory_path = s.path("inventory")
    if s.origin("inventory") == "default" and not inventory_path.is_file():
        inventory_path = packaged_inventory()  # e.g. the pre-commit hook in another repository
    return Inputs(
        source_path=src,
        source_name=display_name(src, s.workspace),
        inventory_path=inventory_path,
        archs=parse_arch_list(s.require("arch"), what="arch list"),
    )


def context(i: Inputs, workspace: Path) -> rules.Context:
    inventory = inv.load_inventory(i.inventory_path, display_name(i.inventory_path, workspace))
    return rules.Context(inventory=inventory, archs=i.archs)


def changed_files(changed_file: str | None, diff_base: str | None, workspace: Path) -> tuple[str, ...] | None:
    """The changed paths: from a file, or `git diff` against the merge base as bootstrap-amd.sh computes them."""
    if changed_file and diff_base:
        raise UsageError("give --changed-files or --diff-base, not both")
    if changed_file:
        return read_lines(Path(changed_file))
    if diff_base:
        if diff_base.startswith("-") or not _GIT_REF.fullmatch(diff_base):
            raise UsageError(f"--diff-base {diff_base!r} is not a git ref")
        proc = subprocess.run(
            ["git", "diff", "--name-only", "--diff-filter=ACMDR", f"{diff_base}...HEAD", "--"],
            cwd=workspace,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(
                f"git diff against {diff_base!r} failed: {last}", hint="fetch the ref, or use --changed-files"
            )
        return tuple(line for line in proc.stdout.splitlines() if line)
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
        src = source.load_source(i.source_path, i.source_name)
        for step in src.steps:
            d = gen.decide(step, inputs, inputs.changed)
            steps.append({"action": d.action, "pool": step.pool, "label": step.label, "reason": d.reason})
    return {"bootstrap": lines, "inputs": inputs.variables(), "steps": steps}


def diff(template: Path, i: Inputs, opts: gen.Options):
    """ci-infra's render of `template` vs rocmci's generator, field by field."""
    from rocmci.pipeline import citemplate, conformance

    rendered = citemplate.render_ci_infra(template, i.source_path, opts.inputs)
    reference = citemplate.parse_pipeline(rendered, f"{template} rendered")
    src = source.load_source(i.source_path, i.source_name)
    ours = gen.generate(src, opts).pipeline["steps"]
    return conformance.compare(reference, ours)


def build(i: Inputs, opts: gen.Options, workspace: Path) -> tuple[source.SourceFile, gen.Generated, validate.Report]:
    src = source.load_source(i.source_path, i.source_name)
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


def format_report(report: validate.Report, as_json: bool) -> str:
    if as_json:
        return json.dumps(
            {
                "errors": report.errors,
                "warnings": report.warnings,
                "steps": report.steps,
                "findings": [f.as_dict() for f in report.findings],
            },
            indent=2,
        )
    lines = [f.text() for f in report.findings]
    lines.append(f"{report.errors} error(s), {report.warnings} warning(s) in {report.steps} {report.subject}")
    return "\n".join(lines)


def load_pipeline_report(path: Path, ctx: rules.Context, workspace: Path) -> validate.Report:
    if not path.exists():
        raise InputError("no such file", where=str(path))
    return validate.validate_pipeline_file(path, ctx, display_name(path, workspace))
