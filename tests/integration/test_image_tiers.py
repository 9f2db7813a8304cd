"""image.build's inputs on the real engine: BASE_IMAGE by digest, the base tier (Dockerfile.rocm_base),
retarget's pins from the image's labels, and the faults around them (issues 21 and 22).

Every test builds its own stand-in images under a unique repository, all of them (and what image.build makes,
through setting extra_labels) labelled with the test's own label, and removes them afterwards by that label:
the untagged images a moved tag leaves behind included.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid

import pytest

from tests.conftest import REPO, RUN_LABEL, RUN_SELECTOR, run_invoke
from tests.integration.helpers import remove_images

STANDIN = REPO / "tests" / "data" / "vllm-standin"
BUILT = re.compile(r"^built (\S+) \((\w+)\)", re.M)


@pytest.fixture
def scratch(engine, tmp_path):
    """A copy of the stand-in checkout and a unique repository whose images are removed afterwards."""
    tree = tmp_path / "vllm"
    shutil.copytree(STANDIN, tree)
    repo = f"rocmci-test/tiers-{uuid.uuid4().hex[:8]}"
    yield tree, repo
    refs = engine.cli("images", "-q", repo, check=False).stdout.split()
    if refs:
        engine.cli("rmi", "-f", *set(refs), check=False)
    # What a moved tag or a refused build left untagged: found by this test's own label, and only that.
    assert remove_images(engine, case_label(repo)) == [], f"images labelled {case_label(repo)} could not be removed"


def case_label(repo: str) -> str:
    """The label (KEY=VALUE) every image of the test using `repo` carries: its own, and so only its own."""
    return f"{RUN_LABEL}.case={repo.rsplit('-', 1)[1]}"


def has_own_labels(engine, image: str, repo: str) -> bool:
    labels = engine.image_labels(image) or {}
    return all(labels.get(key) == value for key, value in (s.split("=", 1) for s in (RUN_SELECTOR, case_label(repo))))


def make_image(engine, repo: str, tag: str, dockerfile: str, *args: str) -> str:
    labels = ["--label", RUN_SELECTOR, "--label", case_label(repo)]
    done = subprocess.run(
        [engine.client, "build", "--network", "none", "-q", "-t", tag, *labels, *args, "-"],
        input=dockerfile, env=engine.build_env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def env(repo: str, **more: str) -> dict[str, str]:
    extra = f"{RUN_SELECTOR},{case_label(repo)}"  # on every image image.build makes for this test
    return {"ROCMCI_IMAGE_REPO": repo, "ROCMCI_BUILD_NETWORK": "none", "CI": "true", "ROCMCI_EXTRA_LABELS": extra,
            **more}  # fmt: skip


def read(engine, image: str, *command: str) -> str:
    return engine.cli("run", "--rm", "--network", "none", image, *command).stdout.strip()


def built(stderr: str) -> dict[str, str]:
    """target -> tag of every image the run built (not reused)."""
    return {target: tag for tag, target in BUILT.findall(stderr)}


def test_moving_the_base_tag_rebuilds_and_a_base_known_only_by_tag_is_refused(engine, python_image, scratch):
    tree, repo = scratch
    base = f"{repo}:base"
    first = make_image(engine, repo, base, f"FROM {python_image}\nRUN echo first {repo} > /base-marker\n")
    settings = env(repo, ROCMCI_BASE_IMAGE=base)
    done = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=settings)
    assert done.returncode == 0, done.stderr[-3000:]
    tag = built(done.stderr)["ci_base"]
    assert engine.image_labels(tag)["rocmci.base-image.digest"] == first
    assert has_own_labels(engine, tag, repo)  # setting extra_labels, so this test finds what it made
    again = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=settings)
    assert again.returncode == 0 and "is up to date" in again.stderr and not built(again.stderr)

    # The tag moves to another image: same tag text, new content. The next build must see it.
    second = make_image(engine, repo, base, f"FROM {python_image}\nRUN echo second {repo} > /base-marker\n")
    assert second != first
    moved = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=settings)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert built(moved.stderr) == {"ci_base": tag} and "is up to date" not in moved.stderr
    assert read(engine, tag, "cat", "/base-marker") == f"second {repo}"
    assert engine.image_labels(tag)["rocmci.base-image.digest"] == second

    # A base this engine does not hold is only a tag: no reuse key is made from it.
    missing = run_invoke("image.build", "--vllm-src", str(tree), env=env(repo, ROCMCI_BASE_IMAGE=f"{repo}:absent"))
    assert missing.returncode == 5
    last = missing.stderr.strip().splitlines()
    assert len(last) == 1 and last[0].startswith(f"rocmci: BASE_IMAGE {repo}:absent is not on this engine")
    assert "Refusing to compute content-addressed cache keys from a mutable tag" in last[0] and "--pull" in last[0]
    dry = run_invoke("image.build", "--vllm-src", str(tree), "-n", env=env(repo, ROCMCI_BASE_IMAGE=f"{repo}:absent"))
    assert dry.returncode == 0 and f"note: BASE_IMAGE {repo}:absent is not on this engine" in dry.stderr


def test_a_changed_base_dockerfile_rebuilds_base_then_ci_base_then_test(engine, python_image, scratch):
    tree, repo = scratch
    done = run_invoke("image.build", "--vllm-src", str(tree), "--target", "base", env=env(repo))
    assert done.returncode == 0, done.stderr[-3000:]
    base_tag = built(done.stderr)["base"]
    labels = engine.image_labels(base_tag)
    assert has_own_labels(engine, base_tag, repo)  # built FROM the shared base image: only extra_labels gives them
    assert len(labels["vllm.rocm_base.content_hash"]) == 64 and labels["vllm.rocm_base.dockerfile"] == (
        "docker/Dockerfile.rocm_base"
    )
    assert labels["vllm.rocm_base.base_image"] == python_image
    assert read(engine, base_tag, "cat", "/standin-base-torch") == "standin-torch-1"

    settings = env(repo, ROCMCI_BASE_IMAGE=base_tag)  # the published base, as rocm/vllm-dev:base would be
    first = run_invoke("image.build", "--vllm-src", str(tree), env=settings)
    assert first.returncode == 0, first.stderr[-3000:]
    assert set(built(first.stderr)) == {"ci_base", "test"}  # the base matches the file: not rebuilt
    test_tag = built(first.stderr)["test"]
    unchanged = run_invoke("image.build", "--vllm-src", str(tree), env=settings)
    assert unchanged.returncode == 0 and not built(unchanged.stderr) and unchanged.stderr.count("is up to date") == 2

    path = tree / "docker" / "Dockerfile.rocm_base"
    path.write_text(path.read_text().replace("standin base tier 1", "standin base tier 2"))
    changed = run_invoke("image.build", "--vllm-src", str(tree), env=settings)
    assert changed.returncode == 0, changed.stderr[-3000:]
    tiers = built(changed.stderr)
    assert list(tiers) == ["base", "ci_base", "test"] and tiers["test"] == test_tag and tiers["base"] != base_tag
    assert "was built from another docker/Dockerfile.rocm_base" in changed.stderr
    assert read(engine, test_tag, "cat", "/standin-base") == "standin base tier 2"
    again = run_invoke("image.build", "--vllm-src", str(tree), env=settings)
    assert again.returncode == 0 and not built(again.stderr) and again.stderr.count("is up to date") == 3


def test_retarget_dry_run_takes_the_pins_from_the_images_labels(engine, busybox_image, scratch):
    tree, repo = scratch
    source = f"{repo}:labelled"
    make_image(engine, repo, source, f"FROM {busybox_image}\nWORKDIR /vllm-workspace\n", "--label",
               "rocmci.deepep.ref=labelled-deepep", "--label", "vllm.rocm.rocshmem_commit=labelled-rocshmem",
               "--label", "rocmci.vllm.arch=gfx942;gfx950")  # fmt: skip
    argv = ("image.retarget", "--from", source, "--arch", "gfx950", "--vllm-src", str(tree), "-n")
    dry = run_invoke(*argv, env=env(repo))
    assert dry.returncode == 0, dry.stderr
    assert "DEEPEP_BRANCH=labelled-deepep" in dry.stdout and "ROCSHMEM_BRANCH=labelled-rocshmem" in dry.stdout
    assert "FROM_WORKDIR=/vllm-workspace" in dry.stdout  # the image's WORKDIR is put back
    assert "DEEPEP_NIC=cx7" in dry.stdout  # no label for it: the checkout's
    assert "the image's label rocmci.deepep.ref=labelled-deepep wins over standin-deepep-1" in dry.stderr
    assert re.search(r"DEEPEP_BRANCH\s+labelled-deepep\s+image label rocmci.deepep.ref", dry.stderr)
    chosen = run_invoke(*argv, env=env(repo, ROCMCI_DEEPEP_REF="chosen-ref"))
    assert chosen.returncode == 0 and "DEEPEP_BRANCH=chosen-ref" in chosen.stdout
    assert "env ROCMCI_DEEPEP_REF wins over the image's label rocmci.deepep.ref=labelled-deepep" in chosen.stderr

    narrow = f"{repo}:gfx942-only"
    make_image(engine, repo, narrow, f"FROM {busybox_image}\n", "--label", "vllm.rocm.pytorch_rocm_arch=gfx90a;gfx942")
    refused = run_invoke("image.retarget", "--from", narrow, "--arch", "gfx950", "--vllm-src", str(tree), "-n",
                         env=env(repo))  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"rocmci: {narrow} has vLLM kernels for gfx90a;gfx942 (label vllm.rocm.pytorch_rocm_arch), not for gfx950"
    )


def test_credentials_in_a_repository_url_are_refused_and_never_shown(scratch):
    tree, repo = scratch
    token = "ghp_" + "Zq8" * 12
    secret = {"ROCMCI_DEEPEP_REPO": f"https://oauth2:{token}@github.com/ROCm/DeepEP.git"}
    for argv in (("image.build", "-n"), ("image.build",), ("image.retarget", "--from", "rocm/vllm-ci:x", "-n")):
        done = run_invoke(*argv, "--vllm-src", str(tree), env=env(repo, **secret))
        assert done.returncode == 2, done.stderr
        assert token not in done.stdout + done.stderr and "oauth2" not in done.stdout + done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("rocmci: deepep_repo (env ROCMCI_DEEPEP_REPO) holds credentials in its URL "
                               "(https://***@github.com/ROCm/DeepEP.git)") and "BuildKit secret" in last
    shown = run_invoke("settings", "--json", env=env(repo, **secret, ROCMCI_ROCSHMEM_REPO=f"https://{token}@x.org/r"))
    assert shown.returncode == 0 and token not in shown.stdout and "https://***@x.org/r" in shown.stdout


def test_a_docker_client_that_cannot_run_is_one_line(scratch, tmp_path):
    tree, repo = scratch
    client = tmp_path / "docker"
    client.write_text("#!/bin/sh\n")
    os.chmod(client, 0o644)
    done = run_invoke("image.build", "--vllm-src", str(tree), env=env(repo, ROCMCI_DOCKER=str(client)))
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rocmci: docker client '{client}' cannot be run: Permission denied. set ROCMCI_DOCKER to an executable "
        "docker client (or auto), or fix its permissions"
    ]


def test_inspect_checks_the_reference_first_and_escapes_label_text(engine, busybox_image, scratch):
    tree, repo = scratch
    upper = run_invoke("image.inspect", "-t", "UPPER:tag")
    assert upper.returncode == 2 and "400 Client Error" not in upper.stderr
    assert upper.stderr.strip().splitlines()[0].startswith("rocmci: --tag 'UPPER:tag' has upper case in its repository")
    tag = f"{repo}:escapes"
    escapes = "rocmci.deepep.ref=a\x1b]0;owned\x07b"  # ESC, BEL
    make_image(engine, repo, tag, f"FROM {busybox_image}\n", "--label", escapes)
    assert "\x1b" in engine.image_labels(tag)["rocmci.deepep.ref"]
    shown = run_invoke("image.inspect", "-t", tag)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout and "a\\e]0;owned\\x07b" in shown.stdout


def test_a_registry_base_is_pinned_by_digest_and_pull_sees_the_tag_move(engine, python_image, scratch, registry):
    tree, repo = scratch
    remote = f"{registry}/rocmci-tiers/base:moving"

    def publish(marker: str) -> str:
        make_image(engine, repo, remote, f"FROM {python_image}\nRUN echo {marker} > /base-marker\n")
        engine.cli("push", remote, timeout=120)
        attrs = engine.image_attrs(remote)
        return next(d for d in attrs["RepoDigests"] if d.startswith(remote.rsplit(":", 1)[0])).split("@")[1]

    try:
        first = publish("one")
        settings = env(repo, ROCMCI_BASE_IMAGE=remote)
        dry = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", "-n", env=settings)
        assert dry.returncode == 0 and f"BASE_IMAGE={remote}@{first}" in dry.stdout  # as refresh-base-image.sh pins
        done = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=settings)
        assert done.returncode == 0, done.stderr[-3000:]
        tag = built(done.stderr)["ci_base"]
        assert engine.image_labels(tag)["rocmci.base-image.digest"] == first

        second = publish("two")  # the registry's tag moves; this engine's copy moves with the push too
        engine.cli("rmi", remote)  # forget it locally: only --pull can learn where the tag points now
        refused = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=settings)
        assert refused.returncode == 5 and "mutable tag" in refused.stderr
        pulled = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", "--pull", env=settings)
        assert pulled.returncode == 0, pulled.stderr[-3000:]
        assert built(pulled.stderr) == {"ci_base": tag} and second != first
        assert engine.image_labels(tag)["rocmci.base-image.digest"] == second
        assert read(engine, tag, "cat", "/base-marker") == "two"
    finally:
        engine.cli("rmi", "-f", remote, check=False)
