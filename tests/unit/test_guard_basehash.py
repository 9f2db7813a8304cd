"""The base tier's content hash equals vLLM's `vllm.rocm_base.content_hash` (issue 35), differentially: vLLM's own
refresh-base-image.sh (../shared/fixtures) is sourced and its compute_base_content_hash run on the same checkout,
for edited copies of vLLM's real Dockerfile.rocm_base that test_image_inputs does not cover: an ARG without a default,
an ARG left out, an indented and an unquoted ARG, a BASE_IMAGE without a default. docs/guards.md maps each test to the
mutation it was watched to kill.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rocmci.image import base
from tests.unit.test_image_inputs import DIGEST, upstream_hash


def edited(tree: Path, change) -> Path:
    path = tree / base.BASE_DOCKERFILE
    path.write_text(change(path.read_text()))
    return tree


EDITS = {
    "an ARG without a default": lambda t: re.sub(r"^ARG MORI_BRANCH=.*$", "ARG MORI_BRANCH", t, count=1, flags=re.M),
    "an ARG left out": lambda t: re.sub(r"^ARG FA_REPO=.*\n", "", t, count=1, flags=re.M),
    "an indented ARG": lambda t: re.sub(r"^ARG (PYTHON_VERSION=)", r"  ARG \1", t, count=1, flags=re.M),
    "an unquoted ARG": lambda t: re.sub(
        r'^ARG TRITON_BRANCH="([^"]+)"', r"ARG TRITON_BRANCH=\1", t, count=1, flags=re.M
    ),
    "a tab after ARG": lambda t: re.sub(r"^ARG (PYTORCH_BRANCH=)", "ARG\t\\1", t, count=1, flags=re.M),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_the_content_hash_is_vllms_for_an_edited_base_dockerfile(vllm_fixtures, vllm_docker_tree, edit):
    before = (vllm_docker_tree / base.BASE_DOCKERFILE).read_text()
    tree = edited(vllm_docker_tree, EDITS[edit])
    assert (tree / base.BASE_DOCKERFILE).read_text() != before, "the edit changed nothing: the fixture moved"
    mine = base.tier(tree, lambda ref: (DIGEST, True))
    assert mine.content_hash == upstream_hash(vllm_fixtures, tree, DIGEST)


def test_a_base_dockerfile_without_a_base_image_default_hashes_as_vllms(vllm_fixtures, vllm_docker_tree):
    tree = edited(vllm_docker_tree, lambda t: re.sub(r"^ARG BASE_IMAGE=.*$", "ARG BASE_IMAGE", t, count=1, flags=re.M))
    tier = base.tier(tree, lambda ref: (DIGEST, True))
    assert tier.upstream == "" and tier.content_hash is None  # nothing to ask a digest of: no key
    files = base.files_hash(tree)
    assert base.content_hash(files, tier.args, "") == upstream_hash(vllm_fixtures, tree, "")


@pytest.mark.parametrize("mode", [0o644, 0o744, 0o654, 0o645, 0o600])
def test_any_execute_bit_hashes_the_file_as_755_as_vllms_script_does(vllm_fixtures, vllm_docker_tree, mode):
    os.chmod(vllm_docker_tree / base.BASE_DOCKERFILE, mode)
    assert base.tier(vllm_docker_tree, lambda ref: (DIGEST, True)).content_hash == (
        upstream_hash(vllm_fixtures, vllm_docker_tree, DIGEST)
    )


def test_an_unknown_base_digest_and_a_missing_arg_hash_as_vllms_script_does(vllm_fixtures, vllm_docker_tree):
    tier = base.tier(vllm_docker_tree, lambda ref: (DIGEST, True))
    files = base.files_hash(vllm_docker_tree)
    assert base.content_hash(files, tier.args, "") == upstream_hash(vllm_fixtures, vllm_docker_tree, "")
    tree = edited(vllm_docker_tree, lambda t: re.sub(r"^ARG MORI_REPO=.*\n", "", t, count=1, flags=re.M))
    args = {name: value for name, value in base.tier(tree, lambda ref: (DIGEST, True)).args.items() if value}
    assert "MORI_REPO" not in args  # a caller's dict without the ARG: hashed as the script's <empty>
    assert base.content_hash(base.files_hash(tree), args, DIGEST) == upstream_hash(vllm_fixtures, tree, DIGEST)


def test_the_tier_says_whether_its_upstream_digest_is_pinnable(vllm_docker_tree):
    assert base.tier(vllm_docker_tree, lambda ref: (DIGEST, True)).upstream_pinnable is True
    assert base.tier(vllm_docker_tree, lambda ref: (DIGEST, False)).upstream_pinnable is False
    tree = edited(vllm_docker_tree, lambda t: re.sub(r"^ARG BASE_IMAGE=.*$", "ARG BASE_IMAGE", t, count=1, flags=re.M))
    assert base.tier(tree, lambda ref: (DIGEST, True)).upstream_pinnable is False  # nothing to pin


def test_a_base_dockerfile_past_the_size_bound_is_one_line_naming_it(vllm_docker_tree):
    from rocmci.errors import RocmciError

    (vllm_docker_tree / base.BASE_DOCKERFILE).write_text("#" * (base.MAX_BYTES + 1))
    for read in (
        lambda: base.tier(vllm_docker_tree, lambda ref: (DIGEST, True)),
        lambda: base.files_hash(vllm_docker_tree),
    ):
        with pytest.raises(RocmciError) as err:
            read()
        assert "(from docker/Dockerfile.rocm_base)" in err.value.message and "\n" not in err.value.one_line()


def test_a_pin_replaces_a_digest_the_reference_already_holds():
    new = "sha256:" + "e" * 64
    assert base.pinned("rocm/dev:7@sha256:" + "a" * 64, new, True) == f"rocm/dev:7@{new}"
    assert base.pinned("rocm/dev:7", new, True) == f"rocm/dev:7@{new}"
    assert base.pinned("rocm/dev:7", new, False) == "rocm/dev:7"
