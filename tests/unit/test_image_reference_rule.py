"""values.image_ref and the settings registry refuse an image reference docker cannot parse with one line that says
which part is wrong (tests/integration/test_image_references.py checks the same references against docker itself)."""

from __future__ import annotations

import pytest

from rocmci import settings, values
from rocmci.errors import UsageError

DIGEST = "sha256:" + "0123456789abcdef" * 4
NAME = "its name is not [host[:port]/]path, of lower-case letters and digits joined by '.', '_' or '-'"
TAG = "is not 1-128 letters, digits, '_', '.' or '-', starting with no '.' or '-'"


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("x@sha256:zzz", "its digest is not sha256: and 64 lower-case hex digits"),
        ("x@" + DIGEST.upper().replace("SHA256", "sha256"), "its digest is not sha256: and 64 lower-case hex digits"),
        (f"a@b@{DIGEST}", "it holds more than one '@'"),
        ("x:", f"its tag '' {TAG}"),
        ("x:.t", f"its tag '.t' {TAG}"),
        ("x:" + "t" * 129, f"its tag {'t' * 40!r} {TAG}"),
        ("a//b", NAME),
        ("a..b", NAME),
        ("x/", NAME),
        ("host:port/x", NAME),
        ("x:a:b", NAME),
    ],
)
def test_a_reference_docker_cannot_parse_is_one_line_naming_the_part(ref, problem):
    assert values.reference_problem(ref) == problem
    with pytest.raises(UsageError) as err:
        values.image_ref("--image", ref)
    assert err.value.message == f"--image {values.shown(ref)} is not an image reference: {problem}"
    assert err.value.hint == values.IMAGE_REF_HINT
    with pytest.raises(UsageError) as err:
        settings.resolve(env={"ROCMCI_BASE_IMAGE": ref}, pyproject={})
    assert err.value.message.startswith(
        f"setting 'base_image' from env ROCMCI_BASE_IMAGE is not an image reference: {problem}, got "
    )


@pytest.mark.parametrize(
    "ref",
    ["img", "rocm/vllm-dev:base", "localhost:5000/x:UPPER-tag", "Registry.IO/x", f"x:{'t' * 128}@{DIGEST}",
     "a__b/c-d.e:t_1.2-3", "host-1.example:443/a/b"],
)  # fmt: skip
def test_a_reference_docker_parses_is_kept(ref):
    assert values.reference_problem(ref) is None
    assert values.image_ref("--image", ref) == ref
    assert settings.resolve(env={"ROCMCI_BASE_IMAGE": ref}, pyproject={}).base_image == ref


def test_upper_case_in_the_repository_is_named_before_the_grammar():
    with pytest.raises(UsageError, match="has upper case in its repository name"):
        values.image_ref("--image", "Rocm/x@sha256:zzz")


REPO = "is not a repository: it is [host[:port]/]path, of lower-case letters and digits joined by '.', '_' or '-'"


@pytest.mark.parametrize("repo", ["rocm/x:", "rocm/x:tag", "a//b", "a..b", "x/", "host:port/x"])
def test_an_image_repo_a_tag_cannot_be_appended_to_is_one_line(repo):
    # rocmci appends `:<target>-<archs>`: `rocm/x:` would become `rocm/x::test-...`, which docker refuses
    assert values.repository_problem(repo) == REPO
    with pytest.raises(UsageError) as err:
        settings.resolve(env={"ROCMCI_IMAGE_REPO": repo}, pyproject={})
    assert err.value.message == f"setting 'image_repo' from env ROCMCI_IMAGE_REPO {REPO}, got {repo!r}"


@pytest.mark.parametrize("repo", ["rocmci/vllm-rocm", "localhost:5000/a/b", "x", "registry.example:443/a__b/c-d"])
def test_an_image_repo_docker_takes_is_kept(repo):
    assert values.repository_problem(repo) is None
    assert settings.resolve(env={"ROCMCI_IMAGE_REPO": repo}, pyproject={}).image_repo == repo


def test_every_setting_whose_pattern_is_an_image_reference_is_checked_by_docker_grammar():
    from rocmci.registry import REGISTRY

    by_pattern = {s.name for s in REGISTRY if s.pattern and values.IMAGE_REF.pattern in s.pattern}
    assert by_pattern == {"base_image", "ci_base_image", "image"}
    assert all(s.check is values.image_ref_problem for s in REGISTRY if s.name in by_pattern)
    for name in sorted(by_pattern):
        with pytest.raises(UsageError, match="is not an image reference: it holds more than one '@'"):
            settings.resolve(env={f"ROCMCI_{name.upper()}": f"a@b@{DIGEST}"}, pyproject={})
