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




# --- a step too long for one argument of execve (MAX_ARG_STRLEN) --------------------------------------------


def _big_step_file(tmp_path: Path, commands: int) -> Path:
    lines = ["steps:", "- label: Big", "  timeout_in_minutes: 10", "  mirror_hardwares: [amdproduction]",
             "  agent_pool: mi325_1", "  source_file_dependencies: [vllm/]", "  commands:"]  # fmt: skip
    lines += [f"  - echo step-{i} with some words to make it long enough" for i in range(commands)]
    path = tmp_path / "steps.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_step_past_the_argument_limit_is_a_finding_at_its_line(tmp_path):
    steps = _big_step_file(tmp_path, 8000)
    done = _run(["pipeline.validate", "--source", str(steps)], tmp_path, ROCMCI_RESULTS_DIR=str(tmp_path / "r"))
    assert done.returncode == 1, done.stderr
    (finding,) = [line for line in done.stdout.splitlines() if "[argument-size]" in line]
    assert finding.startswith("steps.yaml:") and "over Linux's 131,072 bytes for one argument" in finding, finding
    small = _run(["pipeline.validate", "--source", str(_big_step_file(tmp_path, 100))], tmp_path)
    assert "[argument-size]" not in small.stdout


def test_a_child_past_the_argument_limit_is_refused_before_it_starts(tmp_path):
    from rocmci import process
    from rocmci.errors import UsageError

    marker = tmp_path / "started"
    script = f"open({str(marker)!r}, 'w').close()"
    with pytest.raises(UsageError, match=r"argument 3 of `python\S*` is 131,073 bytes; Linux takes at most 131,072"):
        process.stream([sys.executable, "-c", script, "x" * 131072], lambda line: None)
    with pytest.raises(UsageError, match=r"environment variable BIG is"):
        process.run_captured([sys.executable, "-c", script], timeout=10, env={"BIG": "y" * 131070})
    assert not marker.exists()
    process.stream([sys.executable, "-c", script, "x" * 131071], lambda line: None)  # at the limit: it runs
    assert marker.exists()
