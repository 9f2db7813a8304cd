"""An arch change on vLLM CI's published ci_base: the retarget tier, then test on it (image/plan.py _on_retarget),
and the build args CI's own hash is computed from (image/cibase.py as_ci_passes), checked against vLLM's files."""

from __future__ import annotations

import re
import shutil

import pytest

from rocmci.image import cibase, retarget
from rocmci.image.plan import chain_for, plan_build
from tests.conftest import REPO, SHARED_VLLM
from tests.unit.test_image_plan import request

PUBLISHED = "rocm/vllm-dev:ci_base-" + "c" * 64
DIGEST = "sha256:" + "d" * 64
CI_LABELS = {cibase.HASH_LABEL: "c" * 64, "vllm.rocm.deepep_rocm_arch": "gfx942;gfx950",
             "vllm.rocm.deepep_commit": "0f63d3e9", "vllm.rocm.rocshmem_commit": "f0acb0c6"}  # fmt: skip
WHY = "vLLM CI's ci_base for CI's arch list gfx942;gfx950 is reused; only rocSHMEM and DeepEP are rebuilt for gfx950"


@pytest.fixture
def tree(vllm_docker_tree):
    return vllm_docker_tree


def retarget_step(archs=("gfx950",), identity=DIGEST, ref="0f63d3e9"):
    req = retarget.RetargetRequest(
        from_image=f"{PUBLISHED}@{DIGEST}", from_identity=identity, archs=archs,
        pins={"DEEPEP_REPO": "https://x/DeepEP.git", "DEEPEP_BRANCH": ref, "DEEPEP_NIC": "cx7",
              "ROCSHMEM_REPO": "https://x/rocm-systems.git", "ROCSHMEM_BRANCH": "f0acb0c6"},
        setup_flags=("--rocm-explicit-ctx",), sources={}, image_repo="rocmci/vllm-rocm",
        tag="rocmci/vllm-rocm:ci-base-retarget-gfx950",
    )  # fmt: skip
    return retarget.plan_retarget(req, "FROM x\n").step


def on_retarget(tree, step, **more):
    return plan_build(request(tree, archs=("gfx950",), retarget=step, ci_base_labels=CI_LABELS, ci_base_reused=WHY,
                              extra_labels={"run": "1"}, **more))  # fmt: skip


def test_the_retarget_replaces_ci_base_and_test_starts_from_it(tree):
    plan = on_retarget(tree, retarget_step(ref="a9ea9774"))  # the checkout's pin (request) is 0f63d3e9
    rt, test = plan.steps
    assert (rt.target, test.target) == ("retarget", "test")  # no ci_base step: nothing of NIXL, UCX, ...
    assert rt.dockerfile == retarget.OVERLAY and rt.build_args["FROM_IMAGE"] == f"{PUBLISHED}@{DIGEST}"
    assert rt.build_args["DEEPEP_ROCM_ARCH"] == "gfx950" and rt.labels["run"] == "1"
    # What it inherits from CI's ci_base, made true: vLLM's DeepEP label, and no claim to be CI's ci_base.
    assert rt.labels["vllm.rocm.deepep_rocm_arch"] == "gfx950" and rt.labels[cibase.HASH_LABEL] == ""
    assert test.build_args["CI_BASE_IMAGE"] == rt.tag and test.labels["rocmci.ci-base-image"] == rt.tag
    # Labelled from what the retargeted image holds: its list, not CI's; its pins over the published labels.
    assert test.labels["rocmci.arch"] == "gfx950" and test.labels["rocmci.deepep.ref"] == "a9ea9774"
    assert test.deepep_check is not None and test.deepep_check.archs == "gfx950"
    assert rt.tag in test.deepep_check.stage
    assert any(WHY in n and rt.tag in n for n in plan.notices)  # said on every run, not only a dry one


def test_test_is_keyed_on_the_retarget_so_another_published_ci_base_or_arch_is_a_new_input(tree):
    first = on_retarget(tree, retarget_step()).steps[1].input_hash
    assert on_retarget(tree, retarget_step()).steps[1].input_hash == first
    assert on_retarget(tree, retarget_step(identity="sha256:" + "e" * 64)).steps[1].input_hash != first
    assert on_retarget(tree, retarget_step(ref="a9ea9774")).steps[1].input_hash != first
    other = retarget_step(archs=("gfx942",))
    assert plan_build(request(tree, archs=("gfx942",), retarget=other, ci_base_reused=WHY)).steps[1].input_hash != first


def test_on_a_registry_chain_the_retarget_is_pushed_there_and_test_starts_from_it(tree):
    chain = chain_for("docker-container", "b", "localhost:5000/tiers", tree / "layouts")
    rt, test = on_retarget(tree, retarget_step(), chain=chain, load=True).steps
    assert rt.tag == "localhost:5000/tiers:ci-base-retarget-gfx950" and rt.push and rt.load
    assert test.build_args["CI_BASE_IMAGE"] == rt.tag


def test_ci_passes_no_deepep_arch_list_so_its_hash_has_the_dockerfiles_default(tmp_path):
    """The names rocmci leaves out of CI's hash: set nowhere in what CI runs (vLLM's .buildkite, its bake files,
    ci-infra's template), read only by ci-bake-rocm.sh's label line, whose value then comes from the Dockerfile."""
    bake = SHARED_VLLM / "buildkite" / "scripts" / "ci-bake-rocm.sh"
    if not bake.is_file():
        pytest.skip(f"no {bake}")
    files = [*(SHARED_VLLM / "buildkite").rglob("*"), *(SHARED_VLLM / "docker").glob("*.hcl"),
             *(SHARED_VLLM.parent / "ci-infra").rglob("*")]  # fmt: skip
    for name in cibase.NOT_PASSED_BY_CI:
        setters = [f for f in files if f.is_file() and re.search(rf"\b{name}\b", f.read_text(errors="replace"))
                   and f != bake]  # fmt: skip
        assert setters == [], f"{name} is passed by CI after all: {setters}"
    assert cibase.as_ci_passes({"DEEPEP_ROCM_ARCH": "gfx950", "BASE_IMAGE": "b"}) == {"BASE_IMAGE": "b"}
    root = tmp_path / "vllm"
    shutil.copytree(REPO / "tests" / "data" / "vllm-standin", root)
    (root / cibase.SCRIPT).parent.mkdir(parents=True)
    shutil.copy(bake, root / cibase.SCRIPT)
    args = {"BASE_IMAGE": "rocmci-test/debian-python:bookworm", "REMOTE_VLLM": "0"}
    ci = cibase.compute(root, cibase.as_ci_passes({**args, "DEEPEP_ROCM_ARCH": "gfx950"}), DIGEST, "x")
    assert ci.labels["vllm.rocm.deepep_rocm_arch"] == "gfx942;gfx950"  # the stand-in Dockerfile's default
    explicit = cibase.compute(root, {**args, "DEEPEP_ROCM_ARCH": "gfx942;gfx950"}, DIGEST, "x")
    assert explicit.content_hash == ci.content_hash  # so a ci_base built for the default list is CI's
    assert cibase.compute(root, {**args, "DEEPEP_ROCM_ARCH": "gfx950"}, DIGEST, "x").content_hash != ci.content_hash
