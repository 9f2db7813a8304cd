"""image.build on the real engine, through the same code path as the real Dockerfile (BuildKit)."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import REPO, run_invoke

DATA = REPO / "tests" / "data" / "image"


@pytest.fixture
def repo(engine, busybox_image):
    """A unique image repository for one test; every image in it is removed afterwards."""
    name = f"rocmci-test/build-{uuid.uuid4().hex[:8]}"
    yield name
    refs = engine.cli("images", "-q", name, check=False).stdout.split()
    if refs:
        engine.cli("rmi", "-f", *set(refs), check=False)


def env_for(repo: str, dockerfile: str = "Dockerfile.fixture") -> dict[str, str]:
    return {
        "ROCMCI_DOCKERFILE": str(DATA / dockerfile),
        "ROCMCI_IMAGE_REPO": repo,
        "ROCMCI_BUILD_NETWORK": "none",
        "CI": "true",
    }


def containers(engine) -> set[str]:
    return set(engine.cli("ps", "-a", "-q").stdout.split())


def test_build_streams_progress_labels_and_args_reach_both_stages(engine, repo):
    done = run_invoke("image.build", env=env_for(repo))
    assert done.returncode == 0, done.stderr
    tag = f"{repo}:deepep-fixture1-gfx942-gfx950"
    assert f"built {tag}" in done.stderr
    assert "[final 3/3] RUN" in done.stderr and "fixture: built the DeepEP stand-in" in done.stderr
    labels = engine.image_labels(tag)
    assert labels["rocmci.arch"] == "gfx942;gfx950"
    assert labels["rocmci.deepep.ref"] == "fixture1" and labels["rocmci.rocshmem.ref"] == "fixture2"
    assert len(labels["rocmci.input-hash"]) == 16
    files = engine.cli(
        "run", "--rm", "--network", "none", tag, "cat", "/opt/rocshmem/targets", "/deepep-arch"
    ).stdout.split()
    assert files == ["GPU_TARGETS=gfx942;gfx950", "PYTORCH_ROCM_ARCH=gfx942;gfx950"]

    again = run_invoke("image.build", env=env_for(repo))
    assert again.returncode == 0 and "is up to date" in again.stderr and "built" not in again.stderr
    forced = run_invoke("image.build", "--force", env=env_for(repo))
    assert forced.returncode == 0 and f"built {tag}" in forced.stderr

    shown = run_invoke("image.inspect", tag)
    assert shown.returncode == 0, shown.stderr
    assert "gfx942;gfx950" in shown.stdout and labels["rocmci.input-hash"] in shown.stdout


def test_a_different_arch_list_is_a_different_image(engine, repo):
    done = run_invoke("image.build", "--arch", "gfx942", "--deepep-ref", "abc", env=env_for(repo))
    assert done.returncode == 0, done.stderr
    labels = engine.image_labels(f"{repo}:deepep-abc-gfx942")
    assert labels["rocmci.arch"] == "gfx942" and labels["rocmci.deepep.ref"] == "abc"


def test_failed_build_names_the_step_and_leaves_nothing(engine, repo):
    before = containers(engine)
    done = run_invoke("image.build", env=env_for(repo, "Dockerfile.fail"))
    assert done.returncode == 4
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith('rocmci: build failed at [final 3/3] RUN echo "fixture: about to fail" && exit 3')
    assert "exit code: 3" in last and "fixture: about to fail" in last
    assert "Traceback" not in done.stderr
    assert containers(engine) == before
    assert engine.image_labels(f"{repo}:deepep-fixture1-gfx942-gfx950") is None


def test_unsupported_arch_fails_before_any_build(engine, repo):
    done = run_invoke("image.build", "--arch", "gfx90a", env=env_for(repo))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "gfx942" in done.stderr and "gfx950" in done.stderr
    assert "#1 " not in done.stderr  # no build output at all


def test_engine_down_is_one_line(tmp_path, repo):
    done = run_invoke("image.build", env={**env_for(repo), "DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        "rocmci: the Docker engine is not running. start it (as root: dockerd --bridge=none --iptables=false &, "
        "or systemctl start docker) and retry"
    ]
