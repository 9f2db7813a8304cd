"""GPU architecture lists: parse, normalise and check them against what DeepEP supports.

One canonical form is used everywhere (build args, labels, tags, pipeline keys): lower case,
de-duplicated, ordered by GPU generation, joined with ';' and no spaces, because rocSHMEM's
build script splices the list into cmake unquoted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rocmci.errors import UsageError
from rocmci.values import shown  # messages quote at most 60 characters of a value: lines stay bounded

# Facts from AMD's documentation; used in messages so users can map an arch to hardware.
PRODUCTS: dict[str, str] = {
    "gfx90a": "MI210/MI250/MI250X",
    "gfx942": "MI300A/MI300X/MI325X",
    "gfx950": "MI350X/MI355X",
    "gfx1100": "Radeon RX 7900 (RDNA3)",
    "gfx1101": "Radeon RDNA3",
    "gfx1102": "Radeon RDNA3",
    "gfx1200": "Radeon RDNA4",
    "gfx1201": "Radeon RDNA4",
}

# DeepEP's ROCm setup.py accepts exactly these; anything else is dropped or fails at build time.
# When PYTORCH_ROCM_ARCH is unset it builds all of them, so the same tuple is DeepEP's default list.
DEEPEP_ARCHS: tuple[str, ...] = ("gfx942", "gfx950")
DEEPEP_DEFAULT_ARCHS: tuple[str, ...] = DEEPEP_ARCHS
DEEPEP_ARCHS_SOURCE = (
    "ROCm/DeepEP's setup.py, main of May 2026 (allowed_arch, and the list it builds when PYTORCH_ROCM_ARCH "
    "is unset)"
)

NATIVE = "native"

_TOKEN = re.compile(r"gfx(\d{1,2})([0-9a-f])([0-9a-f])")
_ALLOWED_CHARS = re.compile(r"[A-Za-z0-9;, \t]*")


def arch_key(arch: str) -> tuple[int, int, int]:
    """Sort key by (major, minor, stepping): gfx90a < gfx942 < gfx950 < gfx1100."""
    m = _TOKEN.fullmatch(arch)
    if not m:
        raise UsageError(f"{shown(arch)} is not a gfx target")
    return int(m.group(1)), int(m.group(2), 16), int(m.group(3), 16)


def describe(arch: str) -> str:
    product = PRODUCTS.get(arch)
    return f"{arch} ({product})" if product else arch


def parse_arch_list(text: str, *, what: str = "arch list") -> tuple[str, ...]:
    """Parse 'gfx942;gfx950', 'gfx942,gfx950', 'GFX942 gfx942' ... into canonical order.

    Rejects anything that is not a plain gfx target name. Target IDs with features
    (gfx942:xnack-) are rejected on purpose: DeepEP's setup.py compares plain names.
    """
    if not isinstance(text, str):
        raise UsageError(f"{what} must be a string like 'gfx942;gfx950', got {type(text).__name__}")
    if not _ALLOWED_CHARS.fullmatch(text):
        bad = next(ch for ch in text if not _ALLOWED_CHARS.fullmatch(ch))
        if bad == ":":
            raise UsageError(
                f"{what} {shown(text)} has a target feature suffix (':...')",
                hint="DeepEP matches plain names only: drop ':sramecc+'/':xnack-' and use e.g. gfx942",
            )
        raise UsageError(
            f"{what} {shown(text)} contains {bad!r}",
            hint="use gfx names separated by ';' or ',', e.g. 'gfx942;gfx950'",
        )
    tokens = [t for t in re.split(r"[;,\s]+", text.lower()) if t]
    if not tokens:
        raise UsageError(f"{what} is empty", hint="give at least one arch, e.g. 'gfx942'")
    for token in tokens:
        if not _TOKEN.fullmatch(token):
            raise UsageError(f"{what}: {shown(token)} is not a gfx target", hint="use names like gfx942 or gfx950")
    return tuple(sorted(set(tokens), key=arch_key))


def canonical(archs: Iterable[str]) -> str:
    return ";".join(archs)


def slug(archs: Iterable[str]) -> str:
    """Form safe in image tags and Buildkite keys, which reject ';'."""
    return "-".join(archs)


def require_deepep_support(archs: tuple[str, ...]) -> None:
    """Fail before any build when the list names an arch DeepEP cannot be built for."""
    unsupported = [a for a in archs if a not in DEEPEP_ARCHS]
    if unsupported:
        supported = ", ".join(describe(a) for a in DEEPEP_ARCHS)
        raise UsageError(
            f"DeepEP on ROCm cannot target {', '.join(describe(a) for a in unsupported)}",
            hint=f"DEEPEP_ROCM_ARCH may only name {supported}",
        )


def resolve_arch_list(text: str, *, host_archs: Iterable[str] = (), what: str = "arch list") -> tuple[str, ...]:
    """Like parse_arch_list, with 'native' meaning the archs detected on this host."""
    if text.strip().lower() == NATIVE:
        found = tuple(sorted(set(host_archs), key=arch_key))
        if not found:
            raise UsageError(
                "--arch native found no AMD GPU on this host",
                hint="name the archs instead, e.g. --arch 'gfx942;gfx950'",
            )
        return found
    return parse_arch_list(text, what=what)
