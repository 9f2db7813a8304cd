"""The agent's pure parts: upload interpolation, the GPUs an agent owns, render devices, a pod as docker run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.errors import UsageError
from rocmci.gpus import Gpu
from rocmci.runs import agent
from rocmci.runs import pod as podmod
from rocmci.runs import steps as st


def test_interpolation_is_the_uploads():
    env = {"BUILDKITE_BUILD_ID": "b-1"}
    assert agent.interpolate("ci_base-build-$BUILDKITE_BUILD_ID", env) == "ci_base-build-b-1"
    assert agent.interpolate("${BUILDKITE_BUILD_ID}/$$HOME/$UNSET.", env) == "b-1/$HOME/."
    assert agent.interpolate("--shard-id=$$BUILDKITE_PARALLEL_JOB", env) == "--shard-id=$BUILDKITE_PARALLEL_JOB"


@pytest.mark.parametrize(
    ("queue", "expected", "owned"),
    [("amd_mi300_2", 1, 2), ("amd_mi325_8", 2, 8), ("amd_mi355_dpx", 1, 1), ("amd_mi250_4", 0, 0), ("x", 3, 3)],
)
def test_an_agent_owns_its_queues_gpus(queue, expected, owned):
    assert agent.agent_gpus(queue, expected) == owned


def test_render_devices_are_docker_words_under_the_host_root(tmp_path):
    gpus = [Gpu(0, 1, "gfx942", 128), Gpu(1, 2, "gfx942", 129)]
    assert agent.render_devices(gpus) == "--device /dev/dri/renderD128 --device /dev/dri/renderD129"
    assert agent.render_devices(gpus[:1], tmp_path) == f"--device {tmp_path}/dev/dri/renderD128:/dev/dri/renderD128"
    with pytest.raises(UsageError):
        agent.render_devices([Gpu(0, 1, "gfx942", None)])
    with pytest.raises(UsageError):
        agent.render_devices(gpus, Path("/a b"))


STEP = {
    "label": "mi300_2: X",
    "command": "bash run.sh",
    "agents": {"queue": "amd_mi300_2"},
    "timeout_in_minutes": 30,
    "parallelism": 3,
    "env": {"VLLM_CI_EXPECTED_GPU_COUNT": "2", "IMG": "ci-$BUILDKITE_BUILD_ID"},
    "plugins": [{"kubernetes": {"podSpecPatch": {
        "securityContext": {},
        "containers": [{
            "image": "base-build-$BUILDKITE_BUILD_ID",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}},
            "resources": {"limits": {"amd.com/gpu": "2"}},
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "ws", "mountPath": "/vllm-workspace"}],
            "env": [
                {"name": "A", "value": "1"},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
        }],
        "volumes": [
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "ws", "emptyDir": {}},
        ],
    }}}],
}  # fmt: skip


def test_a_job_carries_the_agents_env_and_the_uploaded_step():
    ids = agent.Ids("b-1", "j-1", "c" * 40, "main")
    job = agent.job(STEP, parallel_job=2, ids=ids, checkout="/co")
    assert job.env["IMG"] == "ci-b-1" and job.env["BUILDKITE_PARALLEL_JOB"] == "2"
    assert job.env["BUILDKITE_PARALLEL_JOB_COUNT"] == "3" and job.env["BUILDKITE_BUILD_CHECKOUT_PATH"] == "/workspace"
    assert (job.gpus, job.timeout_s, job.native) == (2, 1800, True)
    assert job.pod["image"] == "base-build-b-1"


def test_a_pod_becomes_one_docker_run():
    job = agent.job(STEP, parallel_job=None, ids=agent.Ids("b", "j", "c", "m"), checkout="/co")
    gpus = (Gpu(0, 1, "gfx942", 128), Gpu(1, 2, "gfx942", 129))
    host = podmod.Host("docker", "pod-x", "node", gpus, Path("/"), "/co", "/res", "/hf", "/bk", None, "/res/cid", "j")
    argv = podmod.run_argv(job, host, ("HF_TOKEN",))
    joined = " ".join(argv)
    assert "--shm-size 16g" in joined and "--mount type=volume,destination=/vllm-workspace" in joined
    assert "--device /dev/kfd --device /dev/dri/renderD128 --device /dev/dri/renderD129" in joined
    assert "--cap-add IPC_LOCK --security-opt no-new-privileges" in joined
    assert "--env A=1" in joined and "--env POD=pod-x" in joined and "--env HF_TOKEN --workdir" in joined
    assert argv[-5:] == ["base-build-b", "/bin/bash", "-e", "-c", "bash run.sh"]
    assert podmod.shm_size("1Ti") == "1024g" and podmod.shm_size("64Mi") == "64m"
    with pytest.raises(UsageError):
        podmod.shm_size("lots")


@pytest.mark.parametrize("raw", ["abc", "1.5", "-3", "0", True, "100000", "[1]"])
def test_parallelism_is_a_bounded_count(raw):
    step = st.Step("l", "l", "k", "f:1", False, 1, raw, "/w", "c", {})
    with pytest.raises(UsageError) as err:
        st.jobs(step, None)
    assert "not a count of jobs" in err.value.one_line()


def test_a_good_parallelism_runs_every_job():
    step = st.Step("l", "l", "k", "f:1", False, 1, "3", "/w", "c", {})
    assert st.jobs(step, None) == [0, 1, 2] and st.jobs(step, 1) == [1]
