"""Which builder image.build reaches, and the BuildKit probe's positive control (issue 31 item 3).

A stand-in docker client answers `build` as a Docker >= 23 client without buildx does (with DOCKER_BUILDKIT=1,
as rocmci sets it); every other command goes to the real client and engine.
"""

from __future__ import annotations

import shutil

from tests.conftest import REPO, run_invoke

STANDIN = REPO / "tests" / "data" / "vllm-standin"
NO_BUILDX = """#!/bin/sh
case "$1" in
  build) printf 'ERROR: BuildKit is enabled but the buildx component is missing or broken.\\n'\\
'       Install the buildx component to build images with BuildKit:\\n       https://docs.docker.com/go/buildx/\\n' >&2
         exit 1 ;;
  buildx) echo "docker: 'buildx' is not a docker command." >&2; exit 1 ;;
esac
exec /usr/bin/docker "$@"
"""
WORDS = "ERROR: BuildKit is enabled but the buildx component is missing or broken."


def test_a_client_that_cannot_build_at_all_is_refused_up_front_in_its_own_words(engine, tmp_path):
    tree = tmp_path / "vllm"
    shutil.copytree(STANDIN, tree)
    client = tmp_path / "docker"
    client.write_text(NO_BUILDX)
    client.chmod(0o755)
    env = {"ROCMCI_DOCKER": str(client), "CI": "true", "ROCMCI_IMAGE_REPO": "rocmci-test/builders-none"}
    done = run_invoke("image.build", "--vllm-src", str(tree), env=env)
    assert done.returncode == 5, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rocmci: {client} cannot build an image with BuildKit: {WORDS}") and "buildx" in last
    assert "Traceback" not in done.stderr and "built " not in done.stderr
    dry = run_invoke("image.build", "--vllm-src", str(tree), "-n", env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == (
        f"# preflight: the build would stop here (exit 5): {client} cannot build an image with BuildKit: {WORDS} "
        "install the buildx plugin (docker-buildx-plugin / docker-buildx), or use a docker client older than 23 "
        "(set ROCMCI_DOCKER)"
    )
    doctor = run_invoke("doctor", "--for", "build", "--vllm-src", str(tree), env=env)
    assert doctor.returncode != 0 and WORDS in doctor.stdout + doctor.stderr
    # The real client on this engine passes the same control.
    real = run_invoke("image.build", "--vllm-src", str(tree), "-n", env={**env, "ROCMCI_DOCKER": "auto"})
    assert real.returncode == 0 and "# preflight" not in real.stdout


def test_the_registry_chain_pushes_each_tier_and_the_next_starts_from_it_there(engine, tmp_path, registry):
    """tier_chain=registry on this engine's own builder (the one path of a container builder it can run)."""
    import uuid

    from tests.integration.helpers import remove_images
    from tests.integration.test_image_tiers import built, case_label
    from tests.integration.test_image_tiers import env as tier_env

    tree = tmp_path / "vllm"
    shutil.copytree(STANDIN, tree)
    repo = f"rocmci-test/chain-{uuid.uuid4().hex[:8]}"
    cache = f"{registry}/{repo}-cache"
    env = tier_env(repo, ROCMCI_TIER_CHAIN="registry", ROCMCI_IMAGE_CACHE_REGISTRY=cache)  # this run's own labels
    try:
        dry = run_invoke("image.build", "--vllm-src", str(tree), "-n", env=env)
        assert dry.returncode == 0 and f"--tag {cache}:ci-base-" in " ".join(dry.stdout.split())
        done = run_invoke("image.build", "--vllm-src", str(tree), env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        tiers = built(done.stderr)
        assert list(tiers) == ["ci_base", "test"] and tiers["ci_base"].startswith(f"{cache}:ci-base-")
        assert f"pushing {tiers['ci_base']}" in done.stderr and engine.registry_digest(tiers["ci_base"])
        assert engine.image_labels(tiers["test"])["rocmci.ci-base-image"] == tiers["ci_base"]
    finally:  # every image of this test, tagged or left untagged by the chain, by its own label
        assert remove_images(engine, case_label(repo)) == [], f"images labelled {case_label(repo)} are left"
