"""Registry of known workarounds: what each sets, where it applies, why, and the evidence that ends it.

A workaround is obsolete as soon as one of its `remove_when` conditions is met by a fact rocmci can
check: a line in (or missing from) a file of the vLLM checkout, a commit the checkout contains
(`git merge-base --is-ancestor`), or an image label. Checking is separate from deciding, so a run
can say which workarounds it applied or left out, and why.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rocmci import labels as label
from rocmci import yamldoc
from rocmci.errors import InputError

ENTRY_KEYS = {"id", "applied_by", "sets", "applies_to", "why", "refs", "remove_when"}
SCOPE_KEYS = {"platform", "workloads", "tests"}
CONDITION_KINDS = {"vllm_file_lacks", "vllm_file_has", "vllm_commit", "image_label"}
FILE_KEYS = {"path", "pattern"}
LABEL_KEYS = {"name", "has"}
FIXES_LABEL = label.ROCM_FIXES
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")

APPLIES = "applies"
OBSOLETE = "obsolete"
TRACKED = "tracked"


@dataclass(frozen=True)
class Condition:
    kind: str  # one of CONDITION_KINDS
    path: str = ""  # vllm_file_*: relative path in the checkout
    pattern: str = ""  # vllm_file_*: regular expression, matched per line
    commit: str = ""  # vllm_commit
    label: str = ""  # image_label: label name
    has: str = ""  # image_label: comma-separated item the label must list
    where: str = ""  # registry file:line, for messages


@dataclass(frozen=True)
class Workaround:
    id: str
    applied_by: str  # "rocmci" (we set it) or who else carries it (tracked only)
    sets: dict[str, str]
    platform: str
    workloads: tuple[str, ...]
    tests: tuple[str, ...]
    why: str
    refs: tuple[str, ...]
    remove_when: tuple[Condition, ...] = ()

    def applies(self, workload: str, selection: str | None = None) -> bool:
        if self.applied_by != "rocmci" or self.platform != "rocm" or workload not in self.workloads:
            return False
        return not self.tests or selection is None or selection in self.tests


@dataclass(frozen=True)
class Sources:
    """The facts a check may use; None where nothing was given."""

    vllm_src: Path | None = None
    image: str | None = None
    labels: dict[str, str] | None = None

    @property
    def any(self) -> bool:
        return self.vllm_src is not None or self.labels is not None


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


def _file_lines(src: Path, rel: str) -> list[str] | None:
    try:
        return (src / rel).read_text(encoding="utf-8", errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def check_condition(c: Condition, sources: Sources) -> tuple[bool | None, str]:
    """(met, evidence): True when the condition holds, False when it was checked and does not, None unknown."""
    if c.kind in ("vllm_file_lacks", "vllm_file_has"):
        if sources.vllm_src is None:
            return None, ""
        lines = _file_lines(sources.vllm_src, c.path)
        shown = f"{sources.vllm_src}/{c.path}"
        if lines is None:
            return None, f"{shown} not found"
        regex = re.compile(c.pattern)
        hit = next((n for n, line in enumerate(lines, 1) if regex.search(line)), None)
        if c.kind == "vllm_file_lacks":
            if hit is None:
                return True, f"{shown}: no line matches /{c.pattern}/ any more"
            return False, f"{shown}:{hit}: {lines[hit - 1].strip()}"
        if hit is not None:
            return True, f"{shown}:{hit}: {lines[hit - 1].strip()}"
        return False, f"{shown}: no line matches /{c.pattern}/"
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


def check(w: Workaround, sources: Sources) -> Check:
    if w.applied_by != "rocmci":
        return Check(w, TRACKED, (f"carried by {w.applied_by}, not by rocmci",))
    seen: list[str] = []
    for condition in w.remove_when:
        met, evidence = check_condition(condition, sources)
        if met:
            return Check(w, OBSOLETE, (evidence,))
        if evidence:
            seen.append(evidence)
    return Check(w, APPLIES, tuple(seen))


def check_all(registry: list[Workaround], sources: Sources) -> list[Check]:
    return [check(w, sources) for w in registry]


def env_for(
    registry: list[Workaround], workload: str, selection: str | None, obsolete: set[str] = frozenset()
) -> tuple[dict[str, str], list[str]]:
    """Environment the workloads get from the registry (obsolete entries left out), and the ids that supplied it."""
    env: dict[str, str] = {}
    ids: list[str] = []
    for w in registry:
        if w.applies(workload, selection) and w.sets and w.id not in obsolete:
            env.update(w.sets)
            ids.append(w.id)
    return env, ids


# --- loading ----------------------------------------------------------------------------------------


def _strings(value, where: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{what} must be a list of strings", where=where)
    return tuple(value)


def _keys(block, keys: set[str], where: str, what: str) -> dict:
    if (
        not isinstance(block, dict)
        or set(map(str, block)) != keys
        or not all(isinstance(v, str) for v in block.values())
    ):
        raise InputError(f"{what} takes exactly {', '.join(sorted(keys))} (strings)", where=where)
    return block


def _condition(item, where: str) -> Condition:
    if not isinstance(item, dict) or len(item) != 1 or next(iter(item)) not in CONDITION_KINDS:
        raise InputError(f"each 'remove_when' item is one of {', '.join(sorted(CONDITION_KINDS))}", where=where)
    kind, body = next(iter(item.items()))
    if kind == "vllm_commit":
        if not isinstance(body, str) or not _COMMIT.fullmatch(body):
            raise InputError("vllm_commit must be a commit hash (7 to 40 lowercase hex digits)", where=where)
        return Condition(kind, commit=body, where=where)
    if kind == "image_label":
        block = _keys(body, LABEL_KEYS, where, kind)
        return Condition(kind, label=block["name"], has=block["has"], where=where)
    block = _keys(body, FILE_KEYS, where, kind)
    rel = PurePosixPath(block["path"])
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise InputError(f"{kind} path {block['path']!r} must be relative to the vLLM checkout", where=where)
    try:
        re.compile(block["pattern"])
    except re.error as exc:
        raise InputError(f"{kind} pattern is not a regular expression: {exc}", where=where) from None
    return Condition(kind, path=str(rel), pattern=block["pattern"], where=where)


def from_document(doc: yamldoc.Document) -> list[Workaround]:
    doc.refuse_duplicates()
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("workarounds"), list):
        raise InputError("a workaround registry is a mapping with a 'workarounds' list", where=doc.where(()))
    out: list[Workaround] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["workarounds"]):
        path = ("workarounds", i)
        where = doc.where(path)
        if not isinstance(entry, dict):
            raise InputError("each workaround must be a mapping", where=where)
        unknown = sorted(set(map(str, entry)) - ENTRY_KEYS)
        if unknown:
            raise InputError(f"unknown key '{unknown[0]}'", where=doc.where((*path, unknown[0])))
        wid = entry.get("id")
        if not isinstance(wid, str) or not wid or wid in seen:
            raise InputError("each workaround needs a unique 'id' string", where=where)
        seen.add(wid)
        sets = entry.get("sets") or {}
        if not isinstance(sets, dict) or not all(
            isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str) for k, v in sets.items()
        ):
            raise InputError(
                "'sets' must map environment variable names to string values", where=doc.where((*path, "sets"))
            )
        scope = entry.get("applies_to") or {}
        if not isinstance(scope, dict) or set(map(str, scope)) - SCOPE_KEYS:
            raise InputError(
                f"'applies_to' takes {', '.join(sorted(SCOPE_KEYS))}", where=doc.where((*path, "applies_to"))
            )
        remove = entry.get("remove_when") or []
        if not isinstance(remove, list):
            raise InputError("'remove_when' must be a list of conditions", where=doc.where((*path, "remove_when")))
        conditions = tuple(_condition(c, doc.where((*path, "remove_when", n))) for n, c in enumerate(remove))
        out.append(
            Workaround(
                id=wid,
                applied_by=str(entry.get("applied_by", "rocmci")),
                sets=dict(sets),
                platform=str(scope.get("platform", "rocm")),
                workloads=_strings(scope.get("workloads"), where, "applies_to.workloads"),
                tests=_strings(scope.get("tests"), where, "applies_to.tests"),
                why=" ".join(str(entry.get("why", "")).split()),
                refs=_strings(entry.get("refs"), where, "refs"),
                remove_when=conditions,
            )
        )
    return out


def load_registry(path: Path, display: str | None = None) -> list[Workaround]:
    return from_document(yamldoc.load(path, display))


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
    """Each workaround, its status and evidence, for people (`invoke workarounds`)."""
    from rocmci.runs.results import ref_url

    lines = []
    for c in checks:
        w = c.workaround
        sets = ", ".join(f"{k}={v}" for k, v in w.sets.items()) or "-"
        scope = ", ".join(w.workloads) + (f" [{', '.join(w.tests)}]" if w.tests else "")
        lines.append(f"{w.id}: {c.status.upper()}  (sets {sets}; {scope})")
        lines += [f"    evidence: {line}" for line in c.evidence or (c.reason(),)]
        lines += [f"    ref: {ref} {ref_url(ref) or ''}".rstrip() for ref in w.refs]
    if not sources.any:
        lines.append("\nno evidence given: name a vLLM checkout (--vllm-src PATH) or an image (--image TAG)")
    return "\n".join(lines)
