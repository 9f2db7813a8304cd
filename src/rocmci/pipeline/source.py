"""vLLM-style step files (.buildkite/test-amd.yaml): load, check each step's shape, keep positions."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.findings import ERROR, WARNING, Finding

# The step format as vLLM's AMD generator reads it: key -> (expected type name, checker).
_STR = ("a string", lambda v: isinstance(v, str))
_BOOL = ("true or false", lambda v: isinstance(v, bool))
_INT = ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
_STR_LIST = ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v))
_STR_MAP = (
    "a mapping of names to strings",
    lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str | int | bool) for k, x in v.items()),
)
_TAGS = ("a list of strings or a mapping", lambda v: _STR_LIST[1](v) or isinstance(v, dict))

STEP_KEYS: dict[str, tuple[str, Any]] = {
    "label": _STR,
    "agent_pool": _STR,
    "mirror_hardwares": _STR_LIST,
    "commands": _STR_LIST,
    "command": _STR,
    "source_file_dependencies": _STR_LIST,
    "working_dir": _STR,
    "num_gpus": _INT,
    "num_nodes": _INT,
    "optional": _BOOL,
    "timeout_in_minutes": _INT,
    "dind": _BOOL,
    "no_gpu": _BOOL,
    "parallelism": _INT,
    "fast_check": _BOOL,
    "fast_check_only": _BOOL,
    "soft_fail": _BOOL,
    "torch_nightly": _BOOL,
    "env": _STR_MAP,
    "no_plugin": _BOOL,
    "agent_tags": _TAGS,
    "autorun_on_main": _BOOL,
}
REQUIRED = ("label", "agent_pool")
# Upper bounds of the numbers a step gives: far above anything vLLM's files use (parallelism 6, 8 GPUs,
# 180 minutes, which the template caps anyway), low enough that a typo cannot ask Buildkite for a
# hundred million jobs. The lower bound of all four is 1.
MAXIMA = {"num_gpus": 64, "num_nodes": 64, "timeout_in_minutes": 7 * 24 * 60, "parallelism": 100}


class SourceStep(NamedTuple):
    index: int
    data: dict[str, Any]
    where: str  # file:line:col of the step

    @property
    def label(self) -> str:
        return self.data["label"]

    @property
    def pool(self) -> str:
        return self.data["agent_pool"]

    @property
    def commands(self) -> list[str]:
        if "commands" in self.data:
            return list(self.data["commands"])
        return [self.data["command"]] if "command" in self.data else []


@dataclass
class SourceFile:
    doc: yamldoc.Document
    steps: list[SourceStep]
    findings: list[Finding]

    @property
    def filename(self) -> str:
        return self.doc.filename


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, list(STEP_KEYS), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def check_step(doc: yamldoc.Document, index: int, step: Any) -> list[Finding]:
    path = ("steps", index)
    if not isinstance(step, dict):
        return [Finding.at(doc, path, "source-schema", ERROR, f"step {index + 1} must be a mapping, got {_kind(step)}")]
    out = []
    for key, value in step.items():
        spec = STEP_KEYS.get(key)
        if spec is None:
            out.append(
                Finding.at(
                    doc, (*path, key), "source-schema", ERROR, f"unknown step key '{key}'{_did_you_mean(str(key))}"
                )
            )
        elif not spec[1](value):
            out.append(
                Finding.at(doc, (*path, key), "source-schema", ERROR, f"'{key}' must be {spec[0]}, got {_kind(value)}")
            )
    for key in REQUIRED:
        if key not in step:
            out.append(Finding.at(doc, path, "source-schema", ERROR, f"step has no '{key}'"))
    if "commands" in step and "command" in step:
        out.append(
            Finding.at(doc, (*path, "command"), "source-schema", ERROR, "give 'commands' or 'command', not both")
        )
    elif "commands" not in step and "command" not in step:
        out.append(Finding.at(doc, path, "source-schema", ERROR, "step has no 'commands'"))
    if "env" in step and not step.get("no_plugin"):
        out.append(
            Finding.at(
                doc,
                (*path, "env"),
                "source-schema",
                WARNING,
                "the template passes a step's env only with no_plugin: true; these variables never reach the job "
                "(put them in front of the command instead)",
            )
        )
    for key, most in MAXIMA.items():
        value = step.get(key)
        if _INT[1](value) and value < 1:
            out.append(
                Finding.at(doc, (*path, key), "source-schema", ERROR, f"'{key}' must be at least 1, got {value}")
            )
        elif _INT[1](value) and value > most:
            out.append(
                Finding.at(doc, (*path, key), "source-schema", ERROR, f"'{key}' must be at most {most}, got {value}")
            )
    out.extend(_empty_parts(doc, path, step))
    return out


def _empty_parts(doc: yamldoc.Document, path: tuple, step: dict) -> list[Finding]:
    """An empty label names nothing; an empty command list runs nothing, and a blank command joins
    into `a &&  && b`, which bash refuses."""
    out = []
    label = step.get("label")
    if isinstance(label, str) and not label.strip():
        out.append(Finding.at(doc, (*path, "label"), "source-schema", ERROR, "'label' is empty"))
    commands = step.get("commands")
    if isinstance(commands, list) and not commands:
        out.append(Finding.at(doc, (*path, "commands"), "source-schema", ERROR, "'commands' is empty: nothing to run"))
    elif _STR_LIST[1](commands):
        for i, command in enumerate(commands):
            if not command.strip():
                out.append(
                    Finding.at(doc, (*path, "commands", i), "source-schema", ERROR, f"command {i + 1} is empty")
                )
    command = step.get("command")
    if isinstance(command, str) and not command.strip():
        out.append(Finding.at(doc, (*path, "command"), "source-schema", ERROR, "'command' is empty: nothing to run"))
    return out


def generatable(step: Any) -> bool:
    """Whether the template can make a step of it: unknown keys are ignored, wrong types are not guessed at."""
    if not isinstance(step, dict) or any(key not in step for key in REQUIRED):
        return False
    if "commands" not in step and "command" not in step:
        return False
    if not all(STEP_KEYS[key][1](value) for key, value in step.items() if key in STEP_KEYS):
        return False
    # Nothing to generate from: no label, no command, or a number past its bound (never uploaded, not even held).
    commands = step["commands"] if "commands" in step else [step["command"]]
    if not step["label"].strip() or not commands or any(not c.strip() for c in commands):
        return False
    return all(step.get(key, 1) <= most for key, most in MAXIMA.items())


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    return {dict: "a mapping", list: "a list"}.get(type(value), f"{type(value).__name__} {value!r}")


def from_document(doc: yamldoc.Document) -> SourceFile:
    findings = [
        Finding.at(doc, d.path, "duplicate-key", ERROR, f"duplicate key '{d.key}' (first at line {d.first.line})")
        for d in doc.duplicates
    ]
    data = doc.data
    if isinstance(data, dict) and "steps" in data:
        raw_steps = data["steps"]
    else:
        raise InputError(
            "a step file is a mapping with a 'steps' list", where=doc.where(()), hint="start the file with 'steps:'"
        )
    if not isinstance(raw_steps, list):
        raise InputError("'steps' must be a list", where=doc.where(("steps",)))
    for extra in data:
        if extra != "steps":
            findings.append(Finding.at(doc, (extra,), "source-schema", ERROR, f"unknown top-level key '{extra}'"))
    steps = []
    for i, raw in enumerate(raw_steps):
        findings.extend(check_step(doc, i, raw))
        if generatable(raw):
            steps.append(SourceStep(index=i, data=raw, where=doc.where(("steps", i))))
    seen: dict[tuple[str, str], SourceStep] = {}
    for step in steps:
        ident = (step.pool, step.label)
        if ident in seen:
            findings.append(
                Finding.at(
                    doc,
                    ("steps", step.index, "label"),
                    "unique-key",
                    ERROR,
                    f"another step on {step.pool} has the label {step.label!r} ({seen[ident].where}); "
                    "generated keys would clash: rename one",
                )
            )
        seen[ident] = step
    return SourceFile(doc=doc, steps=steps, findings=findings)


def load_source(path: Path, display: str | None = None, *, what: str | None = None) -> SourceFile:
    return from_document(yamldoc.load(path, display, what=what))
