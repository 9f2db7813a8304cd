"""Where typed errors become one line and an exit code, and how tasks declare their flags.

`run(fn, given)` parses a task's flags and calls one face function: RocmciError -> "rocmci: <one line>"
Ctrl-C -> 130, SIGTERM -> 143, SIGHUP and the other signals of errors.STOPPING -> 128 + N, a closed
stdout (`| head`) -> a quiet exit. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from typing import Any

from invoke import Argument as InvokeArgument
from invoke import Exit, Task

from rocmci.cli import flags


def run(fn: Callable[..., int | None], given: dict[str, Any] | None = None) -> None:
    """Parse the flags a task received (`given`, when it has flags) and call `fn` with the typed values."""
    from rocmci.errors import RocmciError, Signalled, Terminated, raise_on_signals

    # SIGTERM, SIGHUP, SIGQUIT, ... unwind like Ctrl-C: children stopped, temporary files and containers removed.
    raise_on_signals()
    try:
        code = fn() if given is None else fn(flags.parse(given))
    except RocmciError as exc:
        from rocmci.report import safe  # a message may quote a file's or an engine's text: escaped, bounded

        raise Exit(f"rocmci: {safe(exc.one_line(), limit=4000)}", code=exc.exit_code) from None
    except Terminated:
        raise Exit("rocmci: terminated", code=143) from None
    except Signalled as exc:
        raise Exit(f"rocmci: stopped by {exc.name}", code=exc.exit_code) from None
    except KeyboardInterrupt:
        raise Exit("rocmci: interrupted", code=130) from None
    except BrokenPipeError:
        # The reader went away (`| head`): nothing more to say; keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise Exit(code=0) from None
    if code:
        raise Exit(code=code)


class RocmciTask(Task):
    """A task whose flags come from cli/flags.py: help from the table, long names only, chosen short ones.

    invoke would give every flag the first free letter as a short flag (so `-h` became --host-root and
    `-t` --target); here only flags.SHORT get one, the same letter in every task.
    """

    def __init__(self, body, *, help: dict[str, str] | None = None, **kwargs: Any) -> None:  # noqa: A002
        import inspect

        names = list(inspect.signature(body).parameters)[1:]
        table = {n: flags.help_text(n) for n in names if n in flags.FLAGS}
        table.update(help or {})
        kwargs.setdefault("iterable", [n for n in names if n in flags.REPEATABLE])
        super().__init__(body, help=table, auto_shortflags=False, **kwargs)

    def get_arguments(self, *args: Any, **kwargs: Any) -> list[Any]:
        # invoke's arg_opts pops each flag's help out of self.help: without a copy, a second parse in one
        # process (main() called again, as the in-process tests do) shows every flag without its help.
        table = self.help
        self.help = dict(table)
        try:
            arguments = super().get_arguments(*args, **kwargs)
        finally:
            self.help = table
        for argument in arguments:
            argument.__class__ = Argument
        return arguments

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        short = flags.SHORT.get(name)
        if short and short not in opts["names"]:
            opts["names"] = [*opts["names"], short]
        return opts


class Argument(InvokeArgument):
    """invoke's Argument, copied cheaply (named alike, so invoke's messages read as before).

    invoke deep-copies the parser context of every task on each parse. What parsing changes in an Argument
    is rebound, never changed in place (a list flag's value is replaced by `value + [x]`), so a shallow copy
    is as good as a deep one at half its cost (about 1.3 ms of every start with rocmci's 16 tasks).
    """

    def __deepcopy__(self, memo: dict) -> Argument:
        return copy.copy(self)
