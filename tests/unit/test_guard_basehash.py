"""The base tier's content hash equals vLLM's `vllm.rocm_base.content_hash` (issue 35), differentially: vLLM's own
refresh-base-image.sh (../shared/fixtures) is sourced and its compute_base_content_hash run on the same checkout,
for edited copies of vLLM's real Dockerfile.rocm_base that test_image_inputs does not cover: an ARG without a default,
an ARG left out, an indented and an unquoted ARG, a BASE_IMAGE without a default. docs/guards.md maps each test to the
mutation it was watched to kill.
"""

from __future__ import annotations

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
