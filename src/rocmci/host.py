"""Host concerns: the version, the resolved settings, and what this host can do (doctor)."""

from __future__ import annotations

from pathlib import Path

from rocmci import settings as settingsmod
from rocmci.report import table, to_json


def version() -> int:
    from rocmci import __version__

    print(f"rocmci {__version__}")
    return 0


NOT_SET = "(not set)"  # None and '' alike: the source column says what an unset value means


def shown_value(value) -> str:
    """A setting's value for people: booleans as in pyproject, nothing set as one word for None and ''."""
    if value is None or value == "":
        return NOT_SET
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def shown_source(source: str, checkout: str) -> str:
    """Where a value came from, with the vLLM checkout's path left out (it is printed once, below)."""
    return source.replace(f"{checkout}/", "") if checkout else source


def settings_rows(resolved) -> list[tuple[str, str, str]]:
    # The value as rows() gives it (credentials masked), not the raw one: rows() is the one display of a setting.
    return [(name, shown_value(masked if isinstance(resolved.values[name].value, str) else resolved.values[name].value),
             shown_source(source, resolved.vllm_src))
            for name, masked, source in resolved.rows()]  # fmt: skip


def show_settings(flags) -> int:
    from rocmci.report import safe, terminal_mode

    resolved = settingsmod.resolve()
    if flags.json:
        print(to_json({name: {"value": value, "source": source} for name, value, source in resolved.rows()}))
        return 0
    rows = settings_rows(resolved)
    headers = ("setting", "value", "source")
    mode = terminal_mode()
    if mode.interactive and not _fits(headers, rows, mode.width or 80):
        # Too narrow for three columns (80 is): a setting per line, its source after the value only where
        # it is not the built-in default, so the common case stays one line.
        rows2 = [(n, val if src == "default" else f"{val}  ({src})") for n, val, src in rows]
        print(table(("setting", "value (source, where not the default)"), rows2, styles={NOT_SET: "dim"}))
    else:
        print(table(headers, rows, styles={"default": "dim", NOT_SET: "dim"}))
    print(f"\nworkspace: {safe(resolved.workspace)}")  # a checkout's path may hold any character
    if resolved.vllm_src:
        print(f"vLLM checkout: {safe(resolved.vllm_src)}")
    return 0


def _fits(headers, rows, width: int) -> bool:
    from rocmci.report import GAP

    natural = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return sum(natural) + GAP * (len(headers) - 1) <= width


def _file_check(name: str, path: Path, what: str = ""):
    from rocmci.doctor import Check

    detail = f"{path} ({what})" if what.startswith("the packaged") else str(path)
    return Check(name, path.is_file(), detail, f"create {path} or point the setting at one")


def doctor(flags) -> int:
    from rocmci import doctor as doc
    from rocmci.engine import Engine
    from rocmci.errors import UsageError
    from rocmci.gpus import check_root
    from rocmci.image_names import configured_image
    from rocmci.report import lines as report_lines

    s = settingsmod.resolve(flags={"vllm_src": flags.vllm_src})
    root = check_root(flags.host_root)
    try:
        image_ref = configured_image(s)
    except UsageError:
        image_ref = None  # no Dockerfile to name it from: reported as a missing image
    checks = doc.host_checks(
        root / "sys/class/kfd/kfd/topology/nodes", root / "dev/kfd", str(root / "dev/dri/renderD*")
    )
    engine = Engine(s.docker, s.engine_timeout)
    checks += doc.engine_checks(engine, image_ref, want_buildkit=flags.for_ in (None, "build"))
    if flags.for_ in (None, "build"):
        engine_ok = next(c.ok for c in checks if c.name == "docker engine")
        checks.append(doc.features_check(engine, Path(s.vllm_src) if s.vllm_src else None, engine_ok))
        checks.append(doc.tiers_check(engine, s, engine_ok))
    checks.append(doc.disk_check(s.workspace))
    # the files the pipeline tasks would read, found as they find them (so doctor and the tasks agree)
    from rocmci.pipeline.service import inventory_file, step_file

    checks.append(_file_check("step file", step_file(s)[0]))
    inventory, inventory_what = inventory_file(s)
    checks.append(_file_check("inventory", inventory, inventory_what))
    if flags.json:
        print(to_json([c.__dict__ for c in checks]))
    else:
        print(table(("check", "status", "detail"), doc.rows(checks, flags.for_), styles=doc.STATUS_STYLES))
        print("\n" + report_lines(doc.verdict(checks)))
    doc.raise_if_missing(checks, flags.for_)
    return 0
