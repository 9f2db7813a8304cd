"""Read ARG declarations from a Dockerfile: the single source of pins and of the default arch list."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from rocmci.errors import InputError


@dataclass(frozen=True)
class ArgDecl:
    name: str
    default: str | None
    line: int  # 1-based line of the ARG instruction
    stage: str | None  # None for the global scope before the first FROM


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; comment and blank lines inside a continuation are dropped."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            if not stripped or stripped.startswith("#"):
                continue
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        out.append((start, " ".join(pending)))
        pending = []
    if pending:
        out.append((start, " ".join(pending)))
    return out


def parse_args(text: str, *, path: str = "Dockerfile") -> list[ArgDecl]:
    decls: list[ArgDecl] = []
    stage: str | None = None
    for line, instruction in logical_lines(text):
        keyword, _, rest = instruction.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else words[0] if words else "?"
        elif keyword == "ARG":
            try:
                words = shlex.split(rest)
            except ValueError as exc:
                raise InputError(f"cannot parse ARG: {exc}", where=f"{path}:{line}") from None
            for word in words:
                name, eq, value = word.partition("=")
                decls.append(ArgDecl(name=name, default=value if eq else None, line=line, stage=stage))
    return decls


def arg_defaults(path: Path) -> dict[str, ArgDecl]:
    """Each ARG that has a default, by name. A name given two defaults is an error: one source only."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            "Dockerfile not found", where=str(path), hint="set 'dockerfile' or run from the workspace"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read Dockerfile: {exc}", where=str(path)) from None
    defaults: dict[str, ArgDecl] = {}
    for decl in parse_args(text, path=str(path)):
        if decl.default is None:
            continue
        if decl.name in defaults:
            first = defaults[decl.name]
            raise InputError(
                f"ARG {decl.name} has a second default (first at line {first.line})",
                where=f"{path}:{decl.line}",
                hint="declare the default once in the global scope and redeclare it without a value in stages",
            )
        defaults[decl.name] = decl
    return defaults
