"""--keep-going: one bad step must not stop vLLM's CI.

The pipeline is still written. A generated step with an error gets a block step in front of it (the
template's own block step when it already has one) whose label carries the finding and whose prompt
lists them all; the step then runs only when someone decides to run it anyway. Every other step runs
as the template would run it. Every step the template renders is generated (wrong types, no label, no
pool, numbers past their bounds, values the template stops on or pastes into broken YAML), so none is
dropped: each is held. A held step is kept uploadable: a field Buildkite's schema refuses is removed and
the prompt says so, and a block key Buildkite refuses is replaced. Pure: returns a new pipeline.
"""

from __future__ import annotations

import bisect
import copy
from dataclasses import dataclass
from typing import Any

from rocmci.findings import ERROR, Finding
from rocmci.pipeline.generate import IMAGE_STEP_KEY, Generated, slug
from rocmci.pipeline.rules import KEY_PATTERN
from rocmci.pipeline.source import SourceFile, SourceStep
from rocmci.report import plural

LABEL_LIMIT = 300
# Rules whose error means Buildkite refuses the whole upload (every step of the build, not just one): YAML it
# cannot read, its schema, more than 500 steps, keys and dependencies it cannot resolve. An error of another rule
# on a held step is why the step is held; on any other step, or of these rules, --keep-going writes nothing.
UPLOAD_REFUSED = frozenset({"yaml-syntax", "duplicate-key", "schema", "step-limit", "unique-key", "key-pattern",
                            "depends-on", "dependency-cycle"})  # fmt: skip
_KEPT = frozenset({"label", "command", "depends_on", "agents", "key"})  # what makes the step itself


@dataclass(frozen=True)
class Held:
    """What --keep-going did to one step with errors."""

    step_index: int  # index in the step file
    title: str  # "<pool>: <label>"
    findings: tuple[Finding, ...]
    how: str  # "held" (behind a block step) or "left out"


def step_of_line(source: SourceFile, line: int) -> int | None:
    """Index of the step-file step that contains this line."""
    raw = source.doc.data.get("steps") if isinstance(source.doc.data, dict) else None
    if not isinstance(raw, list) or not raw:
        return None
    starts = [source.doc.pos(("steps", i)).line for i in range(len(raw))]
    at = bisect.bisect_right(starts, line) - 1
    return at if at >= 0 else None


def errors_by_step(source: SourceFile, findings: list[Finding]) -> dict[int, list[Finding]]:
    out: dict[int, list[Finding]] = {}
    for f in findings:
        if f.severity == ERROR and f.file == source.filename:
            index = step_of_line(source, f.line)
            if index is not None:
                out.setdefault(index, []).append(f)
    return out


def _block_text(title: str, findings: list[Finding]) -> str:
    first = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    text = f"rocmci: {first.message} ({first.file}:{first.line}){more} - run {title} anyway?"
    return _literal(text if len(text) <= LABEL_LIMIT else text[: LABEL_LIMIT - 3] + "...")


def _literal(text: str) -> str:
    """Text rocmci writes into the pipeline reaches people as written: the upload would replace a `$NAME`
    that a finding quotes (`$$` is Buildkite's literal `$`)."""
    return text.replace("$", "$$")


def _title(raw: Any, index: int) -> str:
    from rocmci.secrets import Redactor

    if isinstance(raw, dict):
        # a block label is published with the pipeline: a token in the step's label is masked here
        return Redactor()(f"{raw.get('agent_pool', '?')}: {raw.get('label', '?')}")
    return f"step {index + 1}"


def hold(source: SourceFile, generated: Generated, findings: list[Finding]) -> tuple[dict[str, Any], list[Held]]:
    """The pipeline with every erroneous step held behind a block step, and what was done to which step."""
    pipeline = copy.deepcopy(generated.pipeline)
    members: list[Any] = pipeline["steps"][0]["steps"]
    origins: list[SourceStep | None] = list(generated.origins)
    used = {s.get("key") for s in members if isinstance(s, dict)}
    raw_steps = source.doc.data.get("steps", []) if isinstance(source.doc.data, dict) else []
    generated_indices = {s.index for s in origins if s is not None}
    held: list[Held] = []
    for index, found in sorted(errors_by_step(source, findings).items()):
        title = _title(raw_steps[index] if index < len(raw_steps) else None, index)
        if index not in generated_indices:
            skipped = any(d.step.index == index and d.action == "skip" for d in generated.decisions)
            if not skipped:
                held.append(Held(index, title, tuple(found), "left out"))
            continue
        at = max(j for j, s in enumerate(origins) if s is not None and s.index == index)
        step = members[at]
        prompt = _literal("\n".join([*(f.text() for f in found), *_uploadable(step)]))
        before = members[at - 1] if at > 0 else None
        if origins[at - 1] is origins[at] and isinstance(before, dict) and "block" in before:
            before["block"] = _block_text(title, found)
            before["prompt"] = prompt
            if not _valid_key(before["key"]):  # a label or pool that is not text, too long, or with a $NAME
                before["key"] = step["depends_on"] = _free_key(f"rocmci-hold-{index}", used)
        else:
            key = f"block-{slug(origins[at])}"
            if key in used or not _valid_key(key):
                key = _free_key(f"rocmci-hold-{index}", used)
            used.add(key)
            block = {"block": _block_text(title, found), "prompt": prompt, "depends_on": IMAGE_STEP_KEY, "key": key}
            members.insert(at, block)
            origins.insert(at, origins[at])
            step["depends_on"] = key
        held.append(Held(index, title, tuple(found), "held"))
    return pipeline, held


def without_secrets(value: Any, mask: Any = None) -> Any:
    """The pipeline with nothing the secret-in-pipeline rule flags in it: --keep-going writes and uploads it.

    Holding a step keeps it from running, not from being published: every env entry the rule flags is
    left out (the agents must give it, as the finding says), and every secret-shaped token anywhere
    else (labels, agent tags, commands) becomes *** — "redacted" in step keys, where Buildkite refuses
    '*'. The rule's own judgement is reused, so what it reports is what is hidden.
    """
    from rocmci.pipeline.rules import _secret_message
    from rocmci.secrets import Redactor

    mask = mask or Redactor()
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list):
        return [without_secrets(v, mask) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "env" and isinstance(v, dict):
                v = {
                    mask(str(n)): without_secrets(e, mask)
                    for n, e in v.items()
                    if not (isinstance(e, (str, int)) and _secret_message(n, e))
                }  # fmt: skip
            elif k in ("key", "depends_on"):
                v = without_secrets(v, lambda text: mask(text).replace("***", "redacted"))
            else:
                v = without_secrets(v, mask)
            out[mask(k) if isinstance(k, str) else k] = v
        return out
    return value


def _valid_key(key: Any) -> bool:
    """A key Buildkite takes as written, as the key-pattern rule checks it (characters, at most 100 of them, no
    UUID), and without a `$NAME` the upload would replace (the template's block key is the label's slug)."""
    from rocmci.pipeline.rules import INTERPOLATION, UUID

    text = str(key)
    return bool(KEY_PATTERN.fullmatch(text)) and len(text) <= 100 and not UUID.fullmatch(text) and not (
        INTERPOLATION.search(text))  # fmt: skip


def _free_key(key: str, used: set) -> str:
    while key in used:
        key += "-"
    used.add(key)
    return key


def _uploadable(step: dict[str, Any]) -> list[str]:
    """A held step must not make Buildkite refuse the whole upload: the fields its schema refuses (a timeout
    below 1, a fractional parallelism) are removed, and the block's prompt says which."""
    from rocmci.pipeline import schema

    if schema.is_valid({"steps": [step]}):
        return []
    said = []
    for path, message in schema.diagnose_step(step, ()):
        name = path[0] if path else None
        if name in step and name not in _KEPT:
            del step[name]
            said.append(f"rocmci removed '{name}' from this step so that Buildkite accepts the pipeline: {message}")
    return said


def annotation(source_name: str, findings: list[Finding], held: list[Held]) -> str:
    """Markdown for `buildkite-agent annotate`: what rocmci found and what it did about it. Every piece of
    outside text (the file's name, step titles, findings quoting the file) goes through rocmci.markup."""
    from rocmci import markup

    errors = sum(f.severity == ERROR for f in findings)
    counts = f"{plural(errors, 'error')}, {plural(len(findings) - errors, 'warning')}"
    lines = [f"**rocmci** checked {markup.code(source_name)}: {counts}.", ""]
    for h in held:
        what = "held behind a block step" if h.how == "held" else "left out of the pipeline"
        lines.append(f"- {markup.code(h.title)}: {what}")
    lines += ["", *markup.block(f.text() for f in findings)]
    return "\n".join(lines) + "\n"
