"""`rocmci-validate FILE...`: the pre-commit hook for vLLM's repository (`.pre-commit-hooks.yaml`).

Each file is generated in memory and validated like `rocmci pipeline.validate --source FILE`. In a vLLM
checkout the DeepEP arch list comes from the workspace's settings (vLLM's docker/Dockerfile.rocm, see
`rocmci settings`) and the pool inventory from the workspace's .buildkite/agents.yaml when it has one,
else from the copy packaged with rocmci. An edge like tasks.py: it parses arguments, and turns typed
errors into one line and an exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

from rocmci.errors import RocmciError

PROG = "rocmci-validate"


class _Version(argparse.Action):
    """--version, with the version looked up only when asked for (it costs start-up time otherwise)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help="show the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        import rocmci

        print(f"{PROG} {rocmci.__version__}")
        parser.exit()


@dataclass(frozen=True)
class FileResult:
    name: str
    report: Any = None  # rocmci.pipeline.validate.Report when the file could be validated
    error: RocmciError | None = None

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return self.error.exit_code
        return 1 if self.report.errors else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0].replace("`", ""))
    p.add_argument("files", nargs="+", metavar="FILE", help="vLLM-style step files (.buildkite/test-amd.yaml)")
    p.add_argument("--arch", help="archs the image's DeepEP is built for (default: the 'arch' setting)")
    p.add_argument("--mirror-hw", help="mirror_hardwares value to generate for (default: the 'mirror_hw' setting)")
    p.add_argument("--json", action="store_true", help="print one JSON document for all files")
    p.add_argument("--version", action=_Version)
    return p


def validate_file(path: str, s) -> FileResult:
    """Generate `path` in memory and validate it; expected failures become the result's error."""
    from rocmci.pipeline import service

    try:
        name, report = service.validate_source_file(path, s)
    except RocmciError as exc:
        return FileResult(path, error=exc)
    return FileResult(name, report=report)


def as_json(results: list[FileResult]) -> str:
    from rocmci.report_findings import report_dict

    files: list[dict[str, Any]] = []
    for r in results:
        if r.error is not None:
            files.append({"file": r.name, "error": r.error.one_line(), "exit_code": r.error.exit_code})
        else:
            files.append(report_dict(r.report, r.name))
    data = {
        "files": files,
        "errors": sum(f.get("errors", 0) for f in files),
        "warnings": sum(f.get("warnings", 0) for f in files),
    }
    return json.dumps(data, indent=2)


def main(argv: list[str] | None = None) -> int:
    from rocmci.errors import raise_on_signals

    try:
        raise_on_signals()  # Ctrl-C and SIGTERM while files are read: one line and 130/143, not a traceback
        args = parser().parse_args(argv)
        from rocmci.heap import no_gc, skip_final_collection

        skip_final_collection()  # the process ends after these files: no last scan of their objects
        with no_gc():  # a short process building acyclic data (rocmci/heap.py), its imports included
            return check_files(args)
    except KeyboardInterrupt as exc:  # errors.Terminated and Signalled are ones too, with their exit codes
        name = getattr(exc, "name", None)  # as `rocmci` says it (cli/program.py)
        what = "interrupted" if name is None else "terminated" if name == "SIGTERM" else f"stopped by {name}"
        print(f"{PROG}: {what}", file=sys.stderr)
        return getattr(exc, "exit_code", 130)


def check_files(args: argparse.Namespace) -> int:
    from rocmci import report, report_findings, settings

    try:
        s = settings.resolve(flags={"arch": args.arch, "mirror_hw": args.mirror_hw})
    except RocmciError as exc:  # e.g. an unknown ROCMCI_* variable or a broken pyproject.toml
        print(report.error_line(f"{PROG}: {exc.one_line()}"), file=sys.stderr)
        return exc.exit_code
    results = [validate_file(path, s) for path in args.files]
    if args.json:
        print(as_json(results))
    else:
        out = report.console(sys.stdout)
        for r in results:
            if r.error is None:
                report_findings.print_report(r.report, name=r.name, out=out)
    for r in results:
        if r.error is not None:
            print(report.error_line(f"{PROG}: {r.error.one_line()}"), file=sys.stderr)  # it quotes the file's path
    return max(r.exit_code for r in results)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
