"""vLLM CI's published ci_base reused (issue 31 item 5), through the real engine and a local registry.

The stand-in checkout gets vLLM's real .buildkite/scripts/ci-bake-rocm.sh (from the shared fixtures, copied
into the test's own tree): its hash decides the tag `<ci_base_tag>-<vllm.ci_base.content_hash>` rocmci looks for.
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from tests.conftest import REPO, SHARED_VLLM, run_invoke
from tests.integration.test_image_tiers import built, env, make_image, read

STANDIN = REPO / "tests" / "data" / "vllm-standin"
BAKE = SHARED_VLLM / "buildkite" / "scripts" / "ci-bake-rocm.sh"


@pytest.fixture
def tree(tmp_path):
    if not BAKE.is_file():
        pytest.skip(f"no {BAKE}")
    root = tmp_path / "vllm"
    shutil.copytree(STANDIN, root)
    (root / ".buildkite" / "scripts").mkdir(parents=True)
    shutil.copy(BAKE, root / ".buildkite" / "scripts" / "ci-bake-rocm.sh")
    return root


@pytest.fixture
def images(engine):
    """Repositories the test made: their tags are removed afterwards (by name, never by ID: an ID can be
    shared with a base image others use), then the untagged images whose labels name them."""
    made: list[str] = []
    yield made
    for repo in made:
        tags = engine.cli("images", "--format", "{{.Repository}}:{{.Tag}}", repo, check=False).stdout.split()
        if tags:
            engine.cli("rmi", *tags, check=False)
    dangling = engine.cli("images", "-q", "--filter", "dangling=true", check=False).stdout.split()
    for image in set(dangling):
        labels = engine.image_labels(image) or {}
        if any(repo in value for repo in made for value in labels.values()):
            engine.cli("rmi", image, check=False)


def test_a_ci_base_published_under_its_content_hash_is_reused_and_a_moved_tag_is_seen_with_pull(
    engine, python_image, tree, images, registry
):
    repo = f"rocmci-test/cibase-{uuid.uuid4().hex[:8]}"
    stable = f"{registry}/{repo}:ci_base"
    base = f"{registry}/{repo}/base:1"  # a published BASE_IMAGE, so that --pull can pull it
    images += [repo, stable.rsplit(":", 1)[0], base.rsplit(":", 1)[0]]
    make_image(engine, repo, base, f"FROM {python_image}\nLABEL rocmci.test={repo}\n")  # its own ID, not the shared one
    engine.cli("push", base, timeout=120)
    settings = env(repo, ROCMCI_CI_BASE_TAG=stable, ROCMCI_BASE_IMAGE=base)

    # rocmci's own ci_base carries the bake's labels, the content hash among them.
    own = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=settings)
    assert own.returncode == 0, own.stderr[-3000:]
    own_tag = built(own.stderr)["ci_base"]
    labels = engine.image_labels(own_tag)
    chash = labels["vllm.ci_base.content_hash"]
    assert len(chash) == 64 and labels["vllm.ci_base.metadata_version"] == "2"
    published = f"{stable}-{chash}"
    assert labels["vllm.ci_base.image.content"] == published
    assert labels["vllm.rocm.deepep_rocm_arch"] == "gfx942;gfx950"

    # Published as CI publishes it, then gone from this engine: the registry is where it is found.
    images.append(published)
    engine.cli("tag", own_tag, published)
    engine.cli("push", published, timeout=120)
    engine.cli("rmi", published, own_tag)

    first = run_invoke("image.build", "--vllm-src", str(tree), env=settings)
    assert first.returncode == 0, first.stderr[-3000:]
    assert list(built(first.stderr)) == ["test"]  # no ci_base: no rocSHMEM, no DeepEP rebuilt
    assert f"pulling vLLM CI's ci_base {published}" in first.stderr
    test_tag = built(first.stderr)["test"]
    test_labels = engine.image_labels(test_tag)
    assert test_labels["rocmci.ci-base-image"] == published
    assert test_labels["rocmci.arch"] == "gfx942;gfx950"  # read from the ci_base's labels
    assert "checked " + test_tag in first.stderr  # the DeepEP evidence of what it inherited
    assert test_labels["rocmci.evidence.deepep-arch"] == "gfx942;gfx950"  # written from the code objects read

    again = run_invoke("image.build", "--vllm-src", str(tree), env=settings)
    assert again.returncode == 0 and not built(again.stderr) and "is up to date" in again.stderr

    # The published tag moves (same content hash label, other bytes); this engine still has the old one.
    old = engine.image_attrs(published)["Id"]
    make_image(engine, repo, published, f"FROM {published}\nRUN echo moved > /ci-base-marker\n")
    engine.cli("push", published, timeout=120)
    engine.cli("tag", old, published)
    local = run_invoke("image.build", "--vllm-src", str(tree), env=settings)
    assert local.returncode == 0 and not built(local.stderr)  # without --pull: the local copy, still current
    dry = run_invoke("image.build", "--vllm-src", str(tree), "--pull", "-n", env=settings)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert f"docker pull {published}" in dry.stderr
    moved = run_invoke("image.build", "--vllm-src", str(tree), "--pull", env=settings)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert list(built(moved.stderr)) == ["test"] and "is up to date" not in moved.stderr
    assert read(engine, test_tag, "cat", "/ci-base-marker") == "moved"
