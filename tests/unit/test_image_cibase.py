"""vLLM CI's ci_base content hash, by the checkout's own ci-bake-rocm.sh (sourced, its functions run)."""

from __future__ import annotations

import shutil

import pytest

from rocmci.image import cibase
from tests.conftest import REPO, SHARED_VLLM

BAKE = SHARED_VLLM / "buildkite" / "scripts" / "ci-bake-rocm.sh"
ARGS = {"BASE_IMAGE": "rocmci-test/debian-python:bookworm", "DEEPEP_ROCM_ARCH": "gfx942;gfx950", "REMOTE_VLLM": "0"}
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def tree(tmp_path):
    if not BAKE.is_file():
        pytest.skip(f"no {BAKE}")
    root = tmp_path / "vllm"
    shutil.copytree(REPO / "tests" / "data" / "vllm-standin", root)
    (root / ".buildkite" / "scripts").mkdir(parents=True)
    shutil.copy(BAKE, root / cibase.SCRIPT)
    return root


def test_the_hash_follows_what_the_script_hashes_and_nothing_else(tree, monkeypatch):
    first = cibase.compute(tree, ARGS, DIGEST, "rocm/vllm-dev:ci_base")
    assert first is not None and first.labels["vllm.ci_base.content_hash"] == first.content_hash
    assert first.tag("rocm/vllm-dev:ci_base") == f"rocm/vllm-dev:ci_base-{first.content_hash}"
    assert first.labels["vllm.ci_base.image.content"] == first.tag("rocm/vllm-dev:ci_base")
    assert first.labels["vllm.rocm.base_image_digest"] == DIGEST
    # The user's environment does not leak in: only the build args rocmci passes are hashed.
    monkeypatch.setenv("DEEPEP_ROCM_ARCH", "gfx90a")
    monkeypatch.setenv("BUILDKITE_COMMIT", "f" * 40)
    assert cibase.compute(tree, ARGS, DIGEST, "x/y:ci_base").content_hash == first.content_hash
    # Each input the script names moves it: an arch list, BASE_IMAGE's digest, a content file.
    assert cibase.compute(tree, {**ARGS, "DEEPEP_ROCM_ARCH": "gfx950"}, DIGEST, "x").content_hash != first.content_hash
    assert cibase.compute(tree, ARGS, "sha256:" + "cd" * 32, "x").content_hash != first.content_hash
    (tree / "requirements" / "rocm.txt").write_text("changed\n")
    assert cibase.compute(tree, ARGS, DIGEST, "x").content_hash != first.content_hash


def test_no_script_is_no_hash_and_a_broken_one_is_one_line(tree):
    (tree / cibase.SCRIPT).write_text("exit 3\n")
    with pytest.raises(cibase.BuildError, match="could not compute the ci_base content hash"):
        cibase.compute(tree, ARGS, DIGEST, "x")
    (tree / cibase.SCRIPT).unlink()
    assert cibase.compute(tree, ARGS, DIGEST, "x") is None
