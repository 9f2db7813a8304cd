"""Registry of known workarounds: what each sets, where it applies, why, and when to remove it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rocmci.errors import InputError
from rocmci.pipeline import yamldoc

ENTRY_KEYS = {"id", "applied_by", "sets", "applies_to", "why", "refs", "remove_when"}
SCOPE_KEYS = {"platform", "workloads", "tests"}
REMOVE_KEYS = {"fix", "rocm_version_at_least"}
FIXES_LABEL = "rocmci.rocm.fixes"
ROCM_VERSION_LABEL = "rocmci.rocm.version"
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


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
    fix: str | None
    rocm_version_at_least: str | None

    def applies(self, workload: str, selection: str | None = None) -> bool:
        if self.applied_by != "rocmci" or self.platform != "rocm" or workload not in self.workloads:
            return False
        return not self.tests or selection is None or selection in self.tests


@dataclass
class ImageFacts:
    """What an image tells about its ROCm: labels, and the version file if it was read."""

    fixes: set[str] = field(default_factory=set)
    rocm_version: str | None = None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def stale_reason(w: Workaround, facts: ImageFacts | None) -> str | None:
    """Why the workaround can go, or None while it is still needed (or nothing says otherwise)."""
    if facts is None:
        return None
    if w.fix and w.fix in facts.fixes:
        return f"the image declares {w.fix} ({FIXES_LABEL})"
    if w.rocm_version_at_least and facts.rocm_version:
        if _version(facts.rocm_version) >= _version(w.rocm_version_at_least):
            return f"the image's ROCm {facts.rocm_version} >= {w.rocm_version_at_least}"
    return None


def _strings(value, where: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{what} must be a list of strings", where=where)
    return tuple(value)


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
        remove = entry.get("remove_when") or {}
        for block, keys, name in ((scope, SCOPE_KEYS, "applies_to"), (remove, REMOVE_KEYS, "remove_when")):
            if not isinstance(block, dict) or set(map(str, block)) - keys:
                raise InputError(f"'{name}' takes {', '.join(sorted(keys))}", where=doc.where((*path, name)))
        version = remove.get("rocm_version_at_least")
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
                fix=remove.get("fix"),
                rocm_version_at_least=None if version is None else str(version),
            )
        )
    return out


def load_registry(path: Path, display: str | None = None) -> list[Workaround]:
    return from_document(yamldoc.load(path, display))


def env_for(registry: list[Workaround], workload: str, selection: str | None) -> tuple[dict[str, str], list[str]]:
    """Environment the workloads get from the registry, and the ids that supplied it."""
    env: dict[str, str] = {}
    ids: list[str] = []
    for w in registry:
        if w.applies(workload, selection) and w.sets:
            env.update(w.sets)
            ids.append(w.id)
    return env, ids
