"""Outside CI, skipped tests are counted loudly with their reasons; under CI=true any skip fails the run.

Runs pytest on a small test file with this repository's own tests/conftest.py (pytester), so the hooks
that `nox -s tests` relies on are the ones tested.
"""

from __future__ import annotations

from tests.conftest import REPO

pytest_plugins = ["pytester"]

SKIPPING = """
import pytest

def test_runs():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_needs_an_engine(n):
    pytest.skip("no Docker engine: the engine is not running")

def test_needs_fixtures():
    pytest.skip("real vLLM step files not found")
"""


def _run(pytester, monkeypatch, ci: str | None):
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_some=SKIPPING)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.delenv("REQUIRE_DOCKER_TESTS", raising=False)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def test_outside_ci_skips_are_counted_loudly_with_their_reasons(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, None)
    assert result.ret == 0
    text = result.stdout.str()
    assert "3 TESTS SKIPPED: this run did not test everything" in text
    assert "   2 x no Docker engine: the engine is not running" in text
    assert "   1 x real vLLM step files not found" in text
    assert "3 tests skipped (CI=true fails on any skip)" in text


def test_under_ci_any_skip_fails(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "true")
    assert result.ret == 1
    assert "3 skipped: nothing may skip in CI" in result.stdout.str()
