"""One function per user-facing task. tasks.py parses flags and calls exactly one of these.

Each returns an exit code (0 on success) or raises a RocmciError; output goes to stdout,
diagnostics to stderr. Heavy modules are imported inside the function that needs them so
that `invoke --list` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rocmci import settings as settingsmod
from rocmci.report import table, to_json


def _settings(**flags: Any) -> settingsmod.Settings:
    return settingsmod.resolve(flags=flags)


def show_settings(*, as_json: bool = False) -> int:
    resolved = _settings()
    if as_json:
        print(to_json({name: {"value": value, "source": source} for name, value, source in resolved.rows()}))
    else:
        print(table(("setting", "value", "source"), resolved.rows()))
        print(f"\nworkspace: {resolved.workspace}")
    return 0


def doctor(*, purpose: str | None = None, kfd_root: str = "/", as_json: bool = False) -> int:
    from rocmci import doctor as doc
    from rocmci.engine import Engine
    from rocmci.image.plan import image_tag

    if purpose is not None and purpose not in doc.NEEDS:
        doc.needed_failures([], purpose)  # raises the usage error with the choices
    s = _settings()
    root = Path(kfd_root)
    image_ref = s.image or image_tag(s.image_repo, s.deepep_ref, _archs(s.arch), None)
    checks = doc.host_checks(
        root / "sys/class/kfd/kfd/topology/nodes", root / "dev/kfd", str(root / "dev/dri/renderD*")
    )
    checks += doc.engine_checks(Engine(s.docker), image_ref, want_buildkit=purpose in (None, "build"))
    checks.append(doc.disk_check(s.workspace))
    checks.append(_file_check("step file", s.path("source")))
    checks.append(_file_check("inventory", s.path("inventory")))
    if as_json:
        print(to_json([c.__dict__ for c in checks]))
    else:
        needed = {c.name for c in doc.needed_failures(checks, purpose)}
        status = {True: "ok", False: "no"}
        rows = [(c.name, "MISSING" if c.name in needed else status[c.ok], c.detail) for c in checks]
        print(table(("check", "status", "detail"), rows))
        if not any(c.ok for c in checks if c.name == "AMD GPUs"):
            print(
                "\nNo AMD GPU on this host: image builds and pipeline work here; "
                "the DeepEP workloads need an AMD GPU host."
            )
    doc.raise_if_missing(checks, purpose)
    return 0


def _file_check(name: str, path: Path):
    from rocmci.doctor import Check

    return Check(name, path.is_file(), str(path), f"create {path} or point the setting at one")


def _archs(text: str) -> tuple[str, ...]:
    from rocmci.arch import parse_arch_list

    return parse_arch_list(text)


def eprint(*args: Any) -> None:
    print(*args, file=sys.stderr)
