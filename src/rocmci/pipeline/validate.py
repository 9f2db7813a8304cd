"""Validation passes: YAML and duplicate keys, Buildkite's schema, then the AMD CI rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.findings import ERROR, Finding
from rocmci.pipeline import amdsteps as amd
from rocmci.pipeline import rules, scalars, schema
from rocmci.pipeline.generate import ORIGIN_ENV, Generated
from rocmci.pipeline.model import Pipeline, walk_steps, written_commands
from rocmci.pipeline.source import SourceFile, SourceStep

GROUP_STEPS = ("steps", 0, "steps")  # generated test steps live in the "AMD Tests" group

# Where a key of a generated step came from in the source step.
_SOURCE_KEY = {
    "agents": "agent_pool",
    "label": "label",
    "key": "label",
    "timeout_in_minutes": "timeout_in_minutes",
    "parallelism": "parallelism",
    "VLLM_TEST_COMMANDS": "commands",
    "VLLM_CI_EXPECTED_GPU_COUNT": "num_gpus",
    "amd.com/gpu": "num_gpus",
    "depends_on": "label",
}


class Report:
    """Findings and the number of steps judged."""

    __slots__ = ("findings", "steps", "subject")

    def __init__(self, findings: list[Finding] | None = None, steps: int = 0, subject: str = "steps") -> None:
        self.findings: list[Finding] = [] if findings is None else findings
        self.steps = steps
        self.subject = subject  # what `steps` counts, for the summary line

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
        origin = origins.get(path[:4]) or origins.get(path[:2])  # a group member, or a top-level step
        return Finding.at(doc, to_doc_path(path), rule, severity, message, origin)

    steps = walk_steps(data, lambda path, step: _origin_from_env(step))
    origins = {s.path: s.origin for s in steps}
    pipeline = Pipeline(data, steps, report_at)
    report.findings += check(pipeline, ctx)
    report.steps = len(steps)
    report.findings.sort()
    return report


def validate_pipeline_file(
    path: Path, ctx: rules.Context, display: str | None = None, *, what: str | None = "--pipeline"
) -> Report:
    return validate_pipeline_document(yamldoc.load(path, display, what=what), ctx)


def _source_path(step: SourceStep, rest: tuple) -> tuple:
    """Where in the step file the part of a generated step at `rest` came from."""
    base = ("steps", step.index)
    if rest[:1] in (("commands",), ("command",)):
        return (*base, *rest)  # the virtual per-command paths of _source_commands
    if rest[:1] == ("env",) and len(rest) > 1 and rest[1] in (step.data.get("env") or {}):
        return (*base, "env", rest[1])  # a no_plugin step's env entry, copied from the step file
    tags = step.data.get("agent_tags")
    if rest[:1] == ("agents",) and len(rest) > 1 and isinstance(tags, dict) and rest[1] in tags:
        return (*base, "agent_tags", rest[1])  # a native step's agent tag, copied from the step file
    if rest[:2] == ("env", "VLLM_NODE_COMMAND_COUNT"):
        return (*base, "commands") if "commands" in step.data else base
    if rest[:1] == ("env",) and len(rest) > 1 and str(rest[1]).startswith("VLLM_NODE_COMMAND_"):
        node = str(rest[1]).rpartition("_")[2]
        return (*base, "commands", int(node)) if node.isdigit() and len(node) < 4 else (*base, "commands")
    src_key = next((_SOURCE_KEY[p] for p in reversed(rest) if p in _SOURCE_KEY), None)
    return (*base, src_key) if src_key and src_key in step.data else base


def _source_commands(generated: Generated):
    """Each generated test step runs its step file commands: check those, one by one, at their own lines."""

    def commands(ref) -> list:
        path = ref.path
        if len(path) == 4 and path[:3] == GROUP_STEPS and isinstance(ref.data, dict) and "command" in ref.data:
            step = generated.origins[path[3]]
            if step is not None:
                data = step.data
                if isinstance(data.get("command"), str):
                    return [((*path, "command"), data["command"])]
                out = []
                listed = data.get("commands")
                if isinstance(listed, str):  # joined character by character: the text itself runs
                    return [((*path, "commands"), listed)]
                for i, c in enumerate(listed if isinstance(listed, list) else []):
                    if isinstance(c, str):
                        out.append(((*path, "commands", i), c))
                    elif isinstance(c, list):  # one node's commands (num_nodes >= 2)
                        out += [((*path, "commands", i, j), n) for j, n in enumerate(c) if isinstance(n, str)]
                return out
        return written_commands(ref)

    return commands


def _whole_pipeline(
    source: SourceFile, generated: Generated, steps: list, rule: str, severity: str, message: str
) -> Finding:
    """A finding about the whole generated pipeline, placed in the step file.

    For the step limit that is the source step which generated the first step past it, so the user sees
    where to split the file; otherwise the file's `steps:` key.
    """
    doc = source.doc
    if len(steps) > rules.MAX_STEPS:
        path = steps[rules.MAX_STEPS].path
        inside = len(path) >= 4 and path[:3] == GROUP_STEPS and isinstance(path[3], int)
        origin = generated.origins[path[3]] if inside else None
        if origin is not None:
            return Finding.at(
                doc,
                ("steps", origin.index),
                rule,
                severity,
                f"{message} (generated step {rules.MAX_STEPS + 1} comes from this step)",
            )
    return Finding.at(doc, ("steps",), rule, severity, message)


def _breaks(fn, text: str) -> bool:
    """Whether the template's paste of `text` breaks the YAML or changes the value (scalars.py decides)."""
    try:
        return fn(text) != text
    except scalars.TemplateBreak:
        return True


def _problem_at(data: dict, key: str) -> tuple:
    """The list item or entry under `key` that a template problem comes from, so that the finding sits on
    its own line (a command, a node's command, an env entry, an agent tag); the key when none is alone at fault."""
    value = data.get(key)
    if key == "commands" and isinstance(value, list):
        for i, item in enumerate(value):
            for j, text in enumerate(item) if isinstance(item, list) else [(None, item)]:
                if not isinstance(text, str):
                    continue
                # no_plugin pastes the commands bare; otherwise into VLLM_TEST_COMMANDS' double quotes
                broken = (
                    _breaks(scalars.plain_string, text) if data.get("no_plugin") else _raises(amd.test_commands, text)
                )
                if broken:
                    return (key, i) if j is None else (key, i, j)
    if key in ("env", "agent_tags") and isinstance(value, dict):
        for name, item in value.items():
            if _breaks(scalars.plain_key, amd.rust_text(name)):
                return (key, name)
            fn = scalars.plain_string if key == "env" else scalars.double_quoted
            if item is not None and _breaks(fn, amd.rust_text(item)):
                return (key, name)
    return (key,)


def _raises(fn, text: str) -> bool:
    try:
        fn(text, "/w")
    except scalars.TemplateBreak:
        return True
    return False


def _masked(text: str) -> str:
    """A step's name as a finding shows it: a token in a label (a finding itself) is never printed."""
    from rocmci.secrets import Redactor

    return Redactor()(text)


def validate_generated(source: SourceFile, generated: Generated, ctx: rules.Context) -> Report:
    """A pipeline generated in memory: findings point at the source step (and line) that produced the bad part."""
    doc = source.doc
    where_generated = f"<generated from {source.filename}>"

    def report_at(path, rule, severity, message):
        if path == ("steps",):  # the pipeline as a whole (the step limit): the step file's steps, at the overflow
            return _whole_pipeline(source, generated, steps, rule, severity, message)
        inside = len(path) >= 4 and path[:3] == GROUP_STEPS and isinstance(path[3], int)
        step = generated.origins[path[3]] if inside else None
        if step is None:
            return Finding(where_generated, 1, 1, rule, severity, f"template step {path}: {message}")
        key = _masked(str(generated.steps[path[3]].get("key") or generated.steps[path[3]].get("label", "?")))
        origin = f"{doc.filename}:{doc.pos(('steps', step.index)).line}"
        return Finding.at(doc, _source_path(step, path[4:]), rule, severity, f"{message} [step {key}]", origin)

    steps = walk_steps(generated.pipeline, lambda path, step: None)
    pipeline = Pipeline(generated.pipeline, steps, report_at, _source_commands(generated))
    findings = source.findings_for(generated.mirror_hw) + check(pipeline, ctx)
    findings += [
        Finding.at(doc, ("steps", pr.step.index, *_problem_at(pr.step.data, pr.key)), pr.rule, pr.severity, pr.message)
        for pr in generated.problems
    ]
    # A secret is found in the step file and again where the template copies it: one finding per place,
    # the generated pipeline's (it names the env variable the job would see).
    seen: set[tuple] = set()
    for f in reversed([f for f in findings if f.rule == "secret-in-pipeline"]):
        if (f.file, f.line) in seen:
            findings.remove(f)
        seen.add((f.file, f.line))
    report = Report(findings=findings, steps=len(steps), subject="generated steps")
    report.findings.sort()
    return report
