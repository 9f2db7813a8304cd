"""The image references rocmci refuses (values.image_ref: the flags; the settings registry applies the same rule)
are the ones the real docker client refuses to parse. Each reference goes to `docker tag`, which parses it with
docker's own reference grammar before anything else. A reference without a digest is given one: the client
then refuses every reference it can parse ("refusing to create a tag with a digest reference"), so no test
creates a tag on the shared engine. The digest never changes whether the rest parses.

Upper case in a repository name is refused by the engine, not by the client's parser: its test tags with the
reference as it is, which the engine refuses, again creating nothing.
"""

from __future__ import annotations

import subprocess

import pytest

from rocmci import values
from rocmci.errors import UsageError

DIGEST = "sha256:" + "0123456789abcdef" * 4
REFERENCES = [
    # docker reads these
    "img", "rocm/vllm-dev:base", "a/b/c", "localhost:5000/x:UPPER-tag", "Registry.IO/x", "a__b/c-d.e:t_1.2-3",
    "docker.io/rocm/dev-ubuntu-22.04:7.0", f"x@{DIGEST}", f"localhost:5000/rocm/vllm-ci:abc@{DIGEST}",
    "x:" + "t" * 128, "a---b", "host-1.example:443/x",
    # and not these
    "x@sha256:zzz", f"a@b@{DIGEST}", "x:", "x:.t", "x:-t", "a//b", "a/-b", "a..b", "a_-b", "x:" + "t" * 129,
    "host:port/x", "a/b:c/d", "x@sha256:" + "A" * 64, "x@sha256:" + "0" * 63, "x@md5:" + "0" * 32, "a/b.", "x/",
    "x:a:b",
]  # fmt: skip


def refused(ref: str) -> bool:
    try:
        values.image_ref("--image", ref)
    except UsageError:
        return True
    return False


def docker_tag(engine, image: str, ref: str) -> subprocess.CompletedProcess:
    done = subprocess.run([engine.client, "tag", image, ref], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0, f"docker tag created {ref!r}: remove it, and give this test a reference it refuses"
    return done


@pytest.mark.parametrize("ref", REFERENCES)
def test_rocmci_refuses_exactly_the_references_docker_cannot_parse(engine, busybox_image, ref):
    done = docker_tag(engine, busybox_image, ref if "@" in ref else f"{ref}@{DIGEST}")
    parsed = "refusing to create a tag with a digest reference" in done.stderr
    assert parsed or "Error parsing reference" in done.stderr, done.stderr
    assert refused(ref) == (not parsed), done.stderr


@pytest.mark.parametrize("ref", ["Rocm/x", "rocm/DEV:latest", "localhost:5000/Upper/x"])
def test_upper_case_in_a_repository_is_refused_as_the_engine_refuses_it(engine, busybox_image, ref):
    done = docker_tag(engine, busybox_image, ref)
    assert "repository name must be lowercase" in done.stderr, done.stderr
    assert refused(ref)


@pytest.mark.parametrize(
    "repo", ["rocmci/vllm-rocm", "localhost:5000/a/b", "x", "rocm/x:", "rocm/x:tag", "a//b", "x/", "host:port/x"]
)
def test_rocmci_refuses_exactly_the_image_repos_docker_cannot_tag_with_a_target(engine, busybox_image, repo):
    # image_repo gets `:<target>-<archs>` appended: judged as docker parses the tag rocmci would make from it
    done = docker_tag(engine, busybox_image, f"{repo}:test-gfx942@{DIGEST}")
    parsed = "refusing to create a tag with a digest reference" in done.stderr
    assert parsed or "Error parsing reference" in done.stderr, done.stderr
    assert (values.repository_problem(repo) is not None) == (not parsed), done.stderr
