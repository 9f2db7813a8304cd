"""Counting, under `nox -s mutants` only, the tests that reach mutated code through a child process.

mutmut (3.x) maps each test to the functions it reaches by recording trampoline hits in the pytest
process itself (`state()._stats`, read by its own `pytest_runtest_teardown` hook). Many functional tests
start `rocmci`, `invoke` or `rocmci-validate` as child processes; the noxfile puts the mutated sources
first on those children's PYTHONPATH, so they run the active mutant (MUTANT_UNDER_TEST is inherited),
but in the stats phase their hits would be lost with the child. This module relays them:

- child side (this folder's sitecustomize.py, run when Python starts): in a process with
  MUTANT_UNDER_TEST=stats and MUTATION_RELAY set, the trampoline's `record_trampoline_hit` is replaced by
  one that appends each function's name, once, to the relay file;
- parent side (this pytest plugin, `-p mutation_relay` in [tool.mutmut] pytest_add_cli_args):
  in the stats phase, name a relay file for the children and, before mutmut collects a test's hits at
  its teardown, move the names the children wrote into mutmut's `state()._stats`.

Outside a mutmut run (no MUTANT_UNDER_TEST) neither side does anything; normal test runs never load
either file (the folder is on PYTHONPATH only in the `mutants` session). A function reached only in a
module-scoped fixture counts for the first test that uses it, as mutmut counts in-process hits.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Not ROCMCI_*: the tests drop those from the environment they give children. sitecustomize.py reads it.
RELAY = "MUTATION_RELAY"


def _stats_phase() -> bool:
    return os.environ.get("MUTANT_UNDER_TEST") == "stats"


def pytest_configure(config: pytest.Config) -> None:
    if not _stats_phase():
        return
    handle, name = tempfile.mkstemp(prefix="mutation-relay-", suffix=".txt")
    os.close(handle)
    os.environ[RELAY] = name  # children inherit it through every environment copied from os.environ
    config.stash[_relay_key] = Path(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_relay_key, None)
    if path is not None:
        os.environ.pop(RELAY, None)
        for leftover in (path, path.with_suffix(".drain")):
            leftover.unlink(missing_ok=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Before mutmut's own teardown hook files this test's hits: add those of the children it started."""
    path = item.config.stash.get(_relay_key, None)
    if path is None or not path.exists():
        return
    # Renamed first, so a child still writing appends to a fresh file (counted for the next test).
    drained = path.with_suffix(".drain")
    os.replace(path, drained)
    names = set(drained.read_text(encoding="utf-8").split())
    drained.unlink()
    from mutmut.state import state

    state()._stats.update(names)


_relay_key = pytest.StashKey[Path]()
