"""`rocmci-validate FILE...`: the pre-commit hook. Validates vLLM-style step files in any repository.

An edge like tasks.py: it parses arguments, calls commands.pipeline_validate once per file and
turns typed errors into one line and an exit code.
"""

from __future__ import annotations

import argparse
import sys

from rocmci import commands
from rocmci.errors import RocmciError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rocmci-validate", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="step files (.buildkite/test-amd.yaml)")
    parser.add_argument("--arch", help="archs the image's DeepEP is built for (default: the Dockerfile's ARG)")
    parser.add_argument("--mirror-hw", help="mirror_hardwares value to generate for (default: amdproduction)")
    args = parser.parse_args(argv)
    worst = 0
    for path in args.files:
        try:
            code = commands.pipeline_validate(source=path, arch=args.arch, mirror_hw=args.mirror_hw)
        except RocmciError as exc:
            print(f"rocmci: {exc.one_line()}", file=sys.stderr)
            code = exc.exit_code
        worst = max(worst, code)
    return worst


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
