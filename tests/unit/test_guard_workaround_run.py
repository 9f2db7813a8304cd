"""The image-label workaround condition during a run (issue 35): a run reads its image's labels, and a
`rocmci.rocm.fixes` label that lists the fix makes the rocprofiler workaround obsolete for that run (its variable
not set); an image without it, or an engine that cannot say, keeps the workaround (src/rocmci/runs/service.py
_workaround_checks, with the real packaged registry). The engine is the Docker-API stand-in of test_guard_images
(the real Docker SDK over a unix socket); its docker client refuses `create`, so no test tree is exported.
docs/guards.md maps each test to the mutation it was watched to kill.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rocmci import labels as label
from rocmci import workaround_registry as wr
from rocmci.runs import service
from tests.unit.test_guard_images import _Api
from tests.unit.test_guard_images import engine as _engine

engine = _engine  # the fixture, under its own name here
FIX = "ROCm/rocm-systems#6942"
WID = "rocprofiler-register-teardown"


def checks(eng, image: str, *, no_container: bool = False, strict: bool = False):
    registry = wr.load_registry(wr.PACKAGED)
    opts = SimpleNamespace(no_container=no_container, image=image, strict=strict)
    obsolete, notes = service._workaround_checks(SimpleNamespace(vllm_src=None), registry, eng, opts, {"moe-tests"})
    env, ids = wr.env_for(registry, "moe-tests", "high-throughput", set(obsolete))
    return obsolete, notes, env, ids


@pytest.mark.parametrize("listing", [FIX, f"other/repo#1, {FIX}", f"{FIX},x/y#2"])
def test_an_image_whose_label_lists_the_fix_runs_without_the_workaround(engine, listing):
    eng, _ = engine
    _Api.images = {"img:fixed": {label.ROCM_FIXES: listing}}
    obsolete, notes, env, ids = checks(eng, "img:fixed")
    assert obsolete == {WID} and "ROCPROFILER_REGISTER_ENABLED" not in env and WID not in ids
    assert any(n.startswith(f"workaround {WID} NOT applied") and f"label {label.ROCM_FIXES}=" in n for n in notes)


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        ({}, f"has no label {label.ROCM_FIXES}"),
        ({label.ROCM_FIXES: "ROCm/rocm-systems#69420"}, f"no {FIX} in label {label.ROCM_FIXES}"),
        ({"other": FIX}, f"has no label {label.ROCM_FIXES}"),
    ],
)
def test_an_image_without_the_fix_in_that_label_keeps_the_workaround(engine, labels, said):
    eng, _ = engine
    _Api.images = {"img:old": labels}
    obsolete, notes, env, ids = checks(eng, "img:old")
    assert obsolete == frozenset() and env == {"ROCPROFILER_REGISTER_ENABLED": "0"} and ids == [WID]
    assert any(n.startswith(f"workaround {WID} applied") and said in n for n in notes), notes


def test_no_image_or_no_container_is_no_evidence_and_keeps_the_workaround(engine):
    eng, _ = engine
    _Api.images = {"img:fixed": {label.ROCM_FIXES: FIX}}
    assert checks(eng, "img:missing")[0] == frozenset()
    assert checks(eng, "img:fixed", no_container=True)[0] == frozenset()  # the host is no image


def test_strict_fails_while_the_obsolete_entry_is_still_there(engine):
    eng, _ = engine
    _Api.images = {"img:fixed": {label.ROCM_FIXES: FIX}}
    with pytest.raises(Exception, match=f"obsolete workaround.*{WID}"):
        checks(eng, "img:fixed", strict=True)
