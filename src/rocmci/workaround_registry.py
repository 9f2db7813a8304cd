"""The workaround registry file (src/rocmci/data/workarounds.yaml, or the workspace's own): its entries, read
and checked at their lines, and the pure facts both areas take from it.

- runs/workarounds.py checks each entry's `remove_when` against evidence and renders the result;
- a run takes `env_for` its workload; an image build records the fixes `named_fixes` lists as a label.

A leaf below the image and runs areas, so neither imports the other to read one file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rocmci import labels as label
from rocmci import packaged, yamldoc
from rocmci.errors import InputError

PACKAGED = packaged.WORKAROUNDS

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


def named_fixes(registry: list[Workaround]) -> tuple[str, ...]:
    """Every fix a `vllm_dockerfile_applies` condition names (all_of parts too), in registry order, once each:
    what an image build looks for in the checkout's Dockerfile.rocm_base and records as a label."""
    found: list[str] = []
    for w in registry:
        for c in w.remove_when:
            found += [part.fix for part in (c.parts or (c,)) if part.kind == "vllm_dockerfile_applies"]
    return tuple(dict.fromkeys(found))


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
