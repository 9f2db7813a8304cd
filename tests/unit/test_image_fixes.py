"""Image builds record the ROCm fixes their checkout's Dockerfile.rocm_base applies (label rocmci.rocm.fixes).

The label is the evidence the workaround registry's `image_label` condition reads; it is found with the
same function as `vllm_dockerfile_applies`, for the fixes the packaged registry names.
"""

from __future__ import annotations

import shutil

import pytest

from rocmci import fixes
from rocmci.image import base, requests
from rocmci.image import vllm_dockerfile as vd
from rocmci.image.plan import BaseFacts, BuildRequest, plan_build
from rocmci.runs import pysets
from rocmci.workaround_registry import PACKAGED, load_registry, named_fixes
from tests.conftest import REPO

STANDIN = REPO / "tests" / "data" / "vllm-standin"
FIX = "ROCm/rocm-systems#6942"
LABEL = "rocmci.rocm.fixes"


@pytest.fixture
def tree(tmp_path):
    copy = tmp_path / "vllm"
    shutil.copytree(STANDIN, copy)
    return copy


def _apply(tree, line: str) -> None:
    path = tree / "docker" / "Dockerfile.rocm_base"
    path.write_text(path.read_text() + line + "\n")


def _plan(tree):
    """base, ci_base and test: BASE_IMAGE was built from another Dockerfile.rocm_base, so all three are built."""
    tier = base.tier(tree, lambda ref: ("sha256:" + "a" * 64, True))
    facts = BaseFacts("rocm/vllm-dev:base", "sha256:" + "b" * 64, True, "c" * 64, tier)
    request = BuildRequest(
        checkout=tree, dockerfile=vd.load(tree), archs=("gfx942",), vllm_archs=None, pins={}, overrides={},
        image_repo="rocmci/vllm-rocm", vllm_commit="abc", base=facts, rocm_fixes=requests.rocm_fixes(tree),
    )  # fmt: skip
    plan = plan_build(request)
    assert [step.target for step in plan.steps] == ["base", "ci_base", "test"]
    return plan


def test_every_tier_built_from_a_checkout_that_applies_the_fix_carries_it(tree):
    _apply(tree, 'RUN echo "backport of ROCm/rocm-systems#6942" > /standin-fix')
    for step in _plan(tree).steps:
        assert step.labels[LABEL] == FIX, step.target
        assert f"{LABEL}={FIX}" in step.argv("docker")


@pytest.mark.parametrize("base_hash", ["same", None], ids=["base-from-this-file", "base-of-unknown-origin"])
def test_ci_base_and_test_claim_the_fix_only_on_a_base_known_to_come_from_the_checkouts_file(tree, base_hash):
    """Without building the base, the label is honest only when the base's content hash is the checkout's."""
    _apply(tree, 'RUN echo "backport of ROCm/rocm-systems#6942" > /standin-fix')
    tier = base.tier(tree, lambda ref: ("sha256:" + "a" * 64, True))
    facts = BaseFacts(
        "rocm/vllm-dev:base", "sha256:" + "b" * 64, True, tier.content_hash if base_hash else None, tier
    )
    request = BuildRequest(
        checkout=tree, dockerfile=vd.load(tree), archs=("gfx942",), vllm_archs=None, pins={}, overrides={},
        image_repo="rocmci/vllm-rocm", vllm_commit="abc", base=facts, rocm_fixes=requests.rocm_fixes(tree),
    )  # fmt: skip
    steps = plan_build(request).steps
    assert [step.target for step in steps] == ["ci_base", "test"]
    for step in steps:
        # On a base of unknown origin the label is left to inheritance from the base image itself.
        assert step.labels.get(LABEL) == (FIX if base_hash else None), step.target


@pytest.mark.parametrize(
    "line",
    [
        "# RUN apply ROCm/rocm-systems#6942",  # a comment line
        "RUN echo pending # ROCm/rocm-systems#6942",  # a shell comment inside RUN
        "RUN echo rocm-systems#69420",  # another fix whose number starts the same
    ],
)
def test_a_fix_named_only_in_a_comment_or_another_number_is_not_recorded(tree, line):
    _apply(tree, line)
    assert all(LABEL not in step.labels for step in _plan(tree).steps)


def test_the_fixes_looked_for_are_those_the_packaged_registry_names():
    assert named_fixes(load_registry(PACKAGED)) == (FIX,)


def test_the_registry_and_the_build_share_one_evidence_function():
    # One parser: the registry's Dockerfile condition and the build label both read rocmci.fixes.
    assert not hasattr(pysets, "dockerfile_names_fix")
    text = "FROM x\n# ROCm/rocm-systems#6942\nRUN git cherry-pick https://github.com/ROCm/rocm-systems/pull/6942\n"
    assert fixes.dockerfile_names_fix(text, FIX) == 3 and fixes.applied(text, (FIX, FIX)) == (FIX,)
