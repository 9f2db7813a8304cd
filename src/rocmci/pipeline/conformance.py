"""Field-by-field comparison of two pipelines: ci-infra's render (the reference) and rocmci's output.

Steps are matched by key, else by block or label text (group members included); every leaf field is
compared. ALLOWED lists rocmci's intentional additions; README says why each exists.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rocmci.report import plural

# field path (dotted, in a step) -> why rocmci adds it; README "Intended differences" repeats these.
ALLOWED: dict[str, str] = {
    "env.AMD_CI_STEP_SOURCE": "the step file:line a test step came from, so that validating the written "
    "pipeline points findings at the step file",
}
MISSING, EXTRA, CHANGED, ORDER = "missing in rocmci", "only in rocmci", "different", "order"


@dataclass(frozen=True)
class Difference:
    step: str
    field: str  # dotted path inside the step; "" for the step as a whole
    kind: str
    reference: Any = None
    ours: Any = None

    @property
    def allowed(self) -> bool:
        return self.kind == EXTRA and self.field in ALLOWED

    def text(self) -> str:
        where = f"{self.step} :: {self.field}" if self.field else self.step
        if self.kind == CHANGED:
            return f"{where}: ci-infra {self.reference!r} != rocmci {self.ours!r}"
        value = self.ours if self.kind == EXTRA else self.reference
        return f"{where}: {self.kind}" + (f" ({_short(value)})" if value is not None else "")


@dataclass
class Comparison:
    reference_steps: int
    our_steps: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def unexpected(self) -> list[Difference]:
        return [d for d in self.differences if not d.allowed]

    def counts(self) -> Counter:
        return Counter((d.field or "<step>", d.kind) for d in self.unexpected)

    def summary(self, examples: int = 5) -> str:
        allowed = len(self.differences) - len(self.unexpected)
        lines = [
            f"ci-infra: {self.reference_steps} steps, rocmci: {self.our_steps} steps; "
            f"{plural(len(self.unexpected), 'unexpected difference')}, {allowed} allowed"
        ]
        for (name, kind), n in sorted(self.counts().items(), key=lambda item: (-item[1], item[0])):
            lines.append(f"  {n:4d} x {name} ({kind})")
        for d in self.unexpected[:examples]:
            lines.append(f"  e.g. {d.text()}")
        return "\n".join(lines)


def _short(value: Any, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def step_id(step: Any) -> str:
    if not isinstance(step, dict):
        return f"<{step!r}>"
    for name in ("key", "block", "label", "group"):
        if isinstance(step.get(name), str):
            return step[name] if name == "key" else f"{name}: {step[name]}"
    return "<step without key or label>"


def flatten_steps(steps: list[Any]) -> list[tuple[str, Any]]:
    """(id, step) for every step in order, group members after their group; repeated ids get '#n'."""
    out: list[tuple[str, Any]] = []
    seen: Counter = Counter()

    def visit(items: list[Any]) -> None:
        for step in items:
            ident = step_id(step)
            seen[ident] += 1
            out.append((ident if seen[ident] == 1 else f"{ident}#{seen[ident]}", step))
            if isinstance(step, dict) and isinstance(step.get("steps"), list):
                visit(step["steps"])

    visit(steps)
    return out


def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> scalar; a group's member list is compared as steps, not as a field."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if prefix == "" and key == "steps" and isinstance(item, list):
                continue
            out.update(leaves(item, f"{prefix}.{key}" if prefix else str(key)))
        return out or ({prefix: {}} if prefix else {})
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(leaves(item, f"{prefix}.{i}" if prefix else str(i)))
        return out or {prefix: []}
    return {prefix: value}


def compare(reference: list[Any], ours: list[Any]) -> Comparison:
    ref_steps, our_steps = flatten_steps(reference), flatten_steps(ours)
    result = Comparison(len(ref_steps), len(our_steps))
    ours_by_id = dict(our_steps)
    ref_ids = [i for i, _ in ref_steps]
    for ident, ref in ref_steps:
        if ident not in ours_by_id:
            result.differences.append(Difference(ident, "", MISSING, reference=step_id(ref)))
            continue
        a, b = leaves(ref), leaves(ours_by_id[ident])
        for name in a.keys() | b.keys():
            if name not in b:
                result.differences.append(Difference(ident, name, MISSING, reference=a[name]))
            elif name not in a:
                result.differences.append(Difference(ident, name, EXTRA, ours=b[name]))
            elif a[name] != b[name] or type(a[name]) is not type(b[name]):
                result.differences.append(Difference(ident, name, CHANGED, a[name], b[name]))
    known = set(ref_ids)
    result.differences += [Difference(i, "", EXTRA, ours=step_id(s)) for i, s in our_steps if i not in known]
    common_ref = [i for i in ref_ids if i in ours_by_id]
    common_ours = [i for i, _ in our_steps if i in known]
    if common_ref != common_ours:
        first = next(n for n, (x, y) in enumerate(zip(common_ref, common_ours, strict=False)) if x != y)
        result.differences.append(Difference(common_ref[first], "", ORDER, common_ref[first], common_ours[first]))
    result.differences.sort(key=lambda d: (d.step, d.field, d.kind))
    return result
