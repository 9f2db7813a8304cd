"""Registry of known workarounds: what each sets, where it applies, why, and the evidence that ends it.

A workaround is obsolete as soon as one of its `remove_when` conditions is met by a fact rocmci can
check, read from what will run: vLLM's test module and the conftest/helper modules it imports, parsed
as Python (an assignment of the variable in code, never a comment or a line pattern); the instructions
of a Dockerfile of the checkout (not its comments); a commit the checkout contains; an image label.
Every check reads each file once and does linear work on it, whatever the file holds. Checking is
separate from deciding, so a run can say which workarounds it applied or left out, and why.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from rocmci import fixes
from rocmci.workaround_registry import Condition, Workaround

APPLIES = "applies"
OBSOLETE = "obsolete"
TRACKED = "tracked"


@dataclass(frozen=True)
class Sources:
    """The facts a check may use; None where nothing was given."""

    vllm_src: Path | None = None
    image: str | None = None
    labels: dict[str, str] | None = None
    # The image's own workspace (its tests/ tree, copied out): the test module that will run. When
    # given, test-module conditions read it instead of the checkout; `image_workspace` names it in messages.
    image_tree: Path | None = None
    image_workspace: str = ""

    @property
    def any(self) -> bool:
        return self.vllm_src is not None or self.labels is not None or self.image_tree is not None


@dataclass(frozen=True)
class Check:
    workaround: Workaround
    status: str  # APPLIES, OBSOLETE or TRACKED
    evidence: tuple[str, ...] = ()

    @property
    def obsolete(self) -> bool:
        return self.status == OBSOLETE

    def reason(self) -> str:
        if self.evidence:
            return "; ".join(self.evidence)
        if not self.workaround.remove_when:
            return "no removal condition recorded"
        return "no evidence checked (give --vllm-src, or an image whose labels say)"

    def note(self) -> str:
        """One line for a run: applied or not, and why."""
        w = self.workaround
        scope = ", ".join(w.workloads) + (f" [{', '.join(w.tests)}]" if w.tests else "")
        sets = " ".join(f"{k}={v}" for k, v in w.sets.items())
        if self.obsolete:
            return f"workaround {w.id} NOT applied ({sets} not set): obsolete: {self.reason()}"
        return f"workaround {w.id} applied to {scope} ({sets}): {self.reason()}"


def run_decisions(checks: list[Check], kinds: set[str]) -> tuple[frozenset[str], list[str]]:
    """For a run of these workload kinds: the ids to leave out (obsolete) and one note per relevant entry."""
    relevant = [c for c in checks if c.status != TRACKED and kinds & set(c.workaround.workloads)]
    return frozenset(c.workaround.id for c in relevant if c.obsolete), [c.note() for c in relevant]


# --- checking ---------------------------------------------------------------------------------------


def _git(src: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, check=False, timeout=60)


def _read(src: Path, rel: str) -> str | None:
    try:
        return (src / rel).read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _tests_do_not_set(c: Condition, src: Path, shown_root: str = "") -> tuple[bool | None, str]:
    from rocmci.runs import pysets

    def show(text: str) -> str:
        return text.replace(str(src.resolve()), shown_root, 1) if shown_root else text

    shown = f"{shown_root or src}/{c.path}"
    try:
        found = pysets.assignments(src, c.path, c.variable)
    except pysets.Unreadable as exc:
        return None, f"{shown}: {exc}"  # a missing or unparsable module is no evidence either way
    if found:
        where, code = found[0]
        return False, f"{show(where)}: {code}"
    return True, f"{shown} (and the conftest/helper modules it imports) no longer set {c.variable}"


def _dockerfile_applies(c: Condition, src: Path, memo: dict | None = None) -> tuple[bool | None, str]:
    shown = f"{src}/{c.path}"
    key = ("instructions", src, c.path)
    if memo is not None and key in memo:
        instructions = memo[key]
    else:
        text = _read(src, c.path)
        instructions = None if text is None else fixes.Instructions(text)
        if memo is not None:
            memo[key] = instructions
    if instructions is None:
        return None, f"{shown} not found"
    hit = instructions.first_naming(c.fix)
    if hit is not None:
        return True, f"{shown}:{hit}: an instruction applies {c.fix}"
    return False, f"{shown}: no instruction applies {c.fix} (comments do not count)"


def check_condition(c: Condition, sources: Sources, memo: dict | None = None) -> tuple[bool | None, str]:
    """(met, evidence): True when the condition holds, False when it was checked and does not, None unknown.

    memo (check_all's, one per check of a registry): each distinct leaf condition is checked once and each
    Dockerfile read once, so a registry of N entries costs N look-ups, not N passes over the checkout.
    """
    if c.kind != "all_of" and memo is not None:
        key = (c.kind, c.path, c.variable, c.fix, c.commit, c.label, c.has)  # not `where`: the same fact
        if key not in memo:
            memo[key] = _check_leaf(c, sources, memo)
        return memo[key]
    if c.kind == "all_of":
        results = [check_condition(part, sources, memo) for part in c.parts]
        evidence = "; ".join(e for _, e in results if e)
        if any(met is False for met, _ in results):
            return False, evidence
        if any(met is None for met, _ in results):
            return None, evidence
        return True, evidence
    return _check_leaf(c, sources, memo)


def _check_leaf(c: Condition, sources: Sources, memo: dict | None) -> tuple[bool | None, str]:
    if c.kind == "vllm_tests_do_not_set" and sources.image_tree is not None:
        return _tests_do_not_set(c, sources.image_tree, sources.image_workspace)  # what will run
    if c.kind in ("vllm_tests_do_not_set", "vllm_dockerfile_applies"):
        if sources.vllm_src is None:
            return None, ""
        if c.kind == "vllm_tests_do_not_set":
            return _tests_do_not_set(c, sources.vllm_src)
        return _dockerfile_applies(c, sources.vllm_src, memo)
    if c.kind == "vllm_commit":
        if sources.vllm_src is None:
            return None, ""
        try:
            done = _git(sources.vllm_src, "merge-base", "--is-ancestor", c.commit, "HEAD")
        except (OSError, subprocess.TimeoutExpired):
            return None, f"{sources.vllm_src}: git could not answer"
        if done.returncode == 0:
            return True, f"{sources.vllm_src}: HEAD contains {c.commit} (git merge-base --is-ancestor)"
        if done.returncode == 1:
            return False, f"{sources.vllm_src}: HEAD does not contain {c.commit}"
        return None, f"{sources.vllm_src}: cannot tell whether HEAD contains {c.commit} (not a git checkout?)"
    if c.kind == "image_label":
        if sources.labels is None:
            return None, ""
        value = sources.labels.get(c.label)
        items = {v.strip() for v in (value or "").split(",") if v.strip()}
        shown = f"label {c.label}={value!r} on image {sources.image}" if value else f"image {sources.image}"
        if c.has in items:
            return True, shown
        return False, f"{shown}: no {c.has} in label {c.label}" if value else f"{shown} has no label {c.label}"
    raise AssertionError(c.kind)  # from_document admits no other kind


def check(w: Workaround, sources: Sources, memo: dict | None = None) -> Check:
    if w.applied_by != "rocmci":
        return Check(w, TRACKED, (f"carried by {w.applied_by}, not by rocmci",))
    seen: list[str] = []
    for condition in w.remove_when:
        met, evidence = check_condition(condition, sources, memo)
        if met:
            return Check(w, OBSOLETE, (evidence,))
        if evidence:
            seen.append(evidence)
    return Check(w, APPLIES, tuple(seen))


def check_all(registry: list[Workaround], sources: Sources) -> list[Check]:
    memo: dict = {}
    return [check(w, sources, memo) for w in registry]


def as_json(checks: list[Check]) -> list[dict]:
    from rocmci.runs.results import ref_url

    return [
        {
            "id": c.workaround.id,
            "status": c.status,
            "evidence": list(c.evidence) or [c.reason()],
            "sets": c.workaround.sets,
            "applies_to": {"workloads": list(c.workaround.workloads), "tests": list(c.workaround.tests)},
            "refs": {ref: ref_url(ref) for ref in c.workaround.refs},
        }
        for c in checks
    ]


def render(checks: list[Check], sources: Sources) -> str:
    """Each workaround, its status and evidence, for people (`rocmci workarounds`)."""
    from rocmci import report
    from rocmci.runs.results import ref_url

    items = []
    for c in checks:
        w = c.workaround
        sets = ", ".join(f"{k}={v}" for k, v in w.sets.items()) or "-"
        scope = ", ".join(w.workloads) + (f" [{', '.join(w.tests)}]" if w.tests else "")
        fields = [("evidence", line) for line in c.evidence or (c.reason(),)]
        fields += [("ref", f"{ref} {ref_url(ref) or ''}".rstrip()) for ref in w.refs]
        items.append((f"{w.id}: {c.status.upper()}  (sets {sets}; {scope})", fields))
    # report.records: fitted and coloured on a terminal, `    label: text` lines elsewhere (as before)
    text = report.records(items, styles={"OBSOLETE": "bold red", "APPLIES": "green"})
    if not sources.any:
        note = "no evidence given: name a vLLM checkout (--vllm-src PATH) or an image (--image TAG)"
        text += "\n\n" + report.lines([note])
    return text
