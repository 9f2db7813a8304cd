"""`rocmci ARGV` in process, for the output-gate tests (issue 32): program.main as the console script runs it,
its streams captured, signal handlers put back. Not a test module: imported by tests/unit/test_gate_*.py (the
fixtures are named by `name=`, so that importing them does not shadow the test functions' parameters)."""

from __future__ import annotations

import os
import signal

import pytest

from rocmci.cli import program


@pytest.fixture(autouse=True, name="outside_any_workspace")
def outside_any_workspace_fixture(tmp_path, monkeypatch):
    """No ROCMCI_* setting and no pyproject.toml of this repository changes what a task does."""
    for name in [n for n in os.environ if n.startswith("ROCMCI_")] + ["CI", "BUILDKITE"]:
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture(name="rocmci")
def rocmci_fixture(capsys):
    """rocmci(*argv) -> (exit status, stdout, stderr)."""

    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            with pytest.raises(SystemExit) as ended:
                program.main(["rocmci", *argv])
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        got = capsys.readouterr()
        return ended.value.code, got.out, got.err

    return call
