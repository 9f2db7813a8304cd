"""Tiers chained per builder (issue 31 item 3), planned without an engine: the argv each kind passes.

This machine has no buildx, so the docker-container and remote paths are tested here, as plans; the store path
and the registry path also run through the real engine (tests/integration/test_image_ci_base.py, test_image_tiers.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.image import plan as planmod
from rocmci.image import vllm_dockerfile as vd
from tests.conftest import REPO

STANDIN = REPO / "tests" / "data" / "vllm-standin"


def request(chain: planmod.Chain | None, **more) -> planmod.BuildRequest:
    values = dict(
        checkout=STANDIN, dockerfile=vd.load(STANDIN), archs=("gfx942", "gfx950"), vllm_archs=None, pins={},
        overrides={}, image_repo="rocmci/vllm-rocm", vllm_commit="abc", chain=chain,
    )  # fmt: skip
    values.update(more)
    return planmod.BuildRequest(**values)


def value(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


@pytest.mark.parametrize("driver", [None, "docker"])
def test_the_docker_driver_and_the_engines_builder_read_the_store(driver):
    chain = planmod.chain_for(driver, "default", "registry.example:5000/cache", Path("/r/tiers"))
    assert chain.kind == planmod.STORE  # a registry named or not: the store is readable, nothing is pushed
    ci, test = planmod.plan_build(request(chain)).steps
    argv = test.argv("docker")
    assert f"CI_BASE_IMAGE={ci.tag}" in value(argv, "--build-arg") and not ci.push
    assert "--build-context" not in argv and "--output" not in argv


@pytest.mark.parametrize("driver", ["docker-container", "remote", "kubernetes"])
def test_a_container_or_remote_builder_chains_through_the_named_registry(driver):
    chain = planmod.chain_for(driver, "b1", "registry.example:5000/cache", Path("/r/tiers"))
    assert chain.kind == planmod.REGISTRY
    ci, test = planmod.plan_build(request(chain, load=True)).steps
    assert ci.tag.startswith("registry.example:5000/cache:ci-base-") and ci.push and ci.load  # --load: not docker
    assert ci.push_argv("docker") == ["docker", "push", ci.tag]
    argv = test.argv("docker")
    assert f"CI_BASE_IMAGE={ci.tag}" in value(argv, "--build-arg") and "--load" in argv
    assert ci.deepep_check is not None  # loaded too: its code objects are checked before it is pushed


@pytest.mark.parametrize("driver", ["docker-container", "remote"])
def test_without_a_registry_a_tier_is_an_oci_layout_and_a_named_context(driver):
    chain = planmod.chain_for(driver, "b1", "", Path("/r/tiers"))
    assert chain.kind == planmod.CONTEXT
    ci, test = planmod.plan_build(request(chain, load=True)).steps
    ci_argv = ci.argv("docker")
    assert value(ci_argv, "--output") == ["type=oci,dest=/r/tiers/ci_base,tar=false"] and "--load" not in ci_argv
    argv = test.argv("docker")
    assert "CI_BASE_IMAGE=rocmci-tier-ci_base" in value(argv, "--build-arg")
    assert value(argv, "--build-context") == ["rocmci-tier-ci_base=oci-layout:///r/tiers/ci_base"]
    assert "--load" in argv and test.deepep_check is not None  # the last tier is loaded and checked


def test_a_base_tier_not_in_the_store_reaches_every_later_tier(tmp_path):
    from rocmci.image import base

    tier = base.BaseTier(STANDIN / base.BASE_DOCKERFILE, "up:1", "sha256:" + "a" * 64, True, "c" * 64, "f" * 64, {})
    facts = planmod.BaseFacts("rocm/vllm-dev:base", "sha256:" + "b" * 64, True, "d" * 64, tier)
    chain = planmod.chain_for("docker-container", "b1", "", tmp_path)
    first, ci, test = planmod.plan_build(request(chain, base=facts, load=True)).steps
    assert first.target == "base" and first.output == f"type=oci,dest={tmp_path / 'base'},tar=false"
    for later in (ci, test):
        assert later.build_args["BASE_IMAGE"] == "rocmci-tier-base"
        assert later.contexts["rocmci-tier-base"] == f"oci-layout://{tmp_path / 'base'}"


def test_a_chain_can_be_chosen_and_registry_needs_a_registry():
    from rocmci.errors import UsageError

    assert planmod.chain_for(None, "", "r:5000/c", Path("/t"), "registry").kind == planmod.REGISTRY
    assert planmod.chain_for("docker-container", "b", "r:5000/c", Path("/t"), "store").kind == planmod.STORE
    with pytest.raises(UsageError, match="image_cache_registry is empty"):
        planmod.chain_for(None, "", "", Path("/t"), "registry")
    ci, _ = planmod.plan_build(request(planmod.chain_for(None, "", "r:5000/c", Path("/t"), "registry"))).steps
    assert ci.push and not ci.load and "--load" not in ci.argv("docker")  # the engine's builder has no --load
