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


def test_the_job_env_is_exactly_the_agents_and_the_steps():
    """Every variable the agent adds, in the agent's order, then the step's env as uploaded."""
    docker_path = {**STEP, "plugins": None}
    job = agent.job(docker_path, parallel_job=None, ids=agent.Ids("b-1", "j-1", "c0ffee", "feature/x"), checkout="/co")
    assert job.env == {
        "CI": "true", "BUILDKITE": "true", "BUILDKITE_BUILD_ID": "b-1", "BUILDKITE_JOB_ID": "j-1",
        "BUILDKITE_COMMIT": "c0ffee", "BUILDKITE_BRANCH": "feature/x", "BUILDKITE_LABEL": "mi300_2: X",
        "BUILDKITE_COMMAND": "bash run.sh", "BUILDKITE_BUILD_CHECKOUT_PATH": "/co",
        "BUILDKITE_AGENT_META_DATA_QUEUE": "amd_mi300_2", "BUILDKITE_PARALLEL_JOB": "0",
        "BUILDKITE_PARALLEL_JOB_COUNT": "3", "VLLM_CI_EXPECTED_GPU_COUNT": "2", "IMG": "ci-b-1",
    }  # fmt: skip
    assert (job.label, job.queue, job.command, job.gpus, job.timeout_s, job.pod, job.volumes) == (
        "mi300_2: X", "amd_mi300_2", "bash run.sh", 2, 1800, None, ()
    )  # fmt: skip
    bare = agent.job({"label": "l", "command": "c"}, parallel_job=None, ids=agent.Ids("b", "j", "c", "m"), checkout="/")
    assert (bare.gpus, bare.timeout_s, bare.queue, "BUILDKITE_PARALLEL_JOB" in bare.env) == (1, 10800, "", False)
    odd = {"label": "l", "command": "c", "timeout_in_minutes": "x", "env": {"VLLM_CI_EXPECTED_GPU_COUNT": "two"}}
    assert agent.job(odd, parallel_job=None, ids=agent.Ids("b", "j", "c", "m"), checkout="/").timeout_s == 10800


def test_a_pod_is_exactly_this_docker_run(tmp_path):
    job = agent.job(STEP, parallel_job=1, ids=agent.Ids("b", "j", "c", "m"), checkout="/co")
    gpus = (Gpu(0, 1, "gfx942", 128),)
    host = podmod.Host("dk", "pod-x", "node", gpus, tmp_path, "/co", "/res", "/hf", "/bk", "none", "/res/cid", "j",
                       image="mine:1")  # fmt: skip
    env = [f"{k}={v}" for k, v in podmod.env_of(job, host)]
    assert env[-4:] == ["A=1", "POD=pod-x", "VLLM_CI_DIAGNOSTICS_DIR=/rocmci-results/diagnostics",
                        "ROCMCI_AGENT_DIR=/rocmci-results/agent"]  # fmt: skip
    words = [w for e in env for w in ("--env", e)]
    assert podmod.run_argv(job, host, ("HF_TOKEN", "S")) == [
        "dk", "run", "--rm", "--name", "pod-x", "--cidfile", "/res/cid",
        "--label", "rocmci.job=j", "--label", "rocmci.managed=1", "--network", "none",
        "--shm-size", "16g", "--mount", "type=volume,destination=/vllm-workspace",
        "--device", f"{tmp_path}/dev/kfd:/dev/kfd", "--device", f"{tmp_path}/dev/dri/renderD128:/dev/dri/renderD128",
        "--cap-add", "IPC_LOCK", "--security-opt", "no-new-privileges",
        "--volume", "/co:/workspace:ro", "--volume", "/res:/rocmci-results",
        "--volume", "/bk:/usr/local/bin/buildkite-agent:ro", *words, "--env", "HF_TOKEN", "--env", "S",
        "--workdir", "/workspace", "mine:1", "/bin/bash", "-e", "-c", "bash run.sh",
    ]  # fmt: skip


def test_pod_settings_that_change_the_container():
    pod = {"image": "i", "securityContext": {"privileged": True, "runAsUser": 1000},
           "env": [{"name": "N", "value": None}],
           "volumeMounts": [{"name": "h", "mountPath": "/data"}, {"name": "gone"}]}  # fmt: skip
    job = agent.Job("l", "q", "c", {"HF_HOME": "/hf-home"}, 0, 60, pod, ({"name": "h", "hostPath": {"path": "/srv"}},))
    host = podmod.Host("d", "n", "node", (), Path("/"), "/co", "/r", "/cache", "/bk", None, "/cid", "j")
    argv = podmod.run_argv(job, host)
    assert "--network" not in argv and "/dev/kfd" not in argv and "--volume" in argv
    assert argv[argv.index("--privileged") + 1 : argv.index("--privileged") + 3] == ["--user", "1000"]
    assert "/srv:/data" in argv and "/cache:/hf-home" in argv and "N=" in argv
    with pytest.raises(UsageError):
        podmod.run_argv(agent.Job("l", "q", "c", {}, 0, 60, {"volumeMounts": [{"name": "p", "mountPath": "/p"}]},
                                  ({"name": "p", "persistentVolumeClaim": {}},)), host)  # fmt: skip
    bad_ref = {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
    with pytest.raises(UsageError):
        podmod.env_of(agent.Job("l", "q", "c", {}, 0, 60, bad_ref, ()), host)
