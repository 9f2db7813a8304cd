"""rocmci: build, run and validate vLLM's AMD (ROCm) CI around DeepEP."""

import sys as _sys

# The console scripts (pyproject [project.scripts]) import this package before main() takes the signals
# (cli/program.py, hook.py): a Ctrl-C or SIGTERM during those imports would be a traceback of whichever module
# was loading. Until main() installs its own handlers, such a signal is one line and the documented code;
# nothing has started yet that would need stopping. A library import (pytest, tasks.py) is left alone.
_CONSOLE_SCRIPTS = {"rocmci": "rocmci", "rocmci-validate": "rocmci-validate"}


def _early_signals() -> None:
    main = _sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or ""
    name = _CONSOLE_SCRIPTS.get(script.rsplit("/", 1)[-1])
    if name is None:
        return
    import _signal  # the C module: `signal` would load enum first, widening the window this closes
    import os

    def stop(signum, _frame) -> None:
        what = "interrupted" if signum == _signal.SIGINT else "terminated"
        os.write(2, f"{name}: {what}\n".encode())
        os._exit(128 + signum)

    _signal.signal(_signal.SIGINT, stop)
    _signal.signal(_signal.SIGTERM, stop)


_early_signals()


def __getattr__(name: str) -> str:
    # Looked up on first use only: importlib.metadata costs start-up time that validation runs never need.
    if name != "__version__":
        raise AttributeError(name)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rocmci")  # one source of truth: pyproject.toml's [project].version
    except PackageNotFoundError:  # imported from a checkout that was never installed (tasks.py allows it)
        return "0+unknown"
