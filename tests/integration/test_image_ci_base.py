"""vLLM CI's published ci_base reused (issue 31 item 5), through the real engine and a local registry.

The stand-in checkout gets vLLM's real .buildkite/scripts/ci-bake-rocm.sh (from the shared fixtures, copied
into the test's own tree): its hash decides the tag `<ci_base_tag>-<vllm.ci_base.content_hash>` rocmci looks for.
"""

from __future__ import annotations

import re
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


def published_setup(engine, python_image, images, registry, kind: str) -> tuple[str, str, dict[str, str]]:
    """(repo, the ci_base tag CI publishes under, settings): a unique repository whose BASE_IMAGE is published in
    the local registry (so --pull can pull it) with an ID of its own, not the shared base image's."""
    repo = f"rocmci-test/{kind}-{uuid.uuid4().hex[:8]}"
    stable = f"{registry}/{repo}:ci_base"
    base = f"{registry}/{repo}/base:1"
    images += [repo, stable.rsplit(":", 1)[0], base.rsplit(":", 1)[0]]
    make_image(engine, repo, base, f"FROM {python_image}\nLABEL rocmci.test={repo}\n")
    engine.cli("push", base, timeout=120)
    return repo, stable, env(repo, ROCMCI_CI_BASE_TAG=stable, ROCMCI_BASE_IMAGE=base)


def publish_ci_base(engine, tree, settings, stable: str, images: list[str]) -> tuple[str, str]:
    """rocmci's ci_base for the checkout's own list, published as CI publishes it (under its content hash):
    (rocmci's tag, the published tag)."""
    own = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=settings)
    assert own.returncode == 0, own.stderr[-3000:]
    own_tag = built(own.stderr)["ci_base"]
    published = f"{stable}-{engine.image_labels(own_tag)['vllm.ci_base.content_hash']}"
    images.append(published)
    engine.cli("tag", own_tag, published)
    engine.cli("push", published, timeout=120)
    return own_tag, published


def test_a_ci_base_published_under_its_content_hash_is_reused_and_a_moved_tag_is_seen_with_pull(
    engine, python_image, tree, images, registry
):
    repo, stable, settings = published_setup(engine, python_image, images, registry, "cibase")

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


def test_an_arch_change_retargets_the_ci_base_published_for_cis_arch_list(engine, python_image, tree, images, registry):
    """CI publishes its ci_base for its own list (the Dockerfile's DEEPEP_ROCM_ARCH default); --arch gfx950 builds
    only rocSHMEM and DeepEP on it (the retarget overlay), then test: no ci_base build."""
    repo, stable, settings = published_setup(engine, python_image, images, registry, "ciarch")

    # CI's ci_base: built for the default list, published under its content hash, then gone from this engine.
    own_tag, published = publish_ci_base(engine, tree, settings, stable, images)
    engine.cli("rmi", published, own_tag)

    argv = ("image.build", "--vllm-src", str(tree), "--arch", "gfx950")
    dry = run_invoke(*argv, "-n", env=settings)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "--file " + str(REPO / "src" / "rocmci" / "data" / "docker" / "Dockerfile.retarget") in dry.stdout
    assert f"FROM_IMAGE={published}@sha256:" in dry.stdout and "DEEPEP_ROCM_ARCH=gfx950" in dry.stdout
    assert "--target ci_base" not in dry.stdout
    assert f"{published} is not on this engine: the retarget below shows the checkout's" in dry.stdout + dry.stderr
    assert (f"vLLM CI's ci_base for CI's arch list gfx942;gfx950 is reused ({published}); only rocSHMEM and "
            "DeepEP are rebuilt for gfx950") in dry.stderr  # fmt: skip

    first = run_invoke(*argv, env=settings)
    assert first.returncode == 0, first.stderr[-3000:]
    tags = built(first.stderr)
    assert list(tags) == ["retarget", "test"]  # no ci_base: NIXL, UCX and the rest come from CI's
    assert f"pulling vLLM CI's ci_base {published}" in first.stderr
    retargeted, test_tag = tags["retarget"], tags["test"]
    assert f"verified {retargeted}: deep_ep imports; code objects for gfx950" in first.stderr
    rt_labels = engine.image_labels(retargeted)
    assert rt_labels["rocmci.arch"] == rt_labels["vllm.rocm.deepep_rocm_arch"] == "gfx950"  # no label says CI's
    assert rt_labels["vllm.ci_base.content_hash"] == ""  # not CI's ci_base any more
    assert rt_labels["rocmci.retarget.from"].startswith(f"{published}@sha256:")
    test_labels = engine.image_labels(test_tag)
    assert test_labels["rocmci.ci-base-image"] == retargeted
    assert test_labels["rocmci.arch"] == "gfx950"
    assert test_labels["rocmci.evidence.deepep-arch"] == "gfx950"  # the test image's own code objects, read
    assert read(engine, test_tag, "python3", "/opt/rocmci/verify_deepep.py", "--expect", "gfx950").startswith("{")

    again = run_invoke(*argv, env=settings)
    assert again.returncode == 0 and not built(again.stderr), again.stderr[-3000:]
    assert f"verified {retargeted}" in again.stderr  # verified even when the retarget is up to date

    # No published ci_base under either hash: ci_base is built, and the note names both tags looked for.
    other = run_invoke(*argv, "-n", env={**settings, "ROCMCI_CI_BASE_TAG": f"{registry}/{repo}:none"})
    assert other.returncode == 0, other.stderr[-3000:]
    assert "--target ci_base" in other.stdout and "Dockerfile.retarget" not in other.stdout
    looked = re.search(r"note: no (\S+) or (\S+) in its registry or on this engine: ci_base is built", other.stderr)
    assert looked and looked.group(2) == f"{registry}/{repo}:none-{published.rsplit('-', 1)[1]}", other.stderr


def test_a_hard_coded_deepep_list_as_upstream_has_builds_for_another_list_by_retargeting_cis_ci_base(
    engine, python_image, tree, images, registry
):
    """Upstream's Dockerfile.rocm hard-codes DeepEP's list (gfx942;gfx950). A ci_base built from it for gfx950 is
    refused, but with CI's ci_base published the checkout's ci_base is not built at all: the retarget builds
    rocSHMEM and DeepEP for gfx950, and the refusal stands only where ci_base would be built."""
    path = tree / "docker" / "Dockerfile.rocm"
    fixed = 'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" \\'
    assert fixed in path.read_text()
    path.write_text(path.read_text().replace(fixed, 'RUN export PYTORCH_ROCM_ARCH="gfx942;gfx950" \\'))
    repo, stable, settings = published_setup(engine, python_image, images, registry, "cihard")
    argv = ("image.build", "--vllm-src", str(tree), "--arch", "gfx950")

    unpublished = run_invoke(*argv, "-n", env=settings)  # nothing to retarget: the checkout's ci_base is refused
    assert unpublished.returncode == 1, unpublished.stderr[-3000:]
    assert unpublished.stderr.strip().splitlines()[-1].startswith("rocmci: refusing to build for gfx950: ")

    publish_ci_base(engine, tree, settings, stable, images)  # CI's own list: the file's hard-coded one

    dry = run_invoke(*argv, "-n", env=settings)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "Dockerfile.retarget" in dry.stdout and "--target ci_base" not in dry.stdout
    assert "note: the checkout's ci_base is not built, so its lines the arch check refuses do not reach" in dry.stderr
    done = run_invoke(*argv, env=settings)
    assert done.returncode == 0, done.stderr[-3000:]
    tags = built(done.stderr)
    assert list(tags) == ["retarget", "test"]
    assert engine.image_labels(tags["test"])["rocmci.evidence.deepep-arch"] == "gfx950"  # read, not declared
    # --target ci_base builds the checkout's ci_base itself: refused, whatever CI publishes.
    refused = run_invoke("image.build", "--vllm-src", str(tree), "--arch", "gfx950", "--target", "ci_base", "-n",
                         env=settings)  # fmt: skip
    assert refused.returncode == 1 and "refusing to build for gfx950" in refused.stderr, refused.stderr[-2000:]
