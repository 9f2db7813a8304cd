"""rocmci's `docker run` against the one in vLLM's run-amd-test.sh, read from the file itself.

Every flag, device, volume target and environment name of the runner's single-node `docker run`
must be in rocmci's command too, and the other way round, except the differences listed (with their
reasons) in runs/container.py INTENDED_DIFFERENCES, which README's list must match.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from rocmci.runs import container as ctr
from rocmci.runs import execute
from rocmci.runs import workloads as wl
from tests.conftest import REPO, SHARED_VLLM
from tests.unit.test_gpus import make_node

RUNNER = SHARED_VLLM / "buildkite" / "scripts" / "hardware_ci" / "run-amd-test.sh"


def _runner_text() -> str:
    if not RUNNER.is_file():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    return RUNNER.read_text()


def _array(text: str, name: str) -> list[str]:
    """The words of a bash array assignment `name=(...)` (the first one whose words are flags)."""
    for m in re.finditer(rf"^\s*{name}=\((.*)\)\s*$", text, re.M):
        words = shlex.split(m.group(1))
        if words and words[0].startswith("-"):
            return words
    raise AssertionError(f"no {name}=(...) in {RUNNER}")


def runner_docker_run(text: str) -> list[str]:
    """The single-node `docker run` of the runner as words, its flag-holding variables expanded."""
    start = text.index("run_docker_with_ci_timeout docker run")
    lines = []
    for line in text[start:].splitlines():
        lines.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    command = " ".join(lines).split("||")[0]
    rdma = re.search(r'RDMA_FLAGS="(--device[^"]*)"', text).group(1)
    expand = {
        '"${docker_run_terminal_args[@]}"': "-i -t",  # -t when ROCM_DOCKER_TTY=1, its default
        "$BUILDKITE_AGENT_META_DATA_RENDER_DEVICES": "--device /dev/dri/renderD128",
        "$RDMA_FLAGS": rdma,
        '"${coredump_flags[@]}"': shlex.join(_array(text, "coredump_flags")),
        '"${cpu_platform_env[@]}"': shlex.join(_array(text, "cpu_platform_env")),
    }
    for old, new in expand.items():
        assert old in command, f"the runner's docker run no longer uses {old}"
        command = command.replace(old, new)
    hf_mount = re.search(r'^HF_MOUNT="([^"$]+)"', text, re.M).group(1)  # the volume's target, as the runner sets it
    return shlex.split(command.replace("${HF_MOUNT}", hf_mount))


def features(argv: list[str]) -> set[str]:
    """Flags by name; devices by what they give the container; volumes by target; -e/--env by variable name."""
    out: set[str] = set()
    words = list(argv)
    i = words.index("run") + 1
    takes_value = {"--device", "--network", "--shm-size", "--group-add", "--ulimit", "-e", "--env", "-v",
                   "--volume", "--name", "--label", "--cap-add", "--workdir", "--memory"}  # fmt: skip
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            break  # the image; the rest is the command
        flag, _, inline = word.partition("=")
        value = inline if inline else (words[i + 1] if flag in takes_value else "")
        i += 1 if inline or flag not in takes_value else 2
        if flag in ("-e", "--env"):
            out.add(value.split("=", 1)[0])
        elif flag in ("-v", "--volume"):
            out.add(value.split(":")[1])
        elif flag == "--device":
            inside = value.split(":")[-1]
            out.add("--device " + ("/dev/dri" if inside.startswith("/dev/dri") else inside))
        elif flag == "--cap-add":
            out.add(f"--cap-add {value}")
        else:
            out.add(flag)
    return out


@pytest.fixture
def rdma_host(tmp_path) -> Path:
    make_node(tmp_path / "sys/class/kfd/kfd/topology/nodes", 1, 90402, render=128)
    (tmp_path / "dev/dri").mkdir(parents=True)
    (tmp_path / "dev/infiniband").mkdir()
    (tmp_path / "dev/kfd").write_text("")
    (tmp_path / "dev/dri/renderD128").write_text("")
    return tmp_path


def ours(host: Path) -> list[str]:
    opts = execute.RunOptions(
        image="img", results_dir=host / "results", timeout=60, network="host", shm_size="16g", memory=None,
        hf_cache=str(host / "hf"), workdir=wl.WORKSPACE, host_root=host,
    )  # fmt: skip
    workload = wl.Workload("w", "step", ("true",), gpus=1, needs_deepep=False)
    (run,) = execute.prepare([workload], opts, None).runs
    return ctr.run_argv(run.spec, "docker")


def test_the_runners_command_is_read_from_its_file():
    words = runner_docker_run(_runner_text())
    found = features(words)
    assert {"--device /dev/kfd", "--device /dev/infiniband", "--cap-add IPC_LOCK", "--ulimit", "HF_TOKEN",
            "PYTEST_TIMEOUT", "TMPDIR", "BUILDKITE_PARALLEL_JOB_COUNT"} <= found  # fmt: skip


def test_every_difference_from_the_runner_is_intended(rdma_host):
    runner = features(runner_docker_run(_runner_text()))
    mine = features(ours(rdma_host))
    differences = (runner - mine) | (mine - runner)
    assert differences == set(ctr.INTENDED_DIFFERENCES), {
        "unlisted": sorted(differences - set(ctr.INTENDED_DIFFERENCES)),
        "listed but gone": sorted(set(ctr.INTENDED_DIFFERENCES) - differences),
    }


def test_no_seccomp_override_and_the_runners_core_limit(rdma_host):
    argv = ours(rdma_host)
    assert "--security-opt" not in argv  # the runner sets none; native pods use RuntimeDefault
    assert argv[argv.index("--ulimit") + 1].startswith("core=0:")


def test_the_docs_list_every_intended_difference():
    runs = (REPO / "docs" / "runs.md").read_text()
    section = runs[runs.index("Intended differences from upstream's runner") :]
    section = section[: section.index("\n## ")]
    missing = [key for key in ctr.INTENDED_DIFFERENCES if f"`{key}`" not in section]
    assert missing == []


def test_per_job_folders_and_hang_handling_as_the_runner(rdma_host):
    text = _runner_text()
    argv = ours(rdma_host)
    env = dict(a.split("=", 1) for a in argv[1:] if "=" in a and a.split("=", 1)[0].isupper())
    assert env["PYTEST_TIMEOUT"] == re.search(r': "\$\{PYTEST_TIMEOUT:=(\d+)\}"', text).group(1)
    assert env["PYTHONFAULTHANDLER"] == re.search(r': "\$\{PYTHONFAULTHANDLER:=(\d+)\}"', text).group(1)
    assert "-o faulthandler_timeout=1500" in env["PYTEST_ADDOPTS"] and "-o faulthandler_timeout=1500" in text
    job = env["TMPDIR"].split("/")[2].removeprefix("vllm-")
    assert env["TMPDIR"] == f"/tmp/vllm-{job[:8]}/tmp"
    assert 'CONTAINER_TMPDIR="/tmp/vllm-${container_job_id_short}"' in text
    assert env["HF_HUB_DOWNLOAD_TIMEOUT"] == "300" and env["HF_HUB_ETAG_TIMEOUT"] == "60"
