"""`rocmci <task> [flags]`: the same tasks as `invoke`, as an installed command with rocmci's exit codes.

invoke's own Program exits 1 on its parse errors (an unknown flag, a missing value), which README's
table reserves for findings; here a parse error is one line and exit 2, like every other bad flag.
"""

from __future__ import annotations

from invoke import Exit, ParseError, Program


class RocmciProgram(Program):
    def _usage_error(self, exc: ParseError) -> Exit:
        text = " ".join(str(exc).split())
        return Exit(f"rocmci: {text} (see `rocmci --help` or `rocmci <task> --help`)", code=2)

    def parse_core(self, argv):
        try:
            super().parse_core(argv)
        except ParseError as exc:
            raise self._usage_error(exc) from None

    def parse_tasks(self):
        try:
            super().parse_tasks()
        except ParseError as exc:
            raise self._usage_error(exc) from None

    def parse_cleanup(self):
        try:
            super().parse_cleanup()
        except ParseError as exc:
            raise self._usage_error(exc) from None


def main(argv: list[str] | None = None) -> None:
    from rocmci import __version__
    from rocmci.cli.tasks import ns

    RocmciProgram(name="rocmci", binary="rocmci", namespace=ns, version=__version__).run(argv)
