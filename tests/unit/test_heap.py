"""The pipeline tasks and the pre-commit hook run without cyclic collection (rocmci/heap.py) and leave the
collector as they found it: `rocmci` called in process (tests, the in-process CLI tests) keeps collecting."""

from __future__ import annotations

import gc

import pytest

from rocmci import hook
from rocmci.heap import no_gc
from tests.unit.test_mutants_cli import _main, _outside_any_workspace  # noqa: F401  (its fixture applies here)


@pytest.fixture
def collector_restored():
    yield
    gc.enable()


@pytest.mark.parametrize("enabled", [True, False])
def test_no_gc_restores_the_state_it_found_even_on_an_error(enabled, collector_restored):
    (gc.enable if enabled else gc.disable)()
    with pytest.raises(KeyError), no_gc():
        assert not gc.isenabled()
        raise KeyError("x")
    assert gc.isenabled() is enabled


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize(
    "argv", [("pipeline.validate", "--source", "{src}"), ("pipeline.validate", "--source", "missing.yaml")]
)
def test_a_pipeline_task_leaves_the_collector_as_it_found_it(argv, enabled, vllm_fixtures, capsys, collector_restored):
    (gc.enable if enabled else gc.disable)()
    code = _main(*(a.format(src=vllm_fixtures / "test-amd.yaml") for a in argv))
    assert code == (0 if "{src}" in argv else 2), capsys.readouterr().err
    assert gc.isenabled() is enabled


@pytest.mark.parametrize("enabled", [True, False])
def test_the_hook_leaves_the_collector_as_it_found_it(enabled, vllm_fixtures, capsys, collector_restored):
    (gc.enable if enabled else gc.disable)()
    assert hook.main([str(vllm_fixtures / "test-amd.yaml")]) == 0, capsys.readouterr().err
    assert gc.isenabled() is enabled
