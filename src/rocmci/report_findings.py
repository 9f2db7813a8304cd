"""Findings for people (grouped under their file, fitted to the terminal) and for machines (JSON-ready dicts).

Findings are any objects with path (or file), line, col, severity, rule, message and optionally origin:
rocmci.findings.Finding for the pipeline rules and the image arch-flow check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rocmci.report import GAP, INDENT, _singular, console, plural, safe


def _path(finding: Any) -> str:
    """The file a finding is in: `path`, or `file` as rocmci.findings.Finding names it."""
    return str(getattr(finding, "path", None) or getattr(finding, "file", ""))


def finding_line(f: Any) -> str:
    """The compiler format, one line, for logs, pipes and editors: escaped, and bounded whatever the input
    held (each field is cut at report.MAX_FIELD characters)."""
    origin = getattr(f, "origin", None)
    tail = f" (from {safe(origin)})" if origin else ""
    return f"{safe(_path(f))}:{f.line}:{f.col}: {safe(f.severity)} [{safe(f.rule)}] {safe(f.message)}{tail}"


def fix_line(f: Any) -> str | None:
    """The finding's fix, as the line printed under it (image.check's findings know one)."""
    fix = getattr(f, "fix", None)
    return f"    fix: {safe(fix)}" if fix else None


def finding_dict(f: Any) -> dict[str, Any]:
    return {
        "file": _path(f),
        "line": f.line,
        "col": f.col,
        "severity": f.severity,
        "rule": f.rule,
        "message": f.message,
        "origin": getattr(f, "origin", None),
    }


_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}


def _group(findings: Iterable[Any]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for f in findings:
        groups.setdefault(_path(f), []).append(f)
    return groups


def _findings_renderable(findings: Sequence[Any], with_fix: bool = False):
    """Findings under their file: `line:col  severity  message  rule`, the message wrapped between words."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    parts = []
    for path, group in _group(findings).items():
        parts.append(Text(safe(path), style="bold underline"))
        pos_width = max(len(f"{f.line}:{f.col}") for f in group)
        sev_width = max(len(str(f.severity)) for f in group)
        grid = Table.grid(padding=(0, GAP, 0, 0))
        grid.add_column(width=pos_width, no_wrap=True, justify="right", style="dim")
        grid.add_column(width=sev_width, no_wrap=True)
        grid.add_column(overflow="fold")
        for f in group:
            message = Text(safe(f.message))
            origin = getattr(f, "origin", None)
            if origin:
                # The heading already names the file: an origin in it is just a line.
                local = safe(origin.removeprefix(f"{path}:"))
                message.append(f" (from line {local})" if local != safe(origin) else f" (from {local})", style="dim")
            message.append(f"  {safe(f.rule)}", style="dim cyan")
            if with_fix and getattr(f, "fix", None):
                message.append(f"\nfix: {safe(f.fix)}", style="green")
            severity = Text(safe(f.severity), style=_SEVERITY_STYLE.get(f.severity, ""))
            grid.add_row(f"{f.line}:{f.col}", severity, message)
        parts.append(Padding(grid, (0, 0, 0, INDENT)))
    return Group(*parts)


def render_findings(findings: Sequence[Any], out, *, with_fix: bool = False) -> None:
    """Print findings to a rich Console made by `console()`.

    Findings are objects with path (or file), line, col, severity, rule, message and optionally origin
    (and fix, shown under the finding when `with_fix`). On a terminal they are grouped under their file
    and fitted to its width; elsewhere one line each.
    """
    if not findings:
        return
    if not out.is_terminal:
        for f in findings:
            out.print(finding_line(f), soft_wrap=True)
            fix = fix_line(f) if with_fix else None
            if fix:
                out.print(fix, soft_wrap=True)
        return
    out.print(_findings_renderable(findings, with_fix))


def summary_line(name: str | None, errors: int, warnings: int, steps: int, subject: str = "step") -> str:
    """'test-amd.yaml: 1 error, 0 warnings in 190 steps'; `subject` is what `steps` counts, either number."""
    head = f"{safe(name)}: " if name else ""
    return f"{head}{plural(errors, 'error')}, {plural(warnings, 'warning')} in {plural(steps, _singular(subject))}"


def render_summary(name: str | None, errors: int, warnings: int, steps: int, subject: str, out) -> None:
    if not out.is_terminal:
        out.print(summary_line(name, errors, warnings, steps, subject))
        return
    from rich.text import Text

    style = "bold red" if errors else ("yellow" if warnings else "green")
    out.print(Text(summary_line(name, errors, warnings, steps, subject), style=style), soft_wrap=not out.is_terminal)


def report_dict(report: Any, name: str | None = None) -> dict[str, Any]:
    """A validation report (findings, errors, warnings, steps, subject) for machines."""
    data: dict[str, Any] = {"file": name} if name else {}
    data.update(
        errors=report.errors,
        warnings=report.warnings,
        steps=report.steps,
        subject=getattr(report, "subject", "steps"),
        findings=[finding_dict(f) for f in report.findings],
    )
    return data


def print_report(report: Any, *, name: str | None = None, out=None, with_fix: bool = False) -> None:
    """Findings then the summary line of one validation report, for people."""
    out = console() if out is None else out
    render_findings(report.findings, out, with_fix=with_fix)
    render_summary(name, report.errors, report.warnings, report.steps, getattr(report, "subject", "steps"), out)


def print_findings_and_line(findings: Sequence[Any], line: str, *, out=None, with_fix: bool = True) -> None:
    """Findings (with their fixes), a blank line, then one closing sentence, red on a terminal when any
    finding is an error: image.check's report."""
    out = console() if out is None else out
    render_findings(findings, out, with_fix=with_fix)
    if not out.is_terminal:
        out.print(("\n" if findings else "") + safe(line, limit=None))
        return
    from rich.text import Text

    errors = any(getattr(f, "severity", "") == "error" for f in findings)
    if findings:
        out.print("")
    out.print(Text(safe(line, limit=None), style="bold red" if errors else ("yellow" if findings else "green")))
