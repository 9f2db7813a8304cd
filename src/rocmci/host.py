"""Host concerns: the version, the resolved settings, and what this host can do (doctor)."""

from __future__ import annotations

from pathlib import Path

from rocmci import settings as settingsmod
from rocmci.report import table, to_json


def version() -> int:
    from rocmci import __version__

    print(f"rocmci {__version__}")
    return 0


def show_settings(v) -> int:
    resolved = settingsmod.resolve()
    if v.json:
        print(to_json({name: {"value": value, "source": source} for name, value, source in resolved.rows()}))
    else:
        print(table(("setting", "value", "source"), resolved.rows(), styles={"default": "dim"}))
        print(f"\nworkspace: {resolved.workspace}")
    return 0


def _file_check(name: str, path: Path):
    from rocmci.doctor import Check

    return Check(name, path.is_file(), str(path), f"create {path} or point the setting at one")


def doctor(v) -> int:
    from rocmci import doctor as doc
    from rocmci.engine import Engine
    from rocmci.errors import UsageError
    from rocmci.image.service import configured_image
    from rocmci.report import lines as report_lines

    s = settingsmod.resolve()
    root = Path(v.host_root)
    try:
        image_ref = configured_image(s)
    except UsageError:
        image_ref = None  # no Dockerfile to name it from: reported as a missing image
    checks = doc.host_checks(
        root / "sys/class/kfd/kfd/topology/nodes", root / "dev/kfd", str(root / "dev/dri/renderD*")
    )
    checks += doc.engine_checks(Engine(s.docker), image_ref, want_buildkit=v.for_ in (None, "build"))
    checks.append(doc.disk_check(s.workspace))
    checks.append(_file_check("step file", s.path("source")))
    checks.append(_file_check("inventory", s.path("inventory")))
    if v.json:
        print(to_json([c.__dict__ for c in checks]))
    else:
        print(table(("check", "status", "detail"), doc.rows(checks, v.for_), styles=doc.STATUS_STYLES))
        print("\n" + report_lines(doc.verdict(checks)))
    doc.raise_if_missing(checks, v.for_)
    return 0
