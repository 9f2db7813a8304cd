"""What this host can do, and what a task needs that is missing."""

from __future__ import annotations

import glob
import shutil
from dataclasses import dataclass
from pathlib import Path

from rocmci import gpus as gpumod
from rocmci import labels as label
from rocmci.engine import NO_BUILDER_HINT, START_HINT
from rocmci.errors import EngineError, PreflightError, UsageError
from rocmci.report import plural

NEEDS = {
    "build": ("docker engine", "buildkit", "dockerfile features", "free disk"),
    "run": ("docker engine", "/dev/kfd", "render nodes", "AMD GPUs", "image"),
    "pipeline": ("step file", "inventory"),
}
BUILD_DISK_GIB = 100  # the real image with its build stages takes tens of GiB


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def host_checks(kfd_nodes: Path, kfd_device: Path, dri_glob: str) -> list[Check]:
    checks = []
    kfd = kfd_device.exists()
    checks.append(
        Check("/dev/kfd", kfd, "present" if kfd else "absent", "install the amdgpu driver (ROCm) on an AMD GPU host")
    )
    renders = sorted(glob.glob(dri_glob))
    checks.append(
        Check(
            "render nodes",
            bool(renders),
            ", ".join(renders) or "none",
            "no /dev/dri/renderD* nodes: amdgpu driver not loaded",
        )
    )
    found = gpumod.detect_gpus(kfd_nodes)
    if found:
        archs = sorted({g.arch for g in found})
        detail = f"{plural(len(found), 'GPU')}: " + ", ".join(f"{a} x{sum(g.arch == a for g in found)}" for a in archs)
    else:
        detail = f"no AMD GPU on this host (nothing in {kfd_nodes})"
    checks.append(Check("AMD GPUs", bool(found), detail, "workloads need an AMD GPU host (MI300/MI325/MI355)"))
    return checks


def engine_checks(engine, image_ref: str | None, want_buildkit: bool) -> list[Check]:
    try:
        version = engine.server_version()
    except EngineError as exc:
        fix = exc.hint or ""
        return [
            Check("docker engine", False, exc.message, fix),
            Check("buildkit", False, "engine not reachable", fix),
            Check("image", False, "engine not reachable", fix),
        ]
    checks = [Check("docker engine", True, f"server {version}, client {engine.client}")]
    if want_buildkit:
        ok, detail = engine.buildkit_works()
        checks.append(Check("buildkit", ok, detail, NO_BUILDER_HINT))
    else:
        checks.append(Check("buildkit", True, "not checked (use --for build)"))
    labels = engine.image_labels(image_ref) if image_ref else None
    if image_ref is None:
        checks.append(
            Check("image", False, "no image configured", "set 'image' or build one with `rocmci image.build`")
        )
    elif labels is None:
        checks.append(Check("image", False, f"{image_ref} not found", "build it with `rocmci image.build`"))
    else:
        checks.append(Check("image", True, f"{image_ref}: archs {labels.get(label.ARCH, 'unlabelled')}"))
    return checks


def features_check(engine, checkout: Path | None, engine_ok: bool) -> Check:
    """Whether the builder accepts every BuildKit feature vLLM's Dockerfile uses (asked of the builder)."""
    name = "dockerfile features"
    if checkout is None:
        return Check(name, True, "not checked (no vLLM checkout: --vllm-src)")
    if not engine_ok:
        return Check(name, False, "engine not reachable", START_HINT)
    from rocmci.checkout import load
    from rocmci.image import features

    df = load(checkout)
    found = features.uses(df)
    try:
        gaps = features.missing(found, engine.parses)
    except EngineError as exc:
        return Check(name, False, exc.message, exc.hint or "")
    if gaps:
        more = f" (and {len(gaps) - 1} more)" if len(gaps) > 1 else ""
        return Check(name, False, features.describe(df, gaps[0]) + more, features.WHAT_TO_DO)
    used = ", ".join(u.feature for u in found) or "none beyond the classic builder's"
    return Check(name, True, f"{df.display}: {used}; all accepted by {engine.client}")


def tiers_check(engine, s, engine_ok: bool) -> Check:
    """Which path image.build's tiers take from one to the next on the builder `docker build` reaches."""
    if not engine_ok:
        return Check("tier chaining", False, "engine not reachable", START_HINT)
    from rocmci.image.plan import tier_chain

    try:
        builder = engine.builder()
    except EngineError as exc:
        return Check("tier chaining", False, exc.message, exc.hint or "")
    chain = tier_chain(s, builder)
    return Check("tier chaining", True, f"{chain.kind} on {chain.builder}: {chain.describe()}")


def disk_check(path: Path) -> Check:
    free = shutil.disk_usage(path).free / 2**30
    return Check(
        "free disk",
        free >= BUILD_DISK_GIB,
        f"{free:.0f} GiB free at {path}",
        f"free up to {BUILD_DISK_GIB} GiB for a build",
    )


def needed_failures(checks: list[Check], purpose: str | None) -> list[Check]:
    if purpose is None:
        return []
    if purpose not in NEEDS:
        raise UsageError(f"unknown --for {purpose!r}", hint=f"choose one of {', '.join(NEEDS)}")
    return [c for c in checks if c.name in NEEDS[purpose] and not c.ok]


STATUS_STYLES = {"ok": "green", "no": "yellow", "MISSING": "bold red"}
# What each purpose is called in the closing lines, in the order they are told.
PURPOSE_NAMES = {"pipeline": "pipeline tasks", "build": "image builds", "run": "DeepEP workloads"}


def rows(checks: list[Check], purpose: str | None) -> list[tuple[str, str, str]]:
    """The table: a check the chosen purpose needs and lacks is MISSING, any other failure is 'no'."""
    needed = {c.name for c in needed_failures(checks, purpose)}
    return [(c.name, "MISSING" if c.name in needed else ("ok" if c.ok else "no"), c.detail) for c in checks]


def verdict(checks: list[Check]) -> list[str]:
    """One line per purpose, from the same checks as the table, so the two cannot disagree."""
    by_name = {c.name: c for c in checks}
    lines = []
    for purpose, title in PURPOSE_NAMES.items():
        lacking = [name for name in NEEDS[purpose] if name in by_name and not by_name[name].ok]
        if lacking:
            fix = by_name[lacking[0]].fix
            lines.append(f"{title}: not here, missing {', '.join(lacking)}" + (f" ({fix})" if fix else ""))
        else:
            lines.append(f"{title}: ready")
    return lines


def raise_if_missing(checks: list[Check], purpose: str | None) -> None:
    missing = needed_failures(checks, purpose)
    if missing:
        first = missing[0]
        others = f" (and {len(missing) - 1} more above)" if len(missing) > 1 else ""
        raise PreflightError(f"not ready for {purpose}: {first.name}: {first.detail}{others}", hint=first.fix)
