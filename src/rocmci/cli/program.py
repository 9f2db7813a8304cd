"""`rocmci <task> [flags]`: the one command a maintainer types, from any folder.

invoke parses the command line (its Parser and Executor run the tasks of cli/tasks.py), but the face is
rocmci's own: only rocmci's options exist (invoke's core options such as -R/--dry, -e/--echo or
--config would do nothing here, or something surprising), help lists rocmci's tasks and flags with
value placeholders, a mistyped flag or task gets "did you mean", and every parse error is one line
with exit 2 (invoke exits 1, which README's table reserves for findings).

The edge of the process lives here too: Ctrl-C at any moment (also while the imports below are still
running) is one line and exit 130; stdout that cannot take the output (a full disk, /dev/full) is one
line and exit 2; a reader that went away (`| head`) ends quietly; text the terminal's encoding cannot
show is replaced, never a crash.
"""

from __future__ import annotations

import sys

# Only the standard library above this line: a Ctrl-C while invoke and rich are still being imported
# must land inside main()'s handler, not in a traceback.

CORE_OPTIONS = ("help", "list", "version")
# invoke's own core options (invoke 2.x/3.x `Program.core_args`): refused with a line that says so,
# because a user who knows invoke may expect them to work (`-R` would echo instead of running there).
INVOKE_OPTIONS = {
    "-R": "--dry", "--dry": "--dry", "-e": "--echo", "--echo": "--echo", "-d": "--debug", "--debug": "--debug",
    "-f": "--config", "--config": "--config", "-p": "--pty", "--pty": "--pty", "-w": "--warn-only",
    "--warn-only": "--warn-only", "-T": "--command-timeout", "--command-timeout": "--command-timeout",
    "-D": "--list-depth", "--list-depth": "--list-depth", "-F": "--list-format", "--list-format": "--list-format",
    "--hide": "--hide", "--complete": "--complete", "--write-pyc": "--write-pyc",
    "--prompt-for-sudo-password": "--prompt-for-sudo-password",
    "--print-completion-script": "--print-completion-script",
    "-c": "--collection", "--collection": "--collection", "-r": "--search-root", "--search-root": "--search-root",
}  # fmt: skip
USAGE_EXIT = 2
INTERRUPTED_EXIT = 130
# A bare word after these tasks is the value of this flag, as people type it: `rocmci run.step LABEL`.
BARE_VALUE = {"run.step": "step"}


def with_bare_values(argv: list[str], contexts) -> list[str]:
    """argv with `TASK WORD` written as `TASK --FLAG WORD` for the tasks of BARE_VALUE (one word each).

    A word is bare when it is neither a task, a flag nor a flag's value; everything else is left as it
    is, so an unknown flag, -h or a second word reaches the parser and its usual message.
    """
    out: list[str] = []
    flag, given, wants_value = None, False, False
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:]
        if wants_value:
            wants_value = False
        elif token in contexts:
            flag, given = BARE_VALUE.get(contexts[token].name), False
            context = contexts[token]
        elif token.startswith("-") and flag is not None:
            arg = context.flags.get(token.split("=", 1)[0])
            if arg is not None:
                given = given or arg.name == flag
                wants_value = arg.takes_value and "=" not in token
        elif flag is not None and not given:
            out.append(f"--{flag.replace('_', '-')}")
            given = True
        out.append(token)
    return out


def _program_class():
    """RocmciProgram, defined on first use so that importing this module costs no invoke import."""
    import difflib
    import inspect
    import re

    from invoke import Argument, Exit, ParseError, Program

    from rocmci import report
    from rocmci.cli import flags

    class RocmciProgram(Program):
        def core_args(self) -> list[Argument]:
            return [
                Argument(names=("help", "h"), optional=True, help="this help, or a task's flags (rocmci TASK -h)"),
                Argument(names=("list", "l"), optional=True, help="the tasks, one line each"),
                Argument(names=("version", "V"), kind=bool, help="rocmci's version"),  # not given: None
            ]

        # --- parsing: invoke's steps, without the core options rocmci does not have

        def parse_core(self, argv) -> None:
            self.normalize_argv(argv)
            try:
                self.parse_core_args()
            except ParseError as exc:
                raise usage_error(exc) from None
            if self.args.version.value:
                self.print_version()
                raise Exit

        def parse_tasks(self) -> None:
            self.core.unparsed = with_bare_values(self.core.unparsed, self._make_parser().contexts)
            try:
                super().parse_tasks()
            except ParseError as exc:
                raise usage_error(exc) from None

        def parse_cleanup(self) -> None:
            wanted = self.args.help.value
            if wanted is True:
                self.print_help()
                raise Exit
            if wanted:
                if wanted not in self.parser.contexts:
                    raise Exit(unknown_task(wanted, self.parser.contexts), code=USAGE_EXIT)
                self.print_task_help(wanted)
                raise Exit
            if self.args.list.value:
                print(report.columns(task_rows(self.collection)))
                raise Exit
            if not self.tasks:
                self.print_help()
                raise Exit

        def update_config(self, merge: bool = True) -> None:
            if merge:  # no core option sets a config value: nothing to add to invoke's defaults
                self.config.merge()

        def print_version(self) -> None:
            from rocmci import __version__

            print(f"rocmci {__version__}")

        # --- help: rocmci's tasks and flags, through the same renderer as every other output

        def print_help(self) -> None:
            core = [(option_spec(a), a.help or "") for a in self.core_args()]
            print("\n".join([
                "Usage: rocmci TASK [flags]    (rocmci TASK -h shows a task's flags)",
                "",
                "Tasks:",
                report.columns(task_rows(self.collection), indent=2),
                "",
                "Options:",
                report.columns(core, indent=2),
            ]))  # fmt: skip

        def print_task_help(self, name: str) -> None:
            context = self.parser.contexts[name]
            rows = [(option_spec(arg), arg.help or "") for arg in sorted(context.args.values(), key=sort_key)]
            doc = inspect.getdoc(self.collection[name]) or ""
            given = f" [{BARE_VALUE[name].upper()}]" if name in BARE_VALUE else ""
            parts = [f"Usage: rocmci {name}{given}" + (" [flags]" if rows else ""), "", report.lines([doc])]
            if rows:
                parts += ["", "Flags:", report.columns(rows, indent=2)]
            print("\n".join(parts))

    def usage_error(exc: ParseError) -> Exit:
        text = " ".join(str(exc).split())
        token = text.removeprefix("No idea what ").removesuffix(" is!").strip("'\"")
        if text.startswith("No idea what "):
            in_task = getattr(exc.context, "name", None) is not None
            if token in INVOKE_OPTIONS and not in_task:
                message = (
                    f"rocmci: {token} is invoke's {INVOKE_OPTIONS[token]}, an option rocmci does not have"
                    " (see `rocmci --help`)"
                )
            elif token.startswith("-"):
                message = unknown_flag(token, exc.context)
            else:
                message = unknown_task(token, program.parser.contexts if hasattr(program, "parser") else {})
            return Exit(message, code=USAGE_EXIT)
        needs = re.match(r"Flag <Argument: ([\w-]+)(?: \(\w+\))?> needed value", text)
        if needs:
            flag = needs.group(1).replace("_", "-")  # invoke shows the Python name: exit_code is --exit-code
            task = getattr(exc.context, "name", None)
            where = f"rocmci {task} --help" if task else "rocmci --help"
            dashes = "-" if len(flag) == 1 else "--"
            return Exit(f"rocmci: {dashes}{flag} needs a value (see `{where}`)", code=USAGE_EXIT)
        return Exit(f"rocmci: {text} (see `rocmci --help` or `rocmci TASK --help`)", code=USAGE_EXIT)

    def unknown_flag(token: str, context) -> str:
        name = getattr(context, "name", None)
        known = [n for n in (context.flags if context is not None else {}) if n.startswith("--")]
        known += ["--help"]
        # invoke has already cut a `=value` off the token; the best match (difflib's default cutoff) comes first.
        close = difflib.get_close_matches(token, known)
        where = f"rocmci {name}" if name else "rocmci"
        hint = f"did you mean {close[0]}?" if close else f"see `{where} --help`"
        return f"rocmci: unknown flag {token} for {where}; {hint}"

    def unknown_task(token: str, contexts) -> str:
        close = difflib.get_close_matches(token, list(contexts))
        hint = f"did you mean {close[0]}?" if close else "see `rocmci --list`"
        return f"rocmci: unknown task {token!r}; {hint}"

    def option_spec(arg: Argument) -> str:
        """'-t, --tag IMAGE', '--json', '-h, --help [TASK]': names and the value's placeholder."""
        names = sorted(arg.names, key=len)
        spec = ", ".join(("-" if len(n) == 1 else "--") + n for n in names)
        if arg.name in CORE_OPTIONS:
            return spec + (" [TASK]" if arg.name == "help" else "")
        if arg.kind is bool:
            return spec
        return f"{spec} {flags.placeholder(arg.name)}"  # invoke's Argument.name is the Python name: for_, dry_run

    def sort_key(arg: Argument) -> str:
        return arg.name  # the Python name (for_, dry_run): never a leading dash to strip

    def task_rows(collection) -> list[tuple[str, str]]:
        rows = []
        for name in sorted(collection.task_names):
            doc = inspect.getdoc(collection[name]) or ""
            rows.append((name, doc.split("\n\n")[0].replace("\n", " ")))
        return rows

    # invoke reads name and binary only in the help, version and completion output replaced above (their
    # mutants survive as equivalent): kept so that any message of a later invoke says "rocmci", not argv[0].
    program = RocmciProgram(name="rocmci", binary="rocmci", namespace=_namespace())
    return program, Exit


def _namespace():
    from rocmci.cli.tasks import ns

    return ns


def _say(text: str) -> None:
    """One line on stderr, fitted to the terminal (the `rocmci:` prefix coloured there)."""
    try:
        from rocmci.report import error_line

        text = error_line(text)  # fitted to sys.stderr, error_line's default
    except Exception:  # noqa: BLE001 - the message must reach the user even if the renderer cannot load
        pass
    try:
        print(text, file=sys.stderr)  # stderr is line-buffered (Python 3.9+): the line is out now
    except (OSError, ValueError):
        pass  # stderr is gone too: the exit code is all that is left


class StdoutFault(Exception):
    """Writing to stdout failed (ENOSPC on /dev/full, EIO from a hung-up terminal): not a file rocmci chose."""


class _GuardedStdout:
    """sys.stdout, whose write and flush failures become StdoutFault, so the edge can tell them from a file's."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFault(exc.strerror or str(exc)) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFault(exc.strerror or str(exc)) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _ClosedStdout:
    """sys.stdout when rocmci started without one (`rocmci ... >&-`, Python then sets it to None): each write
    fails as on a full disk, instead of an AttributeError traceback, or output silently lost."""

    def write(self, text: str) -> int:
        raise StdoutFault("Bad file descriptor")

    def flush(self) -> None:
        pass  # nothing was ever buffered


def _harden_streams() -> None:
    """Text the output's encoding cannot carry is replaced (PYTHONIOENCODING=ascii, a C locale), not a crash."""
    for stream, errors in ((sys.stdout, "replace"), (sys.stderr, "backslashreplace")):
        try:
            stream.reconfigure(errors=errors)
        except (AttributeError, ValueError, OSError):
            pass
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    elif not isinstance(sys.stdout, _GuardedStdout | _ClosedStdout):
        sys.stdout = _GuardedStdout(sys.stdout)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit has nowhere to fail."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _flush_stdout() -> int | None:
    """Flush stdout now, while a failure can still be reported; the exit code when it failed."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()  # the reader went away (`| head`): nothing more to say
        return 0
    except StdoutFault as exc:
        _quiet_stdout()
        _say(f"rocmci: standard output: cannot write: {exc}")
        return USAGE_EXIT
    except ValueError:  # closed
        return None
    return None


def _interrupted(exc: BaseException) -> int:
    """The one line and exit code of a signal: 130 for Ctrl-C, 143 for SIGTERM, 128 + N for SIGHUP and the rest."""
    import signal

    from rocmci.errors import HANDLED

    code = getattr(exc, "exit_code", INTERRUPTED_EXIT)
    for signum in HANDLED:  # a second Ctrl-C or SIGHUP must not turn the line into a traceback
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
    name = getattr(exc, "name", None)
    if code == INTERRUPTED_EXIT:
        _say("rocmci: interrupted")
    elif name is None or name == "SIGTERM":
        _say("rocmci: terminated")
    else:
        _say(f"rocmci: stopped by {name}")
    return code


def _take_signals() -> None:
    """Before anything else: SIGINT interrupts even when the parent left it ignored (a script's background
    job), and SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, ... unwind rocmci, so that its children are stopped first."""
    from rocmci.errors import raise_on_signals

    raise_on_signals()


def main(argv: list[str] | None = None) -> None:
    """The console entry point: run, then turn every way out into one line and a documented exit code."""
    try:
        _take_signals()
        _harden_streams()
        code = _execute(argv)
    except KeyboardInterrupt as exc:  # Terminated (SIGTERM) and errors.Signalled are ones too, with their codes
        code = _interrupted(exc)
    try:
        flushed = _flush_stdout()
    except KeyboardInterrupt as exc:
        flushed = _interrupted(exc)
    sys.exit(flushed if flushed is not None else code)


def _execute(argv: list[str] | None) -> int:
    """invoke's Program.run, with rocmci's handling of what leaves it (Exit, SystemExit, stdout faults)."""
    program, exit_class = _program_class()
    try:
        _run_program(program, argv)
    except exit_class as exc:
        if exc.message:
            _say(exc.message)
        return int(exc.code or 0)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except StdoutFault as exc:
        _quiet_stdout()
        _say(f"rocmci: standard output: cannot write: {exc}")
        return USAGE_EXIT
    return 0


def _run_program(program, argv: list[str] | None) -> None:
    """The steps of invoke's Program.run without its handlers: invoke turns Ctrl-C into a silent exit 1."""
    program.create_config()
    program.parse_core(argv)
    program.parse_collection()
    program.parse_tasks()
    program.parse_cleanup()
    program.update_config()
    program.execute()


