"""Validation passes: YAML and duplicate keys, Buildkite's schema, then the AMD CI rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmci.errors import InputError
from rocmci.pipeline import rules, schema, yamldoc
from rocmci.pipeline.findings import ERROR, Finding
from rocmci.pipeline.generate import ORIGIN_ENV, Generated
from rocmci.pipeline.model import Pipeline, walk_steps
from rocmci.pipeline.source import SourceFile

# Where a key of a generated step came from in the source step.
_SOURCE_KEY = {
    "agents": "agent_pool",
    "label": "label",
    "key": "label",
    "timeout_in_minutes": "timeout_in_minutes",
    "parallelism": "parallelism",
    "VLLM_TEST_COMMANDS": "commands",
    "VLLM_CI_EXPECTED_GPU_COUNT": "num_gpus",
}


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    steps: int = 0
    subject: str = "steps"  # what `steps` counts, for the summary line

    @property
    def errors(self) -> int:
        return sum(f.severity == ERROR for f in self.findings)

    @property
    def warnings(self) -> int:
        return len(self.findings) - self.errors


def check(pipeline: Pipeline, ctx: rules.Context) -> list[Finding]:
    findings: list[Finding] = []
    if not schema.is_valid(pipeline.data):
        for path, message in schema.diagnose(pipeline.data):
            findings.append(pipeline.report(path, "schema", ERROR, message))
    for rule in rules.RULES:
        findings.extend(rule(pipeline, ctx))
    return findings


def _origin_from_env(step: Any) -> str | None:
    if isinstance(step, dict) and isinstance(step.get("env"), dict):
        value = step["env"].get(ORIGIN_ENV)
        return value if isinstance(value, str) else None
    return None


def validate_pipeline_document(doc: yamldoc.Document, ctx: rules.Context) -> Report:
    """An existing Buildkite pipeline file, in mapping or list form."""
    data = doc.data
    report = Report()
    report.findings += [
        Finding.at(
            doc,
            d.path,
            "duplicate-key",
            ERROR,
            f"duplicate key '{d.key}' (first at line {d.first.line}); Buildkite would silently keep the last one",
        )
        for d in doc.duplicates
    ]
    if isinstance(data, list):
        data = {"steps": data}
        prefix_fix = True
    elif isinstance(data, dict) and "steps" in data:
        prefix_fix = False
    else:
        raise InputError(
            "a pipeline is a list of steps or a mapping with 'steps'",
            where=doc.where(()),
            hint="for a vLLM step file use --source",
        )

    def to_doc_path(path: tuple) -> tuple:
        return path[1:] if prefix_fix and path and path[0] == "steps" else path

    def report_at(path, rule, severity, message):
        step_path = path[:2]
        origin = origins.get(step_path)
        return Finding.at(doc, to_doc_path(path), rule, severity, message, origin)

    steps = walk_steps(data, lambda path, step: _origin_from_env(step))
    origins = {s.path: s.origin for s in steps}
    pipeline = Pipeline(data, steps, report_at)
    report.findings += check(pipeline, ctx)
    report.steps = len(steps)
    report.findings.sort()
    return report


def validate_pipeline_file(path: Path, ctx: rules.Context, display: str | None = None) -> Report:
    return validate_pipeline_document(yamldoc.load(path, display), ctx)


def validate_generated(source: SourceFile, generated: Generated, ctx: rules.Context) -> Report:
    """A pipeline generated in memory: findings point at the source step that produced the bad part."""
    doc = source.doc
    image_where = f"<generated image step from {source.filename}>"

    def report_at(path, rule, severity, message):
        step = generated.origins[path[1]] if len(path) >= 2 and isinstance(path[1], int) else None
        if step is None:
            return Finding(image_where, 1, 1, rule, severity, f"generated step {path}: {message}")
        src_env = step.data.get("env") or {}
        if path[2:3] == ("env",) and len(path) > 3 and path[3] in src_env:
            src_path = ("steps", step.index, "env", path[3])  # an env entry copied from the step file
        else:
            src_key = next((_SOURCE_KEY[p] for p in reversed(path[2:]) if p in _SOURCE_KEY), None)
            src_path = ("steps", step.index, src_key) if src_key and src_key in step.data else ("steps", step.index)
        key = generated.pipeline["steps"][path[1]].get("key", "?")
        origin = f"{doc.filename}:{doc.pos(('steps', step.index)).line}"
        return Finding.at(doc, src_path, rule, severity, f"{message} [generated step {key}]", origin)

    steps = walk_steps(generated.pipeline, lambda path, step: None)
    pipeline = Pipeline(generated.pipeline, steps, report_at)
    report = Report(findings=list(source.findings) + check(pipeline, ctx), steps=len(steps), subject="generated steps")
    report.findings.sort()
    return report
