"""Registry of known workarounds: what each sets, where it applies, why, and the evidence that ends it.

A workaround is obsolete as soon as one of its `remove_when` conditions is met by a fact rocmci can
check, read from what will run: vLLM's test module and the conftest/helper modules it imports, parsed
as Python (an assignment of the variable in code, never a comment or a line pattern); the instructions
of a Dockerfile of the checkout (not its comments); a commit the checkout contains; an image label.
Every check reads each file once and does linear work on it, whatever the file holds. Checking is
separate from deciding, so a run can say which workarounds it applied or left out, and why.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rocmci import fixes, yamldoc
from rocmci import labels as label
from rocmci.errors import InputError

ENTRY_KEYS = {"id", "applied_by", "sets", "applies_to", "why", "refs", "remove_when"}
SCOPE_KEYS = {"platform", "workloads", "tests"}
CONDITION_KINDS = {"vllm_tests_do_not_set", "vllm_dockerfile_applies", "vllm_commit", "image_label", "all_of"}
TESTS_KEYS = {"path", "variable"}
DOCKERFILE_KEYS = {"path", "fix"}
LABEL_KEYS = {"name", "has"}
_FIX = re.compile(r"([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9._-]+)#([0-9]{1,9})")
FIXES_LABEL = label.ROCM_FIXES
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")

APPLIES = "applies"
OBSOLETE = "obsolete"
TRACKED = "tracked"


@dataclass(frozen=True)
class Condition:
    kind: str  # one of CONDITION_KINDS
    path: str = ""  # vllm_*: relative path in the checkout
    variable: str = ""  # vllm_tests_do_not_set: the environment variable
    fix: str = ""  # vllm_dockerfile_applies: owner/repo#N
    parts: tuple[Condition, ...] = ()  # all_of
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


def named_fixes(registry: list[Workaround]) -> tuple[str, ...]:
    """Every fix a `vllm_dockerfile_applies` condition names (all_of parts too), in registry order, once each:
    what an image build looks for in the checkout's Dockerfile.rocm_base and records as a label."""
    found: list[str] = []
    for w in registry:
        for c in w.remove_when:
            found += [part.fix for part in (c.parts or (c,)) if part.kind == "vllm_dockerfile_applies"]
    return tuple(dict.fromkeys(found))


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


def _condition(item, where: str, depth: int = 0) -> Condition:
    if not isinstance(item, dict) or len(item) != 1 or next(iter(item)) not in CONDITION_KINDS:
        raise InputError(f"each 'remove_when' item is one of {', '.join(sorted(CONDITION_KINDS))}", where=where)
    kind, body = next(iter(item.items()))
    if kind == "all_of":
        if depth or not isinstance(body, list) or len(body) < 2:
            raise InputError("all_of takes a list of two or more conditions (not nested)", where=where)
        return Condition(kind, parts=tuple(_condition(part, where, depth + 1) for part in body), where=where)
    if kind == "vllm_commit":
        if not isinstance(body, str) or not _COMMIT.fullmatch(body):
            raise InputError("vllm_commit must be a commit hash (7 to 40 lowercase hex digits)", where=where)
        return Condition(kind, commit=body, where=where)
    if kind == "image_label":
        block = _keys(body, LABEL_KEYS, where, kind)
        return Condition(kind, label=block["name"], has=block["has"], where=where)
    block = _keys(body, TESTS_KEYS if kind == "vllm_tests_do_not_set" else DOCKERFILE_KEYS, where, kind)
    rel = PurePosixPath(block["path"])
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise InputError(f"{kind} path {block['path']!r} must be relative to the vLLM checkout", where=where)
    if kind == "vllm_tests_do_not_set":
        if not _ENV_NAME.fullmatch(block["variable"]) or not block["path"].endswith(".py"):
            raise InputError(f"{kind} names a Python module and an environment variable", where=where)
        return Condition(kind, path=str(rel), variable=block["variable"], where=where)
    if not _FIX.fullmatch(block["fix"]):
        raise InputError(f"{kind} fix {block['fix']!r} must read owner/repo#N", where=where)
    return Condition(kind, path=str(rel), fix=block["fix"], where=where)


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
        _no_secrets(sets, doc, (*path, "sets"))
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


def _no_secrets(sets: dict[str, str], doc, path: tuple) -> None:
    """A workaround's `sets` is public: printed by `workarounds`, in every run's notes and dry run, logged, and
    passed to `docker run -e NAME=value` (visible in `docker inspect`). A secret-named variable or a
    credential-shaped value there is refused at its line; the message names the variable, never the value."""
    from rocmci.secrets import is_secret, secret_kind

    for name, value in sets.items():
        kind = secret_kind(value)
        if kind or (value and is_secret(name)):
            what = f"its value looks like {kind}" if kind else "its name says it holds a secret"
            raise InputError(
                f"'sets' {name}: {what}; what a workaround sets is printed, logged and passed to docker run",
                where=doc.where((*path, name)),
                hint="give secrets from the agent's environment or with --env (redacted), never in the registry",
            )


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
