"""vLLM-style step files (.buildkite/test-amd.yaml): load, check each step's shape, keep positions."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, NamedTuple

from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.findings import ERROR, WARNING, Finding
from rocmci.pipeline import amdsteps, scalars

# What a key means to vLLM's real AMD CI decides how bad a mistake in it is (README "Severity"): an error
# only where ci-infra's test-template-amd.j2 would render a step that breaks (upload refused, never
# scheduled, waits forever, wrong GPUs or command), a warning otherwise.
_STR = ("a string", lambda v: isinstance(v, str))
_BOOL = ("true or false", lambda v: isinstance(v, bool))
_INT = ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
_STR_LIST = ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v))
# vLLM's multi-node format: one list of commands per node (run-amd-test.sh reads VLLM_NODE_COMMAND_<i>).
_COMMANDS = (
    "a list of strings (or, with num_nodes, a list of per-node lists of strings)",
    lambda v: (
        isinstance(v, list)
        and all(isinstance(i, str) or (isinstance(i, list) and all(isinstance(c, str) for c in i)) for i in v)
    ),
)
_STR_MAP = (
    "a mapping of names to strings",
    lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, (str, int, bool)) for k, x in v.items()),
)
_TAGS = ("a list of strings or a mapping", lambda v: _STR_LIST[1](v) or isinstance(v, dict))

# Keys the AMD template reads: (type it needs, what the step loses when the key is misspelled).
READ_KEYS: dict[str, tuple[tuple[str, Any], str]] = {
    "label": (_STR, "the step has no name and its block key is 'block-<pool>-'"),
    "agent_pool": (_STR, "the step is rendered on the queue 'amd_' that no agent serves: it is never scheduled"),
    "mirror_hardwares": (_STR_LIST, "this step is never rendered for AMD"),
    "commands": (_COMMANDS, "the step runs no command"),
    "command": (_STR, "the step runs no command"),
    "source_file_dependencies": (_STR_LIST, "the step runs on every build"),
    "working_dir": (_STR, "its commands run in /vllm-workspace/tests"),
    "num_gpus": (_INT, "the step gets 1 GPU"),
    "num_nodes": (_INT, "the step runs on one node"),
    "optional": (_BOOL, "the step runs without a manual unblock"),
    "timeout_in_minutes": (_INT, "the step gets the 180-minute default"),
    "dind": (_BOOL, "the step runs in Docker-in-Docker, not in a Kubernetes pod"),
    "no_gpu": (_BOOL, "the step gets a GPU"),
    "parallelism": (_INT, "the step is not sharded"),
    "env": (_STR_MAP, "these variables never reach the job"),
    "no_plugin": (_BOOL, "the step runs through run-amd-test.sh"),
    "agent_tags": (_TAGS, "the step's agent tags are not set"),
    "autorun_on_main": (_BOOL, "the step waits for a manual unblock on main"),
}
STEP_KEYS = {key: spec for key, (spec, _) in READ_KEYS.items()}
# Keys of vLLM's shared step-file format that the AMD template does not read: the NVIDIA ones (gpu,
# device, num_devices: see the header of test-amd.a0b421b7.yaml and the steps of test-amd.b47dcc58.yaml),
# the other pipelines' flags (fast_check, fast_check_only, torch_nightly), keys older templates read
# (grade) or that the AMD template sets itself (soft_fail, retry). Known, so silent.
SHARED_KEYS = frozenset(
    {"gpu", "device", "num_devices", "grade", "retry", "fast_check", "fast_check_only", "torch_nightly", "soft_fail"}
)
REQUIRED = ("label", "agent_pool")
# Upper bounds of the numbers a step gives: far above anything vLLM's files use (parallelism 6, 8 GPUs,
# 180 minutes, which the template caps anyway), low enough that a typo cannot ask Buildkite for a
# hundred million jobs. The lower bound of all four is 1.
MAXIMA = {"num_gpus": 64, "num_nodes": 64, "timeout_in_minutes": 7 * 24 * 60, "parallelism": 100}
# Text the template pastes into a double-quoted YAML scalar: a C0/C1 control character (tab and line
# breaks aside) there is not printable YAML, so ci-infra's render cannot be parsed and the upload fails.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x84\x86-\x9f\ufffe\uffff]")


class SourceStep(NamedTuple):
    index: int
    data: dict[str, Any]
    where: str  # file:line:col of the step

    @property
    def label(self) -> str:
        return self.data.get("label", "")

    @property
    def pool(self) -> str:
        return self.data.get("agent_pool", "")

    @property
    def commands(self) -> list[str]:
        """The step's command list, or its one command; [] for neither. A `commands` that is not a list is an
        error at its line (check_step), and a step is generated without it: the readers of a step skip it too."""
        commands = self.data.get("commands")
        if isinstance(commands, list):
            return list(commands)
        return [self.data["command"]] if "command" in self.data else []


class StepFinding(NamedTuple):
    """A finding that matters only when the template renders all of these steps for the chosen mirror."""

    steps: tuple[int, ...]
    finding: Finding


class SourceFile:
    """A loaded step file: its document, its steps and the findings about them."""

    __slots__ = ("doc", "steps", "findings", "step_findings")

    def __init__(
        self,
        doc: yamldoc.Document,
        steps: list[SourceStep],
        findings: list[Finding],
        step_findings: list[StepFinding] | None = None,
    ) -> None:
        self.doc = doc
        self.steps = steps
        self.findings = findings  # whatever the mirror: the file's YAML and keys mistyped on any step
        self.step_findings: list[StepFinding] = [] if step_findings is None else step_findings

    @property
    def filename(self) -> str:
        return self.doc.filename

    def findings_for(self, mirror_hw: str) -> list[Finding]:
        rendered = {i for i, raw in enumerate(self.raw_steps) if renders(raw, mirror_hw)}
        out = list(self.findings)
        out += [sf.finding for sf in self.step_findings if rendered.issuperset(sf.steps)]
        if not rendered and self.raw_steps:
            out.append(_no_step_for(self, mirror_hw))
        return out

    @property
    def raw_steps(self) -> list[Any]:
        data = self.doc.data
        return data["steps"] if isinstance(data, dict) and isinstance(data.get("steps"), list) else []


def renders(step: Any, mirror_hw: str) -> bool:
    """Whether the template renders this step: `step.mirror_hardwares and mirror_hw in step.mirror_hardwares`."""
    if not isinstance(step, dict):
        return False  # an attribute of a non-mapping is undefined: the template skips it
    return mirror_matches(step.get("mirror_hardwares"), mirror_hw)


def mirror_matches(mirrors: Any, mirror_hw: str) -> bool:
    """`mirrors and mirror_hw in mirrors` in minijinja: a substring test on text, a key test on a mapping.
    On a number (or true) the test stops the whole render; True here, so the step is judged and generated."""
    if not mirrors:
        return False
    if isinstance(mirrors, (str, list, dict)):
        return mirror_hw in mirrors
    return True


def _no_step_for(src: SourceFile, mirror_hw: str) -> Finding:
    known = sorted(
        {
            m
            for raw in src.raw_steps
            if isinstance(raw, dict) and isinstance(raw.get("mirror_hardwares"), list)
            for m in raw["mirror_hardwares"]
            if isinstance(m, str)
        }
    )
    close = difflib.get_close_matches(mirror_hw, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"the steps list: {', '.join(known) or 'no mirror'}"
    return Finding.at(
        src.doc,
        ("steps",),
        "no-step-for-mirror",
        WARNING,
        f"no step lists mirror_hw {mirror_hw!r}: the template renders only the image build steps; {hint}",
    )


def _distance(a: str, b: str, limit: int = 2) -> int:
    """Edit distance with adjacent swaps (Damerau), or limit + 1 when it is larger than limit."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return min(prev[-1], limit + 1)


def near_key(key: str, value: Any) -> str | None:
    """The key the template reads that `key` is a slip of: close in spelling and given a value of its type.

    The type keeps suggestions to keys of the same meaning: `gpu: h100` is never a slip of `no_gpu`.
    """
    best: tuple[int, str] | None = None
    for known, ((_, fits), _) in READ_KEYS.items():
        d = 0 if key.lower() == known else _distance(key.lower(), known, 2)
        if d > (1 if len(known) < 8 else 2) or not fits(value):
            continue
        if best is None or d < best[0]:
            best = (d, known)
    return best[1] if best else None


def _key_findings(doc: yamldoc.Document, path: tuple, step: dict) -> list[Finding]:
    """Keys the template does not read are never errors; a slip of one it does read is."""
    out = []
    for key, value in step.items():
        name = str(key)
        if name in READ_KEYS or name in SHARED_KEYS:
            continue
        known = near_key(name, value)
        if known is not None:
            lost = READ_KEYS[known][1] if known not in step else f"its '{known}' is used and this one is not"
            out.append(
                Finding.at(
                    doc,
                    (*path, key),
                    "source-schema",
                    ERROR,
                    f"unknown step key {name!r}; did you mean {known!r}? The template ignores {name!r}, so {lost}",
                )
            )
        else:
            out.append(
                Finding.at(
                    doc,
                    (*path, key),
                    "source-schema",
                    WARNING,
                    f"unknown step key {name[:60]!r}: neither the AMD template nor vLLM's step-file format reads it",
                )
            )
    return out


# A wrong type that ci-infra's render still gets right (or only more lenient): a warning, with what happens.
_HARMLESS_TYPE: dict[str, Any] = {
    "label": lambda v: "the template prints it as text" if _scalar_value(v) else None,
    "mirror_hardwares": lambda v: "the template tests the mirror as a substring of it" if isinstance(v, str) else None,
    "timeout_in_minutes": lambda v: "the template gives the step the 180-minute cap" if isinstance(v, str) else None,
    "parallelism": lambda v: (
        "the agent reads the pasted text as that number"
        if isinstance(v, str) and v.isascii() and v.isdigit() and not v.startswith("0")
        else None
    ),
}


def _scalar_value(value: Any) -> bool:
    return isinstance(value, (str, int, float))


def check_step(doc: yamldoc.Document, index: int, step: Any) -> tuple[list[Finding], list[Finding]]:
    """(findings whatever the mirror, findings that matter only when the template renders the step)."""
    path = ("steps", index)
    if not isinstance(step, dict):
        return [
            Finding.at(
                doc,
                path,
                "source-schema",
                WARNING,
                f"step {index + 1} must be a mapping, got {_kind(step)}; the template skips it",
            )
        ], []
    # every text of the step, keys included, in one string (a line break is neither a control character
    # nor part of a credential shape): the secret and control-character checks look at it first
    joined = "\n".join(_flat_texts(step, []))
    always = _key_findings(doc, path, step) + _secrets(doc, path, step, joined)
    out = []
    stops = template_stops(step)
    for key, value in step.items():
        spec = STEP_KEYS.get(key)
        if spec is not None and not spec[1](value):
            harmless = _HARMLESS_TYPE.get(key)
            why = harmless(value) if harmless else None
            if value is None and key not in (*REQUIRED, "command", "commands"):
                # The template reads every optional key as `step.X or default` / `if step.X` / `== false`:
                # an empty value renders exactly as a missing one. An empty command is a step that tests nothing.
                why = "the template reads an empty value as unset"
            if key in stops:
                message = (
                    f"'{key}' must be {spec[0]}, got {_kind(value)}; ci-infra's template stops on it ({stops[key]}), "
                    "so bootstrap-amd.sh uploads no pipeline at all (rocmci generates the step without it)"
                )
                out.append(Finding.at(doc, (*path, key), "source-schema", ERROR, message))
                continue
            out.append(
                Finding.at(
                    doc,
                    (*path, key),
                    "source-schema",
                    WARNING if why else ERROR,
                    f"'{key}' must be {spec[0]}, got {_kind(value)}" + (f"; {why}" if why else ""),
                )
            )
    for key in REQUIRED:
        if key not in step:
            out.append(Finding.at(doc, path, "source-schema", ERROR, f"step has no '{key}'; {READ_KEYS[key][1]}"))
    if "commands" in step and "command" in step:
        out.append(
            Finding.at(
                doc,
                (*path, "command"),
                "source-schema",
                ERROR,
                "give 'commands' or 'command', not both: the template runs 'command' and drops 'commands'",
            )
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
    for key, why in stops.items():
        if key not in step or STEP_KEYS[key][1](step[key]):  # a good type the template still stops on
            out.append(
                Finding.at(
                    doc,
                    (*path, key) if key in step else path,
                    "source-schema",
                    ERROR,
                    f"'{key}' here: ci-infra's template stops on it ({why}), so bootstrap-amd.sh uploads no "
                    "pipeline at all (rocmci generates the step without it)",
                )
            )
    out.extend(_bounds(doc, path, step))
    out.extend(_multi_node(doc, path, step))
    out.extend(_empty_parts(doc, path, step))
    if _CONTROL.search(joined):
        out.extend(_control_characters(doc, path, step))
    return always, out


def _container(value: Any) -> bool:
    return isinstance(value, (str, list, dict))


def template_stops(step: dict) -> dict[str, str]:
    """Values on which ci-infra's template raises, by key, with minijinja's reason: the whole render fails
    and bootstrap-amd.sh uploads nothing (tests/unit/test_pipeline_no_step_dropped.py renders each)."""
    out = {}
    if step.get("mirror_hardwares") and not _container(step["mirror_hardwares"]):
        out["mirror_hardwares"] = "'in' cannot test a number"
    deps = step.get("source_file_dependencies")
    if deps and not _container(deps):
        out["source_file_dependencies"] = "a number is not iterable"
    elif isinstance(deps, list) and any(not _container(d) for d in deps):
        out["source_file_dependencies"] = "'length' of an item that is not text"
    if step.get("no_plugin") and step.get("env") and not isinstance(step["env"], dict):
        out["env"] = "'items' of a value that is not a mapping"
    tags = step.get("agent_tags")
    if scalars.jinja_eq(step.get("dind"), False) and tags and not isinstance(tags, dict):
        out["agent_tags"] = "'items' of a value that is not a mapping"
    commands = step.get("commands")
    if commands is not None and not _container(commands) and (not step.get("command") or step.get("num_nodes")):
        out["commands"] = "'join' or 'length' of a value that is not a list"
    return out


def _secrets(doc: yamldoc.Document, path: tuple, step: dict, joined: str | None = None) -> list[Finding]:
    """A credential in the step file is published with vLLM's repository, whatever the template renders:
    by name (HF_TOKEN: <literal>) in env, by shape (hf_..., ghp_..., a private key) anywhere."""
    from rocmci.secrets import is_secret, secret_kind

    out = []
    env = step.get("env")
    if isinstance(env, dict):
        for name, value in env.items():
            text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
            if is_secret(str(name)) and text and not text.startswith("$"):
                out.append(
                    Finding.at(
                        doc,
                        (*path, "env", name),
                        "secret-in-pipeline",
                        ERROR,
                        f"{name} is written into the step file in plain text, so it is published with the "
                        "repository; remove it and give it to the agents as a secret",
                    )
                )
    if joined is not None and not secret_kind(joined, whole=False):
        return out  # the usual case: no credential shape anywhere in the step
    for where, text in _texts(step, path):
        kind = secret_kind(text, whole=False) if len(text) >= 8 else None
        if kind and not any(f.line == doc.pos(where).line for f in out):
            out.append(
                Finding.at(
                    doc,
                    where,
                    "secret-in-pipeline",
                    ERROR,
                    f"this looks like {kind}, written into the step file in plain text (published with the "
                    "repository); remove it and give it to the agents as a secret",
                )
            )
    return out


def _bounds(doc: yamldoc.Document, path: tuple, step: dict) -> list[Finding]:
    """A 0 is read as unset (`step.x or default`); below that, or past the maximum, the step is wrong."""
    out = []
    for key, most in MAXIMA.items():
        value = step.get(key)
        if not _INT[1](value):
            continue
        if value == 0 and key != "num_gpus":
            unset = {"timeout_in_minutes": "the 180-minute default", "parallelism": "no sharding"}.get(key, "1 node")
            out.append(
                Finding.at(
                    doc, (*path, key), "source-schema", WARNING, f"'{key}' 0 is read as unset: the step gets {unset}"
                )
            )
        elif value < 1:
            why = "; the step gets 1 GPU (no_gpu: true for none)" if key == "num_gpus" and value == 0 else ""
            out.append(
                Finding.at(doc, (*path, key), "source-schema", ERROR, f"'{key}' must be at least 1, got {value}{why}")
            )
        elif value > most:
            out.append(
                Finding.at(doc, (*path, key), "source-schema", ERROR, f"'{key}' must be at most {most}, got {value}")
            )
    return out


def _multi_node(doc: yamldoc.Document, path: tuple, step: dict) -> list[Finding]:
    """Per-node command lists mean one node each only with num_nodes >= 2; otherwise the template joins the
    lists' text into one command line, which runs nothing sensible."""
    commands = step.get("commands")
    nodes = step.get("num_nodes")
    if not _COMMANDS[1](commands) or (_INT[1](nodes) and nodes >= 2):
        return []
    return [
        Finding.at(
            doc,
            (*path, "commands", i),
            "source-schema",
            ERROR,
            f"command {i + 1} is a list (one node's commands) but the step has no num_nodes of 2 or more: "
            "the template pastes the list's text as one command",
        )
        for i, item in enumerate(commands)
        if isinstance(item, list)
    ][:1]


def _control_characters(doc: yamldoc.Document, path: tuple, step: dict) -> list[Finding]:
    out = []
    for key, value in step.items():
        if key not in READ_KEYS:
            continue
        for where, text in _texts(value, (*path, key)):
            if _CONTROL.search(text):
                char = _CONTROL.search(text).group()  # type: ignore[union-attr]
                out.append(
                    Finding.at(
                        doc,
                        where,
                        "control-character",
                        ERROR,
                        f"control character U+{ord(char):04X} in '{key}': ci-infra's render is YAML no parser "
                        "accepts, so the upload fails; remove it",
                    )
                )
                break
    return out


def _flat_texts(value: Any, out: list[str]) -> list[str]:
    """Every string in a step value, mapping keys included, without paths (see _texts): a quick first look."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for item in value:
            _flat_texts(item, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.append(str(k))
            _flat_texts(v, out)
    return out


def _texts(value: Any, path: tuple):
    """(path, text) of every string in a step value, mapping keys included (env and agent_tags names)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _texts(item, (*path, i))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield (*path, k), str(k)
            yield from _texts(v, (*path, k))


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
    elif _COMMANDS[1](commands):
        for i, command in enumerate(commands):
            texts = [(j, c) for j, c in enumerate(command)] if isinstance(command, list) else [(None, command)]
            if isinstance(command, list) and not command:
                out.append(
                    Finding.at(doc, (*path, "commands", i), "source-schema", ERROR, f"node {i + 1} runs no command")
                )
            for j, text in texts:
                if not text.strip():
                    at = (*path, "commands", i) if j is None else (*path, "commands", i, j)
                    what = f"command {i + 1}" if j is None else f"node {i + 1}'s command {j + 1}"
                    out.append(Finding.at(doc, at, "source-schema", ERROR, f"{what} is empty"))
    command = step.get("command")
    if isinstance(command, str) and not command.strip():
        out.append(Finding.at(doc, (*path, "command"), "source-schema", ERROR, "'command' is empty: nothing to run"))
    return out


def generatable(step: Any) -> bool:
    """Whether rocmci generates the step: every mapping, as the template renders every mapping whose mirror
    matches (README "One bad step never stops vLLM's CI"). A value the template cannot print or stops on is
    an error at its line; the step is still generated, so that --keep-going holds it and drops nothing."""
    return isinstance(step, dict)


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
            findings.append(
                Finding.at(
                    doc,
                    (extra,),
                    "source-schema",
                    WARNING,
                    f"unknown top-level key '{extra}': the template reads only steps",
                )
            )
    steps = []
    step_findings: list[StepFinding] = []
    for i, raw in enumerate(raw_steps):
        always, rendered = check_step(doc, i, raw)
        findings.extend(always)
        step_findings += [StepFinding((i,), f) for f in rendered]
        if generatable(raw):
            steps.append(SourceStep(index=i, data=raw, where=doc.where(("steps", i))))
    seen: dict[tuple[str, str], SourceStep] = {}
    for step in steps:
        ident = (amdsteps.rust_text(step.data.get("agent_pool")), amdsteps.rust_text(step.data.get("label")))
        if ident in seen:
            first = seen[ident]
            finding = Finding.at(
                doc,
                ("steps", step.index, "label"),
                "unique-key",
                ERROR,
                f"another step on {ident[0]} has the label {ident[1]!r} ({first.where}); "
                "generated keys would clash: rename one",
            )
            step_findings.append(StepFinding((first.index, step.index), finding))
        seen[ident] = step
    return SourceFile(doc=doc, steps=steps, findings=findings, step_findings=step_findings)


def load_source(path: Path, display: str | None = None, *, what: str | None = None) -> SourceFile:
    return from_document(yamldoc.load(path, display, what=what))
