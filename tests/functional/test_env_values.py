"""Values from the environment and from rocmci's own settings validated at the edge like a flag (issue 32,
class 6): a results folder that would mount the workspace or home read-write into containers, an upper-case
--base-image, labels with a NUL or past docker's length, a step too long for one argument of execve."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.functional.test_host_runs import args, make_host

PROGRAM = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]


def _run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "BUILDKITE"))}
    full.update(env)
    return subprocess.run([*PROGRAM, *command], cwd=cwd, env=full, capture_output=True, text=True, timeout=120)


@pytest.fixture
def host(tmp_path) -> dict:
    return make_host(tmp_path)


@pytest.mark.parametrize(("given", "what"), [
    (".", "is the workspace"),
    ("./", "is the workspace"),
    ("..", "holds the workspace"),
    ("/", "holds the workspace"),
    ("~", "is your home folder"),
    ("WORKSPACE", "is the workspace"),
])  # fmt: skip
def test_a_results_folder_that_would_mount_the_workspace_or_home_is_refused(host, given, what):
    workspace = host["tree"]
    given = str(workspace) if given == "WORKSPACE" else given
    env = {**host["env"], "ROCMCI_RESULTS_DIR": given}
    done = _run(args(host, "--dry-run"), workspace, **env)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"rocmci: setting 'results_dir' (env ROCMCI_RESULTS_DIR) {what} ("), line
    assert "mounted read-write into workload containers" in line


def test_a_results_folder_of_its_own_is_accepted(host):
    done = _run(args(host, "--dry-run"), host["tree"], **{**host["env"], "ROCMCI_RESULTS_DIR": "results"})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("given", ["Rocm/dev-ubuntu-22.04:7.0", "rocm/DEV:latest", "docker.io/rocm/Dev@sha256:0"])
def test_an_upper_case_base_image_is_refused_like_tag_and_image(vllm_docker_tree, given):
    done = _run(["image.build", "-n", "--base-image", given], vllm_docker_tree)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"rocmci: setting 'base_image' from flag --base-image has upper case in its repository name, got {given!r}"
    )
    env = _run(["image.build", "-n"], vllm_docker_tree, ROCMCI_BASE_IMAGE=given)
    assert env.returncode == 2 and "from env ROCMCI_BASE_IMAGE has upper case" in env.stderr


def test_a_registry_host_may_be_upper_case(vllm_docker_tree):
    done = _run(["image.build", "-n", "--base-image", "REG.example:5000/rocm/dev:X"], vllm_docker_tree)
    assert "upper case" not in done.stderr


