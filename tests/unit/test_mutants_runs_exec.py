"""runs/container and runs/execute, promise by promise (issue 24: mutants that no test caught).

In-process and without Docker unless marked: container specs and argv are pure, host-mode runs are real
processes of this host, and the docker client of `run_container` is a stand-in script at the process
boundary (what it is given, what it prints and its exit code are what a real client would show).
"""

from __future__ import annotations

import grp
import os
import re
import resource
import signal
import sys
import time
from pathlib import Path

import pytest

from rocmci import labels as label
from rocmci.engine import Engine
from rocmci.errors import EngineError, InputError, PreflightError, WorkloadError
from rocmci.gpus import Gpu
from rocmci.runs import container as ctr
from rocmci.runs import execute as runs
from rocmci.runs import results as res
from rocmci.runs import workloads as wl
from rocmci.runs.types import PlannedRun, Prepared
from tests.functional.test_host_runs import fake_host
from tests.unit.test_runs import options

PY = sys.executable
ONE_GPU_POD = (
    "VLLM_CI_EXPECTED_GPU_COUNT=1: this pod has 1 GPU, the run needs 2. give the step num_gpus for what the run needs"
)
SECRET = "s3cr3t-canary-77c1a0e4"


def workload(
    name: str = "w", *, gpus: int = 1, group: str | None = None, argv=("python3", "t.py"), **kw
) -> wl.Workload:
    return wl.Workload(name=name, kind=kw.pop("kind", "moe-tests"), argv=tuple(argv), gpus=gpus, group=group, **kw)


def gpu(index: int, render: int | None = None) -> Gpu:
    return Gpu(index, index + 1, "gfx942", 128 + index if render is None else render)


# --- container.py: names, devices, limits, groups -------------------------------------------------------------


def test_container_names_are_unique_with_ten_hex_digits():
    """Every container gets a unique name: rocmci-<kind>-<10 hex>, found again by that name."""
    names = {ctr.container_name("probe") for _ in range(50)}
    assert len(names) == 50
    assert all(re.fullmatch(r"rocmci-probe-[0-9a-f]{10}", n) for n in names), names


def test_the_core_ulimit_keeps_the_hosts_hard_limit():
    """As the runner: no core files (soft 0), the host's hard limit kept, -1 for unlimited."""
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    expected = "-1" if hard == resource.RLIM_INFINITY else str(hard)
    assert ctr.core_ulimit() == f"core=0:{expected}"
    soft_before = resource.getrlimit(resource.RLIMIT_CORE)
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 4096))  # lowering needs no privilege
        assert ctr.core_ulimit() == "core=0:4096"
    finally:
        try:
            resource.setrlimit(resource.RLIMIT_CORE, soft_before)
        except (ValueError, OSError):  # raising it back needs root; this process keeps the lower limit
            pass


def test_rdma_devices_and_ipc_lock_only_with_dev_infiniband(tmp_path):
    """The host's RDMA devices and IPC_LOCK reach the container when /dev/infiniband exists, as the runner."""
    assert ctr.rdma_flags(tmp_path) == ((), ())
    (tmp_path / "dev/infiniband").mkdir(parents=True)
    assert ctr.rdma_flags(tmp_path) == (((f"{tmp_path}/dev/infiniband", "/dev/infiniband"),), ("IPC_LOCK",))
    (tmp_path / "dev/infiniband").rmdir()
    (tmp_path / "dev/infiniband").write_text("")  # a file is no device folder
    assert ctr.rdma_flags(tmp_path) == ((), ())


def test_group_ids_are_numeric_and_unknown_groups_are_skipped():
    """--group-add gets numeric gids (the image need not know the host's names); a missing group is skipped."""
    root_name = grp.getgrgid(0).gr_name
    assert ctr.host_gids(("no-such-group-rocmci", root_name, "no-such-group-2")) == ("0",)
    assert ctr.host_gids(()) == ()
    known = {g.gr_name: str(g.gr_gid) for g in grp.getgrall()}
    assert ctr.host_gids() == tuple(known[n] for n in ("render", "video") if n in known)


def test_device_flags_map_a_render_node_under_any_root_and_name_the_gpu_without_one(tmp_path):
    """The render node under the host root, at its own path inside; a GPU without one is a preflight error."""
    assert ctr.device_flags([Gpu(1, 2, "gfx942", 129)], tmp_path) == (
        (f"{tmp_path}/dev/kfd", "/dev/kfd"),
        (f"{tmp_path}/dev/dri/renderD129", "/dev/dri/renderD129"),
    )
    with pytest.raises(PreflightError) as err:
        ctr.device_flags([Gpu(0, 1, "gfx942", 128), Gpu(5, 6, "gfx90a", None)], tmp_path)
    assert err.value.one_line() == "GPU 5 (gfx90a) has no render node in KFD sysfs"


def test_run_argv_with_a_memory_limit_and_defaults():
    """--memory only when set, 16g shm by default, no --network when none is chosen, rw volumes without :ro."""
    spec = ctr.ContainerSpec(image="i", argv=("a", "b"), workdir="/w", memory="64g", name="n",
                             mounts=(ctr.Mount("/h", "/c"),), devices=(("/x", "/x"),))  # fmt: skip
    assert ctr.run_argv(spec, "/usr/bin/docker") == [
        "/usr/bin/docker", "run", "--init", "--name", "n", "--label", "rocmci.managed=1",
        "--device", "/x", "--shm-size", "16g", "--memory", "64g", "--volume", "/h:/c",
        "--workdir", "/w", "i", "a", "b",
    ]  # fmt: skip
    plain = ctr.ContainerSpec(image="i", argv=(), workdir="/w", name="n", shm_size="1g")
    assert ctr.run_argv(plain, "d") == [
        "d", "run", "--init", "--name", "n", "--label", "rocmci.managed=1", "--shm-size", "1g", "--workdir", "/w", "i"
    ]  # fmt: skip
    result = ctr.RunResult(0, False, 1.0, 2.0)
    assert (result.infra_error, result.oom_killed) == (None, False)


# --- container.py: host mode -----------------------------------------------------------------------------------


def test_run_host_runs_in_the_workdir_with_exactly_the_env_given(tmp_path):
    """Host mode: the workload's whole environment is the one given, in the workdir, its exit code kept."""
    lines: list[str] = []
    script = (
        "import os, sys; print(os.getcwd()); print(sorted(os.environ)); print(os.getpgrp() == os.getpid()); sys.exit(3)"
    )
    done = ctr.run_host([PY, "-c", script], workdir=str(tmp_path), env={"ONLY": "1"}, timeout=60, on_line=lines.append)
    assert (done.exit_code, done.timed_out, done.infra_error, done.oom_killed) == (3, False, None, False)
    assert lines[0] == str(tmp_path)
    assert lines[1] in ("['ONLY']", "['LC_CTYPE', 'ONLY']")  # Python may set LC_CTYPE itself
    assert lines[2] == "True"  # a process group of its own
    assert done.seconds > 0


def test_run_host_times_out(tmp_path):
    """A run past its timeout is stopped and says so."""
    done = ctr.run_host([PY, "-c", "import time; time.sleep(60)"], workdir=str(tmp_path), env={}, timeout=0.5,
                        on_line=lambda _: None)  # fmt: skip
    assert done.timed_out is True and done.exit_code != 0 and done.infra_error is None


@pytest.mark.parametrize("missing", ["program", "folder"])
def test_run_host_that_cannot_start_is_an_infrastructure_result(tmp_path, missing):
    """A program or workdir that is not there: exit 127 and one line naming them, not a traceback."""
    program = str(tmp_path / "nope") if missing == "program" else PY
    workdir = str(tmp_path) if missing == "program" else str(tmp_path / "gone")
    done = ctr.run_host([program, "x"], workdir=workdir, env={}, timeout=10, on_line=lambda _: None)
    assert (done.exit_code, done.timed_out, done.seconds) == (127, False, 0.0)
    assert done.infra_error == f"cannot start {program!r} in {workdir}: No such file or directory"


# --- container.py: run_container, with a stand-in docker client -----------------------------------------------


def stand_in_client(tmp_path: Path, body: str) -> Engine:
    """A docker client script: records its argv and HF_TOKEN, then does what `body` says."""
    client = tmp_path / "docker"
    client.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {tmp_path}/argv\n'
        f'printf "%s" "${{HF_TOKEN-unset}}" > {tmp_path}/token\n' + body
    )
    client.chmod(0o755)
    engine = Engine(str(client))
    return engine


def test_run_container_gives_the_client_the_argv_env_and_lines(tmp_path):
    """The client gets run_argv and the environment given (pass-by-name values); its lines and code come back."""
    engine = stand_in_client(tmp_path, "echo one\necho two\nexit 7\n")
    spec = ctr.ContainerSpec(
        image="img", argv=("true",), workdir="/", name="rocmci-t-0123456789", pass_env=("HF_TOKEN",)
    )
    lines: list[str] = []
    done = ctr.run_container(
        spec, engine, timeout=30, on_line=lines.append, env={"HF_TOKEN": SECRET, "PATH": "/bin:/usr/bin"}
    )
    assert lines == ["one", "two"]
    assert (done.exit_code, done.timed_out, done.infra_error, done.oom_killed) == (7, False, None, False)
    assert done.seconds > 0
    assert (tmp_path / "argv").read_text().splitlines() == ctr.run_argv(spec, str(tmp_path / "docker"))[1:]
    assert (tmp_path / "token").read_text() == SECRET


def test_run_container_exit_125_is_dockers_own_failure(tmp_path):
    """Exit 125 is docker failing to start the container: an infrastructure error, not a test failure."""
    engine = stand_in_client(tmp_path, "exit 125\n")
    spec = ctr.ContainerSpec(image="img", argv=(), workdir="/", name="rocmci-t-125")
    done = ctr.run_container(spec, engine, timeout=30, on_line=lambda _: None)
    assert (done.exit_code, done.timed_out, done.oom_killed) == (125, False, False)
    assert done.infra_error == "docker could not start the container (exit 125)"
    other = stand_in_client(tmp_path, "exit 126\n")
    assert ctr.run_container(spec, other, timeout=30, on_line=lambda _: None).infra_error is None


def test_run_container_timeout_is_not_an_oom_or_an_infra_error(tmp_path):
    """A timed-out run: timed_out, no OOM claimed, even when the client's code is 125."""
    engine = stand_in_client(tmp_path, "sleep 30 >/dev/null 2>&1 &\ntrap 'kill $!; exit 125' TERM\nwait\n")
    spec = ctr.ContainerSpec(image="img", argv=(), workdir="/", name="rocmci-t-timeout")
    done = ctr.run_container(spec, engine, timeout=0.5, on_line=lambda _: None)
    assert done.timed_out is True and done.oom_killed is False
    assert done.infra_error is None


def test_run_container_with_a_client_that_cannot_run(tmp_path):
    """A client that is no executable: exit 127, nothing ran, one line naming the client and why."""
    client = tmp_path / "docker"
    client.write_text("#!/bin/sh\nexit 0\n")
    client.chmod(0o644)
    engine = Engine(str(client))
    spec = ctr.ContainerSpec(image="img", argv=(), workdir="/", name="rocmci-t-noexec")
    done = ctr.run_container(spec, engine, timeout=10, on_line=lambda _: None)
    assert (done.exit_code, done.timed_out, done.seconds, done.oom_killed) == (127, False, 0.0, False)
    assert done.infra_error == f"docker client {str(client)!r} could not be started: Permission denied"


# --- execute.py: planning -------------------------------------------------------------------------------------


def test_waves_group_consecutive_shards_only():
    """Shards of one mode run at once; modes, and workloads without a group, one after the other."""
    a1, a2 = workload("a1", group="a"), workload("a2", group="a")
    b1, b2 = workload("b1", group="b"), workload("b2", group="b")
    n1, n2 = workload("n1"), workload("n2")
    names = [[w.name for w in wave] for wave in runs.waves([n1, n2, a1, a2, b1, b2, workload("a3", group="a")])]
    assert names == [["n1"], ["n2"], ["a1", "a2"], ["b1", "b2"], ["a3"]]
    assert runs.waves([]) == []


def test_host_gpus_in_host_mode_are_those_with_a_render_node(tmp_path):
    """KFD sysfs under the host root; host mode keeps only GPUs whose render node exists there, renumbered."""
    root = fake_host(tmp_path)
    (root / "dev/dri/renderD129").unlink()
    assert [(g.index, g.render_minor) for g in runs.host_gpus(options(root))] == [
        (0, 128),
        (1, 129),
        (2, 130),
        (3, 131),
    ]
    assert [(g.index, g.render_minor) for g in runs.host_gpus(options(root, no_container=True))] == [
        (0, 128), (1, 130), (2, 131)
    ]  # fmt: skip


def test_named_gpus_go_ahead_anyway_under_skip_preflight_or_dry_run(tmp_path):
    """Skipped or dry: each run gets its share of the GPUs named, unknown ones shown as such."""
    root = fake_host(tmp_path, gpus=2)
    gpus = runs.host_gpus(options(root))
    for flag in ("dry_run", "skip_preflight"):
        opts = options(root, gpus=(1, 7, 0, 9), no_container=True, **{flag: True})
        sets, warnings = runs.preflight([workload(gpus=2, group="g")] * 2, opts, None, gpus, {})
        assert [[(g.index, g.node, g.arch, g.render_minor) for g in s] for s in sets] == [
            [(1, 2, "gfx942", 129), (7, -1, "unknown", None)], [(0, 1, "gfx942", 128), (9, -1, "unknown", None)]
        ]  # fmt: skip
        assert warnings == ["no GPU 7 on this host (found 2)"]
    # A container needs the render node: unknown GPUs are left out there.
    opts = options(root, gpus=(1, 7, 0), skip_preflight=True)
    sets, _ = runs.preflight([workload(gpus=1, group="g"), workload(gpus=1, group="g")], opts, None, gpus, {})
    assert [[g.index for g in s] for s in sets] == [[1], [0]]


def test_without_named_gpus_a_skipped_preflight_gives_empty_sets(tmp_path):
    """Too few GPUs and no --gpus: warnings, and each run of the widest wave gets no GPU (all of /dev/dri)."""
    root = fake_host(tmp_path, gpus=1)
    opts = options(root, skip_preflight=True)
    sets, warnings = runs.preflight([workload(gpus=2, group="g"), workload(gpus=2, group="g")], opts, None,
                                    runs.host_gpus(opts), {})  # fmt: skip
    assert sets == [[], []]
    assert warnings == [
        "2 runs of 2 GPUs: together they need 4 GPUs, this host offers 1. use fewer --shards or a bigger host"
    ]
    # Not skipped: the same problem stops the run (exit 5), named GPUs or not.
    with pytest.raises(PreflightError) as err:
        runs.preflight([workload(gpus=2)], options(root, gpus=(0,)), None, runs.host_gpus(opts), {})
    assert err.value.one_line() == (
        "1 run of 2 GPUs: together they need 2 GPUs, this host offers 1. use a host with more GPUs, or ask for fewer"
    )


def test_preflight_sizes_need_and_width_from_the_widest_wave(tmp_path):
    """GPUs per run from the hungriest workload, runs at once from the widest wave (defaults: 1 and 1)."""
    root = fake_host(tmp_path)
    gpus = runs.host_gpus(options(root))
    load = [workload("a", gpus=1), workload("b1", gpus=2, group="b"), workload("b2", gpus=1, group="b")]
    sets, warnings = runs.preflight(load, options(root), None, gpus, {})
    assert [[g.index for g in s] for s in sets] == [[0, 1], [2, 3]] and warnings == []
    sets, _ = runs.preflight([], options(root), None, gpus, {})
    assert [[g.index for g in s] for s in sets] == [[0]]


def test_the_pods_gpu_count_messages(tmp_path):
    """VLLM_CI_EXPECTED_GPU_COUNT in host mode: the pod's count against what all shards need, with the right hint."""
    root = fake_host(tmp_path)
    opts = options(root, no_container=True)
    gpus = runs.host_gpus(opts)
    with pytest.raises(PreflightError) as err:
        runs.preflight([workload(gpus=2, group="g"), workload(gpus=2, group="g")], opts, None, gpus,
                       {"VLLM_CI_EXPECTED_GPU_COUNT": "3"})  # fmt: skip
    assert err.value.one_line() == (
        "VLLM_CI_EXPECTED_GPU_COUNT=3: this pod has 3 GPUs, the run needs 4. "
        "give the step num_gpus for every shard, or use fewer --shards"
    )
    with pytest.raises(PreflightError) as err:
        runs.preflight([workload(gpus=2)], opts, None, gpus, {"VLLM_CI_EXPECTED_GPU_COUNT": "1"})
    assert err.value.one_line() == (ONE_GPU_POD)
    # Exactly enough is enough; unset is no limit; container mode does not read it.
    for environ in ({"VLLM_CI_EXPECTED_GPU_COUNT": "4"}, {}):
        sets, warnings = runs.preflight([workload(gpus=2, group="g")] * 2, opts, None, gpus, environ)
        assert warnings == [] and [[g.index for g in s] for s in sets] == [[0, 1], [2, 3]]
    sets, warnings = runs.preflight([workload(gpus=2)], options(root), None, gpus, {"VLLM_CI_EXPECTED_GPU_COUNT": "1"})
    assert warnings == [] and [[g.index for g in s] for s in sets] == [[0, 1]]


def test_preflight_reads_the_pods_gpu_count_from_the_process_environment(tmp_path, monkeypatch):
    """Without an explicit environment, rocmci's own (the CI job's) is read."""
    root = fake_host(tmp_path)
    opts = options(root, no_container=True, dry_run=True)
    monkeypatch.setenv("VLLM_CI_EXPECTED_GPU_COUNT", "1")
    _, warnings = runs.preflight([workload(gpus=2)], opts, None, runs.host_gpus(opts))
    assert warnings == [ONE_GPU_POD]


def test_every_problem_is_a_warning_in_a_dry_run_and_the_first_one_stops_a_real_run(tmp_path):
    """A dry run lists each problem in order; a real run raises the first."""
    root = fake_host(tmp_path, gpus=1)
    (root / "dev/kfd").unlink()
    opts = options(root, dry_run=True, no_container=True)
    _, warnings = runs.preflight(
        [workload(gpus=2)], opts, None, runs.host_gpus(opts), {"VLLM_CI_EXPECTED_GPU_COUNT": "1"}
    )
    assert warnings == [
        "/dev/kfd is missing: no AMD GPU driver on this host. run on an AMD GPU host with ROCm",
        ONE_GPU_POD,
        "1 run of 2 GPUs: together they need 2 GPUs, this host offers 1. use a host with more GPUs, or ask for fewer",
    ]
    with pytest.raises(PreflightError, match="^/dev/kfd is missing"):
        runs.preflight([workload(gpus=2)], options(root, no_container=True), None, [], {})
    both = options(root, no_container=True, dry_run=True, skip_preflight=True)
    assert len(runs.preflight([workload(gpus=2)], both, None, [], {})[1]) == 2


def test_an_engine_that_cannot_answer_stops_a_real_run_and_is_a_warning_in_a_dry_run(tmp_path, monkeypatch):
    """The image cannot be checked: a real run stops with the engine's error; a dry run says so and goes on."""
    root = fake_host(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    gpus = runs.host_gpus(options(root))
    with pytest.raises(EngineError) as err:
        runs.preflight([workload()], options(root, skip_preflight=True), Engine("auto"), gpus, {})
    assert err.value.one_line().startswith("the Docker engine is not running")
    notes: list[str] = []
    sets, warnings = runs.preflight([workload()], options(root, dry_run=True), Engine("auto"), gpus, {}, notes)
    assert warnings == ["image img:1 not checked: the Docker engine is not running"] and notes == []
    assert [[g.index for g in s] for s in sets] == [[0]]
    # Host mode never asks the engine about the image.
    _, warnings = runs.preflight([workload()], options(root, no_container=True), Engine("auto"), gpus, {})
    assert warnings == []


def test_a_container_spec_is_the_runners_docker_run(tmp_path, monkeypatch):
    """spec_for: the runner's per-job env, the workload's, --env values (secrets by name), devices, mounts."""
    for name in ("BUILDKITE_JOB_ID", "BUILDKITE_PARALLEL_JOB", "HF_TOKEN", "PYTEST_ADDOPTS", "PYTEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    root = fake_host(tmp_path)
    (root / "dev/infiniband").mkdir()
    opts = options(root, env={"PLAIN": "hidden", "MY_SECRET": SECRET, "AWS_ACCESS_KEY_ID": "x" * 20,
                              "BUILDKITE_PARALLEL_JOB": "3", "OWN": "2", "SHOWN": "yes"}, public=frozenset({"SHOWN"}),
                   network="host", memory="8g", shm_size="2g", hf_cache="~/hfc")  # fmt: skip
    load = workload("moe", argv=("python3", "-m", "pytest"), env={"OWN": "1", "PYTORCH_ROCM_ARCH": "gfx942"})
    spec = runs.spec_for(load, [gpu(2)], opts, 0)
    assert re.fullmatch(r"rocmci-moe-tests-[0-9a-f]{10}", spec.name)
    job = spec.name.rsplit("-", 1)[-1]
    assert spec.env == {
        **wl.container_env(job, {}), "PYTORCH_ROCM_ARCH": "gfx942", "PYTHONPATH": "/vllm-workspace", "SHOWN": "yes",
    }  # fmt: skip
    assert spec.env["TMPDIR"] == f"/tmp/vllm-{job[:8]}/tmp"
    # Every --env value by name, once (the workload's own OWN=1 gives way to --env's), but the --public one:
    # no value given on rocmci's command line reaches docker's.
    assert spec.pass_env == (
        "HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "BUILDKITE_PARALLEL_JOB",
        "BUILDKITE_PARALLEL_JOB_COUNT", "MY_SECRET", "OWN", "PLAIN",
    )  # fmt: skip
    argv = ctr.run_argv(spec, "docker")
    assert not [a for a in argv if "hidden" in a or SECRET in a or a == "OWN=1"] and "SHOWN=yes" in argv
    assert spec.devices == (
        (f"{root}/dev/kfd", "/dev/kfd"), (f"{root}/dev/dri/renderD130", "/dev/dri/renderD130"),
        (f"{root}/dev/infiniband", "/dev/infiniband"),
    )  # fmt: skip
    assert spec.cap_add == ("IPC_LOCK",)
    assert spec.mounts == (
        ctr.Mount(str(Path.home() / "hfc"), "/root/.cache/huggingface"),
        ctr.Mount(str((root / "results").resolve()), "/rocmci-results"),
    )
    assert (spec.image, spec.workdir, spec.network, spec.memory, spec.shm_size) == (
        "img:1",
        "/vllm-workspace",
        "host",
        "8g",
        "2g",
    )
    assert spec.labels == {label.WORKLOAD: "moe-tests"}
    assert spec.ulimits == (ctr.core_ulimit(),) and spec.group_add == ctr.host_gids()
    assert spec.argv == wl.in_container(("python3", "-m", "pytest"))
    # The job id the runner would use: Buildkite's, made safe for a path.
    monkeypatch.setenv("BUILDKITE_JOB_ID", "01a/b")
    assert runs.spec_for(load, [gpu(2)], opts, 0).env["TMPDIR"] == "/tmp/vllm-01a_b/tmp"


def test_a_sharded_container_spec_and_a_step_spec(tmp_path, monkeypatch):
    """A shard gets the plugin mount (read-only), its ports and PYTHONPATH; a pipeline step runs its argv as is."""
    monkeypatch.delenv("BUILDKITE_JOB_ID", raising=False)
    monkeypatch.delenv("BUILDKITE_PARALLEL_JOB", raising=False)
    root = fake_host(tmp_path)
    shard = workload("s", argv=("python3", "-m", "pytest", "-p", "rocmci_shard"))
    spec = runs.spec_for(shard, [gpu(0), gpu(1)], options(root), 1)
    assert spec.mounts[2] == ctr.Mount(str(runs.PLUGINS), "/rocmci-plugins", readonly=True) and len(spec.mounts) == 3
    assert spec.env["PYTHONPATH"] == "/vllm-workspace:/rocmci-plugins"
    assert (spec.env["MASTER_PORT"], spec.env["VLLM_PORT"]) == ("29600", "29610")
    assert spec.devices[1:] == (("/".join([str(root), "dev/dri/renderD128"]), "/dev/dri/renderD128"),
                                (f"{root}/dev/dri/renderD129", "/dev/dri/renderD129"))  # fmt: skip
    assert spec.cap_add == ()
    step = workload("step", kind="step", argv=("bash", "-c", "pytest -v x"))
    assert runs.spec_for(step, [], options(root), 0).argv == ("bash", "-c", "pytest -v x")
    assert runs.spec_for(step, [], options(root), 0).devices == (
        (f"{root}/dev/kfd", "/dev/kfd"),
        (f"{root}/dev/dri", "/dev/dri"),
    )


def test_host_env_is_the_runners_plus_the_workload_and_the_visible_gpus(tmp_path, monkeypatch):
    """host_env_for: runner defaults, PYTHONPATH (plus the plugins for a shard), the GPUs visible, plain --env."""
    for name in (
        "PYTEST_ADDOPTS",
        "PYTEST_TIMEOUT",
        "HF_HUB_DOWNLOAD_TIMEOUT",
        "HF_HUB_ETAG_TIMEOUT",
        "PYTHONFAULTHANDLER",
    ):
        monkeypatch.delenv(name, raising=False)
    root = fake_host(tmp_path)
    opts = options(root, no_container=True, workdir=str(tmp_path), env={"PLAIN": "p", "MY_SECRET": SECRET})
    shard = workload("s", argv=("python3", "-m", "pytest", "-p", "rocmci_shard"), env={"OWN": "1"})
    planned = runs.plan_run(shard, [gpu(2), gpu(3)], opts, 1)
    assert (planned.workload, planned.spec) == (shard, None)  # slot 1: its ports below
    assert [g.index for g in planned.gpus] == [2, 3]
    assert planned.env == {
        **wl.runner_defaults({}), "PYTORCH_ROCM_ARCH": "", "PYTHONPATH": f"{tmp_path}:{runs.PLUGINS}", "OWN": "1",
        "ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "0,1",
        "MASTER_PORT": "29600", "VLLM_PORT": "29610", "PLAIN": "p",
    }  # fmt: skip
    monkeypatch.setenv("PYTEST_TIMEOUT", "99")  # the host's own value wins, as in the runner
    plain = runs.plan_run(workload("w"), [], opts, 0)
    assert plain.env["PYTEST_TIMEOUT"] == "99" and plain.env["PYTHONPATH"] == str(tmp_path)
    assert "MASTER_PORT" not in plain.env and "ROCR_VISIBLE_DEVICES" not in plain.env


def test_prepare_plans_each_wave_with_its_gpu_sets_and_keeps_every_note(tmp_path):
    """prepare: waves of planned runs on disjoint GPU sets, the preflight's warnings, the caller's notes."""
    root = fake_host(tmp_path)
    load = [workload("a", gpus=2), workload("b1", gpus=2, group="b"), workload("b2", gpus=2, group="b")]
    prepared = runs.prepare(load, options(root, no_container=True), None, notes=["note 1", "note 2"])
    assert [[(r.workload.name, [g.index for g in r.gpus]) for r in wave] for wave in prepared.waves] == [
        [("a", [0, 1])], [("b1", [0, 1]), ("b2", [2, 3])]
    ]  # fmt: skip
    assert [r.env["ROCR_VISIBLE_DEVICES"] for r in prepared.runs] == ["0,1", "0,1", "2,3"]
    assert (prepared.warnings, prepared.notes, prepared.files) == ([], ["note 1", "note 2"], [])
    dry = runs.prepare([workload(gpus=8)], options(root, dry_run=True), None)
    assert dry.warnings == [
        "1 run of 8 GPUs: together they need 8 GPUs, this host offers 4. use a host with more GPUs, or ask for fewer"
    ]
    assert dry.runs[0].spec is not None and dry.runs[0].gpus == []


def test_the_redactor_hides_known_secrets_and_every_env_value_but_public_ones(monkeypatch):
    """Every printed line: secrets of rocmci's environment and every --env value masked, --public names shown."""
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz123456")
    monkeypatch.setenv("MY_API_TOKEN", "plain-words-no-shape")  # secret by its name only
    opts = options(
        Path("/"), env={"MODEL_PATH": "private-model-path", "SHOWN": "public-value-1"}, public=frozenset({"SHOWN"})
    )
    redact = runs.redactor(opts)
    assert redact("a hf_abcdefghijklmnopqrstuvwxyz123456 b private-model-path c public-value-1") == (
        "a *** b *** c public-value-1"
    )
    assert redact("token plain-words-no-shape") == "token ***"


def test_the_docker_clients_environment_carries_the_env_values_passed_by_name(monkeypatch):
    """--env values reach `docker run` by name, from the client's environment; a --public one is on its argv."""
    monkeypatch.setenv("ROCMCI_SOMETHING", "kept")
    opts = options(Path("/"), env={"MY_SECRET": SECRET, "PLAIN": "p", "SHOWN": "s"}, public=frozenset({"SHOWN"}))
    client_env = runs._client_env(opts)
    assert client_env == {**os.environ, "MY_SECRET": SECRET, "PLAIN": "p"}


def test_a_log_that_cannot_be_written_is_one_error_and_the_runs_files_go(tmp_path):
    """A full disk mid-run: this run's files are removed and one error names the setting (exit 2)."""
    written = [tmp_path / "a.log", tmp_path / "b.xml", tmp_path / "never-written.log"]
    for path in written[:2]:
        path.write_text("x")
    err = runs._results_unwritable(OSError(28, "No space left on device"), tmp_path, written)
    assert isinstance(err, InputError) and err.exit_code == 2
    assert err.one_line() == (
        f"{tmp_path}: cannot write the workload log during the run: No space left on device (from setting "
        "results_dir, ROCMCI_RESULTS_DIR); every workload was stopped. free space there or name another folder "
        "(ROCMCI_RESULTS_DIR)"
    )
    assert not any(p.exists() for p in written)
    assert "OSError" in runs._results_unwritable(OSError(), tmp_path, []).one_line()


def test_sigterm_is_a_workload_error_with_exit_143():
    """SIGTERM during a run ends rocmci with 143 and says every workload was stopped."""
    err = runs._Terminated()
    assert isinstance(err, WorkloadError) and err.exit_code == 143
    assert err.one_line() == "stopped by SIGTERM; every workload was stopped"
    with pytest.raises(runs._Terminated):
        runs._on_sigterm(signal.SIGTERM, None)


# --- execute.py: real host-mode runs in this process ------------------------------------------------------------


def host_run(tmp_path: Path, load: wl.Workload, *, env: dict[str, str] | None = None, waves=None, **kw) -> tuple:
    opts = options(tmp_path, no_container=True, workdir=str(tmp_path), results_dir=tmp_path / "results",
                   env=env or {}, **kw)  # fmt: skip
    waves = waves or [[load]]
    prepared = Prepared([[PlannedRun(w, [], None, slot, {}) for slot, w in enumerate(wave)] for wave in waves], [])
    out: list[str] = []
    results = runs.execute(prepared, opts, None, (), out.append)
    return results, out, prepared, opts


def test_a_host_run_logs_each_redacted_line_and_reports_its_outcome(tmp_path):
    """Each line is redacted, printed and logged (a log per run, named after it); the result names the log."""
    script = "import os; print(os.getcwd()); print('h\u00e9llo'); print('token', os.environ['MY_SECRET'])"
    load = workload("moe tests/1", argv=(PY, "-c", script))
    before = signal.getsignal(signal.SIGTERM)
    results, out, prepared, _ = host_run(tmp_path, load, env={"MY_SECRET": SECRET})
    assert signal.getsignal(signal.SIGTERM) is before  # rocmci's own handler only during the run
    assert out == [str(tmp_path), "h\u00e9llo", "token ***"]  # in the workdir
    (log,) = prepared.files
    assert re.fullmatch(rf"moe-testsof1-\d{{8}}-\d{{6}}-{os.getpid()}\.log", log.name)
    assert log.parent == tmp_path / "results"
    assert log.read_text(encoding="utf-8") == f"{tmp_path}\nh\u00e9llo\ntoken ***\n"
    (result,) = results
    assert (result.workload, result.outcome, result.exit_code, result.attempts, result.log) == (
        "moe tests/1",
        res.Outcome.PASSED,
        0,
        1,
        str(log),
    )


def test_runs_of_one_wave_are_prefixed_and_results_keep_their_order(tmp_path):
    """Runs at once print with their name in front (their logs do not); results come in plan order."""
    first = workload("w1", group="g", argv=(PY, "-c", "print('one')"))
    second = workload("w2", group="g", argv=(PY, "-c", "import sys; print('two'); sys.exit(1)"))
    third = workload("w3", argv=(PY, "-c", "print('three')"))
    fourth = workload("w4", argv=(PY, "-c", "import sys; sys.exit(4)"))
    results, out, prepared, _ = host_run(tmp_path, first, waves=[[first, second], [third], [fourth]])
    assert sorted(out[:2]) == ["[w1] one", "[w2] two"] and out[2:] == ["three"]
    assert [r.workload for r in results] == ["w1", "w2", "w3", "w4"]
    assert [r.exit_code for r in results] == [0, 1, 0, 4]
    assert [p.read_text() for p in prepared.files] == ["one\n", "two\n", "three\n", ""]


ABORT_ONCE = """
import os, signal, sys
marker = os.path.join(os.getcwd(), "aborted-once")
print("start")
if not os.path.exists(marker):
    open(marker, "w").close()
    os.kill(os.getpid(), signal.SIGABRT)
"""


def test_sigabrt_is_retried_once_and_the_second_attempt_counts(tmp_path):
    """A GPU hang's SIGABRT (exit -6 here, 134 from docker --init) is retried once, as vLLM's pipeline does."""
    load = workload("w", argv=(PY, "-c", ABORT_ONCE))
    (result,), out, prepared, _ = host_run(tmp_path, load)
    assert out == ["start", "rocmci: exit -6 (SIGABRT, e.g. a GPU hang on ROCm): retrying once", "start"]
    assert (result.outcome, result.exit_code, result.attempts) == (res.Outcome.PASSED, 0, 2)
    assert prepared.files[0].read_text() == "\n".join(out) + "\n"
    # Any other signal is not retried.
    other = workload("v", argv=(PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    (result,), out, _, _ = host_run(tmp_path / "segv", other)
    assert (result.exit_code, result.attempts, out) == (-11, 1, [])


def test_a_workload_that_cannot_start_is_an_infrastructure_error(tmp_path):
    """No such program: no traceback, one infrastructure-error result naming it; any start failure likewise."""
    load = workload("w", argv=(str(tmp_path / "missing"),))
    (result,), out, _, _ = host_run(tmp_path, load)
    assert (result.outcome, result.exit_code, result.attempts, result.seconds) == (res.Outcome.INFRA, 127, 1, 0.0)
    assert f"cannot start {str(tmp_path / 'missing')!r} in {tmp_path}: No such file or directory" in result.detail
    # A container run without an engine to run it: the exception is this run's result, not a lost thread.
    opts = options(tmp_path, results_dir=tmp_path / "r2")
    spec = ctr.ContainerSpec(image="i", argv=(), workdir="/", name="rocmci-t-none")
    prepared = Prepared([[PlannedRun(workload("c"), [], spec, 0)]], [])
    (result,) = runs.execute(prepared, opts, None, (), lambda _: None)
    assert (result.outcome, result.exit_code, result.seconds) == (res.Outcome.INFRA, 127, 0.0)
    assert "the workload could not be started: AttributeError: 'NoneType' object has no attribute" in result.detail


JUNIT_WRITER = """
import os, sys
path = os.path.join(sys.argv[1], "junit-w.xml")
assert not os.path.exists(path), "the previous report is still there"
with open(path, "w") as fh:
    fh.write('<testsuite tests="1"><testcase classname="t" name="case_%s"/></testsuite>' % os.environ["MY_SECRET"])
"""


def test_the_junit_report_is_fresh_and_kept_only_redacted(tmp_path):
    """The previous JUnit file is removed before the run; the one pytest wrote is kept as its redacted copy."""
    results_dir = tmp_path / "results"
    load = workload("w", argv=(PY, "-c", JUNIT_WRITER, str(results_dir)), junit="junit-w.xml")
    (result,), _, _, _ = host_run(tmp_path, load, env={"MY_SECRET": SECRET})  # none there before: fine too
    assert result.outcome is res.Outcome.PASSED
    (results_dir / "junit-w.xml").write_text("<testsuite/>")
    (result,), _, prepared, _ = host_run(tmp_path, load, env={"MY_SECRET": SECRET})
    assert result.outcome is res.Outcome.PASSED and result.junit.tests == 1
    kept = (results_dir / "junit-w.xml").read_text()
    assert SECRET not in kept and "case_***" in kept
    assert prepared.files[1] == results_dir / "junit-w.xml"


def test_sigterm_stops_the_run_and_rocmci_ends_with_143(tmp_path):
    """SIGTERM to rocmci mid-run: every workload stopped, the error says so (exit 143), the old handler back."""
    script = "import os, signal, time; print('up', flush=True); os.kill(os.getppid(), signal.SIGTERM); time.sleep(60)"

    def callers_handler(signum, frame):  # noqa: ARG001 - what runs if rocmci installed no handler of its own
        raise RuntimeError("SIGTERM reached the caller's handler: rocmci did not take it")

    outer = signal.signal(signal.SIGTERM, callers_handler)
    try:
        with pytest.raises(WorkloadError) as err:
            host_run(tmp_path, workload("w", argv=(PY, "-c", script)))
        assert signal.getsignal(signal.SIGTERM) is callers_handler  # the caller's handler is back
    finally:
        signal.signal(signal.SIGTERM, outer)
    assert err.value.exit_code == 143


# --- container.py against the real engine ------------------------------------------------------------------------


def _gone(engine: Engine, name: str) -> bool:
    import docker

    try:
        engine.sdk.containers.get(name)
    except docker.errors.NotFound:
        return True
    return False


@pytest.mark.docker
def test_a_real_run_reports_an_oom_kill_and_leaves_no_container(engine, busybox_image):
    """The kernel's OOM kill is read from the container before rocmci removes it; nothing is left either way."""
    oom = ctr.ContainerSpec(image=busybox_image, argv=("sh", "-c", "echo go; tail /dev/zero"), workdir="/",
                            memory="8m", name=ctr.container_name("mutants"), shm_size="1m")  # fmt: skip
    lines: list[str] = []
    done = ctr.run_container(oom, engine, timeout=120, on_line=lines.append)
    assert (done.exit_code, done.oom_killed, done.timed_out, done.infra_error) == (137, True, False, None)
    assert lines == ["go"] and _gone(engine, oom.name)
    plain = ctr.ContainerSpec(image=busybox_image, argv=("sh", "-c", "echo hi; exit 3"), workdir="/",
                              name=ctr.container_name("mutants"), shm_size="1m")  # fmt: skip
    done = ctr.run_container(plain, engine, timeout=120, on_line=lines.append)
    assert (done.exit_code, done.oom_killed, done.infra_error) == (3, False, None)
    assert lines == ["go", "hi"] and _gone(engine, plain.name)


@pytest.mark.docker
def test_a_timed_out_run_removes_its_container_so_the_client_ends(engine, busybox_image, tmp_path):
    """On timeout the container is removed (not only the client signalled): a client that outlives SIGTERM ends."""
    name = ctr.container_name("mutants")
    engine.cli("create", "--name", name, "--label", f"{label.MANAGED}=1", busybox_image, "sleep", "300")
    client = tmp_path / "docker"
    client.write_text(  # a client that, as docker's, stays while its container exists and ignores SIGTERM
        f"#!/bin/sh\ntrap '' TERM\nwhile {engine.client} inspect {name} >/dev/null 2>&1; do sleep 0.2; done\nexit 137\n"
    )
    client.chmod(0o755)
    stand_in = Engine(str(client))
    spec = ctr.ContainerSpec(image=busybox_image, argv=(), workdir="/", name=name)
    try:
        done = ctr.run_container(spec, stand_in, timeout=1, on_line=lambda _: None)
    finally:
        engine.remove_container(name)
    assert (done.timed_out, done.exit_code, done.oom_killed) == (True, 137, False)


@pytest.mark.docker
def test_a_client_that_ends_first_still_leaves_no_container(engine, busybox_image, tmp_path):
    """Normal end, whatever the client did: the container of that name is removed."""
    name = ctr.container_name("mutants")
    engine.cli("create", "--name", name, "--label", f"{label.MANAGED}=1", busybox_image, "true")
    stand_in = stand_in_client(tmp_path, "exit 0\n")
    spec = ctr.ContainerSpec(image=busybox_image, argv=(), workdir="/", name=name)
    try:
        done = ctr.run_container(spec, stand_in, timeout=30, on_line=lambda _: None)
        assert _gone(engine, name) and done.exit_code == 0
    finally:
        engine.remove_container(name)


@pytest.mark.docker
def test_a_probe_is_a_labelled_throw_away_container_without_network(engine, busybox_image):
    """probe/file_exists/read_file: a look inside an image, no network, rocmci's label, nothing left behind."""
    import threading

    token = uuid_token()
    seen: dict = {}

    def look() -> None:
        seen["done"] = ctr.probe(
            engine, busybox_image, ["sh", "-c", "ls /sys/class/net; echo e >&2; sleep 3; exit 3", token]
        )

    worker = threading.Thread(target=look)
    worker.start()
    found = None
    while worker.is_alive() and found is None:
        for short in ctr.leftovers(engine):
            try:
                attrs = engine.sdk.api.inspect_container(short)
            except Exception:  # noqa: BLE001 - someone else's container, gone meanwhile
                continue
            if token in attrs["Args"]:
                found = attrs
    worker.join()
    assert found is not None, "the probe's container was not listed under rocmci's label"
    assert re.fullmatch(r"/rocmci-probe-[0-9a-f]{10}", found["Name"])
    assert found["HostConfig"]["NetworkMode"] == "none" and found["HostConfig"]["AutoRemove"] is False
    done = seen["done"]
    assert (done.returncode, done.stdout, done.stderr) == (3, "lo\n", "e\n")
    assert _gone(engine, found["Name"].lstrip("/"))
    assert ctr.file_exists(engine, busybox_image, "/bin/sh") is True
    assert ctr.file_exists(engine, busybox_image, "/no/such/file") is False
    assert ctr.read_file(engine, busybox_image, "/proc/sys/kernel/ostype") == "Linux"  # its line break stripped
    assert ctr.read_file(engine, busybox_image, "/dev/null") is None  # empty: nothing to read
    assert ctr.read_file(engine, busybox_image, "/no/such/file") is None


def uuid_token() -> str:
    import uuid

    return f"rocmci-mutants-{uuid.uuid4().hex}"


def test_a_log_write_failing_mid_run_stops_every_workload_and_removes_the_runs_files(tmp_path):
    """A full disk (here: a file size limit) during the run: the workload is stopped, no later wave starts,
    this run's files go, and one error names the setting."""
    later = tmp_path / "later-wave-started"
    first = workload(
        "w1", argv=(PY, "-c", "import time\nfor _ in range(50): print('x' * 300, flush=True)\ntime.sleep(60)")
    )
    second = workload("w2", argv=(PY, "-c", f"open({str(later)!r}, 'w').close()"))
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, limits[1]))
    try:
        started = time.monotonic()
        with pytest.raises(InputError) as err:
            host_run(tmp_path, first, waves=[[first], [second]], timeout=600.0)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert time.monotonic() - started < 60, "the workload was left running after its log failed"
    assert err.value.one_line() == (
        f"{tmp_path / 'results'}: cannot write the workload log during the run: File too large (from setting "
        "results_dir, ROCMCI_RESULTS_DIR); every workload was stopped. free space there or name another folder "
        "(ROCMCI_RESULTS_DIR)"
    )
    assert not later.exists()
    assert list((tmp_path / "results").iterdir()) == []


def test_a_log_that_cannot_be_opened_is_the_same_one_error(tmp_path, monkeypatch):
    """The log file cannot even be made (here: a name too long for the file system, which log_file_name never
    gives; tests/unit/test_log_names.py): one error, nothing ran."""
    ran = tmp_path / "ran"
    monkeypatch.setattr(runs, "log_file_name", lambda name, stamp, pid: "n" * 300 + ".log")
    load = workload("n", argv=(PY, "-c", f"open({str(ran)!r}, 'w').close()"))
    with pytest.raises(InputError, match="cannot write the workload log during the run: File name too long"):
        host_run(tmp_path, load)
    assert not ran.exists()


def test_a_run_started_outside_the_main_thread_leaves_signals_alone(tmp_path):
    """Only the main thread may take SIGTERM: from another thread the run goes ahead without a handler."""
    import threading

    found: dict = {}

    def go() -> None:
        found["results"] = host_run(tmp_path, workload("w", argv=(PY, "-c", "print('ok')")))[0]

    worker = threading.Thread(target=go)
    worker.start()
    worker.join(60)
    (result,) = found["results"]
    assert (result.outcome, result.exit_code) == (res.Outcome.PASSED, 0)


def test_a_host_run_past_its_timeout_is_a_timeout(tmp_path):
    """The run's timeout reaches the workload: stopped, and reported as a timeout, not retried."""
    load = workload("w", argv=(PY, "-c", "import time; print('up', flush=True); time.sleep(60)"))
    (result,), out, _, _ = host_run(tmp_path, load, timeout=1.0)
    assert (result.outcome, result.attempts, out) == (res.Outcome.TIMED_OUT, 1, ["up"])


def test_a_results_folder_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    """The results folder is checked first: one error naming the setting, and nothing started."""
    (tmp_path / "results").write_text("")
    ran = tmp_path / "ran"
    with pytest.raises(InputError) as err:
        host_run(tmp_path, workload("w", argv=(PY, "-c", f"open({str(ran)!r}, 'w').close()")))
    assert err.value.one_line() == (
        f"{tmp_path / 'results'}: is a file, not a folder (from setting results_dir, ROCMCI_RESULTS_DIR). "
        "remove it or name another folder"
    )
    assert not ran.exists()


def container_run(tmp_path: Path, engine: Engine, **kw) -> tuple:
    opts = options(tmp_path, results_dir=tmp_path / "results", **kw)
    spec = ctr.ContainerSpec(image="img", argv=("x",), workdir="/", name=ctr.container_name("mutants"))
    prepared = Prepared([[PlannedRun(workload("c"), [], spec, 0)]], [])
    out: list[str] = []
    return runs.execute(prepared, opts, engine, (), out.append), out, prepared


def test_a_container_run_gets_the_engine_the_timeout_and_secret_env_values_by_name(tmp_path):
    """Container mode: the docker client runs with the secrets of --env in its environment, its lines logged."""
    engine = stand_in_client(tmp_path, "echo from-the-client\nexit 0\n")
    (result,), out, prepared = container_run(tmp_path, engine, env={"HF_TOKEN": SECRET})
    assert (result.outcome, out) == (res.Outcome.PASSED, ["from-the-client"])
    assert (tmp_path / "token").read_text() == SECRET
    assert prepared.files[0].read_text() == "from-the-client\n"
    slow = stand_in_client(tmp_path, "echo up\nexec sleep 60\n")
    (result,), out, _ = container_run(tmp_path, slow, timeout=1.0)
    assert (result.outcome, out) == (res.Outcome.TIMED_OUT, ["up"])


def test_a_container_runs_log_failing_stops_its_client(tmp_path):
    """A full disk in container mode: the docker client (and so the container) is stopped at once."""
    engine = stand_in_client(
        tmp_path,
        "for i in 1 2 3 4 5 6 7 8; do echo " + "x" * 100 + "; done\nexec sleep 60\n",
    )
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (300, limits[1]))
    try:
        started = time.monotonic()
        with pytest.raises(InputError, match="File too large"):
            container_run(tmp_path, engine, timeout=600.0)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert time.monotonic() - started < 60, "the docker client was left running after the log failed"


# --- execute.py: what the image says of itself (real engine, labelled images) ---------------------------------


@pytest.fixture(scope="module")
def labelled_images(engine, busybox_image, tmp_path_factory):
    """Two throw-away images whose labels say which GPUs their DeepEP is built for, and their ROCm."""
    import uuid

    made = {}
    for arch in ("gfx942", "gfx90a"):
        ctx = tmp_path_factory.mktemp(arch)
        (ctx / "Dockerfile").write_text(
            f"FROM {busybox_image}\nLABEL {label.ARCH}={arch} {label.VLLM_ROCM_VERSION}=6.4.1\n"
        )
        tag = f"rocmci-test/mutants-{arch}:{uuid.uuid4().hex[:10]}"
        engine.cli("build", "-q", "--network", "none", "-t", tag, str(ctx), timeout=300)
        made[arch] = tag
    yield made
    for tag in made.values():
        engine.cli("rmi", "-f", tag, check=False)


@pytest.mark.docker
def test_the_images_archs_are_checked_against_the_gpus_and_noted(engine, labelled_images, tmp_path):
    """Container mode: the image's DeepEP archs must cover the GPUs (exit 5 if not); what it says is noted."""
    root = fake_host(tmp_path)
    gpus = runs.host_gpus(options(root))
    fits = labelled_images["gfx942"]
    prepared = runs.prepare([workload()], options(root, image=fits), engine, notes=["caller's note"])
    assert prepared.warnings == []
    assert prepared.notes == [
        f"image {fits}: DeepEP built for gfx942 (label {label.ARCH}, declared: no {label.EVIDENCE_ARCH} (code "
        f"objects not verified)); ROCm 6.4.1 (label {label.VLLM_ROCM_VERSION})",
        "caller's note",
    ]
    other = labelled_images["gfx90a"]
    with pytest.raises(PreflightError, match=f"^GPU 0 is .* but image {re.escape(other)} is built for gfx90a"):
        runs.preflight([workload()], options(root, image=other), engine, gpus, {})
    _, warnings = runs.preflight([workload()], options(root, image=other, skip_preflight=True), engine, gpus, {})
    assert len(warnings) == 1 and warnings[0].startswith("GPU 0 is ") and "is built for gfx90a" in warnings[0]
    # A workload without DeepEP (run.step), or no GPU chosen: nothing to check the archs against.
    assert runs.preflight([workload(needs_deepep=False)], options(root, image=other), engine, gpus, {})[1] == []
    _, warnings = runs.preflight([workload(gpus=8)], options(root, image=other, skip_preflight=True), engine, gpus, {})
    assert [w.split(":")[0] for w in warnings] == ["1 run of 8 GPUs"]


@pytest.mark.docker
def test_an_image_that_is_not_there_is_named_with_what_to_do(engine, busybox_image, tmp_path):
    """No such local image: exit 5 with how to get one; a dry run says it and goes on."""
    root = fake_host(tmp_path)
    gpus = runs.host_gpus(options(root))
    missing = "rocmci-test/no-such-image:mutants"
    expected = f"image {missing} not found. pull it (--pull), or build one with `rocmci image.build`"
    with pytest.raises(PreflightError) as err:
        runs.preflight([workload()], options(root, image=missing), engine, gpus, {})
    assert err.value.one_line() == expected
    notes: list[str] = []
    _, warnings = runs.preflight([workload()], options(root, image=missing, dry_run=True), engine, gpus, {}, notes)
    assert (warnings, notes) == ([expected], [])


def test_the_log_is_utf8_whatever_the_locale(tmp_path):
    """A workload's log is UTF-8 even when rocmci runs under a C locale (a CI agent's default)."""
    import locale

    load = workload("w", argv=(PY, "-c", "print('h\\u00e9llo \\u2713')"))
    saved = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        (result,), out, prepared, _ = host_run(tmp_path, load)
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
    # What the pipe's bytes decode to is process.stream's business; the log holds that text as UTF-8.
    assert result.outcome is res.Outcome.PASSED and len(out) == 1 and not out[0].isascii()
    assert prepared.files[0].read_bytes() == (out[0] + "\n").encode("utf-8")


@pytest.mark.docker
def test_an_image_without_arch_labels_is_probed_and_the_finding_says_where_it_looked(engine, busybox_image, tmp_path):
    """No arch label: the image itself is asked (a probe container); the finding names what the probe said."""
    root = fake_host(tmp_path)
    notes: list[str] = []
    opts = options(root, image=busybox_image, skip_preflight=True)
    _, warnings = runs.preflight([workload()], opts, engine, runs.host_gpus(opts), {}, notes)
    assert notes == [f"image {busybox_image}: the code-object probe gave no answer; ROCm version unknown"]
    assert warnings == [
        f"image {busybox_image} does not say which GPUs its DeepEP is built for (the code-object probe gave no "
        "answer). build it with `rocmci image.build`, or pass --skip-preflight if you know it fits"
    ]


SHARD = (
    "import os, sys\n"
    "port = os.environ['MASTER_PORT']\n"
    "with open(os.path.join(sys.argv[1], 'junit-' + port + '.xml'), 'w') as fh:\n"
    '    fh.write(\'<testsuite tests="1"><testcase classname="t" name="c\' + port + \'"/></testsuite>\')\n'
)


def test_the_shards_of_one_mode_are_merged_into_one_result_and_one_junit(tmp_path):
    """Shards run at once and are reported as one workload, with one merged JUnit file kept with the run."""
    results_dir = tmp_path / "results"
    shards = [
        workload(
            f"s{i}", group="g", argv=(PY, "-c", SHARD, str(results_dir), "rocmci_shard"), junit=f"junit-{port}.xml"
        )
        for i, port in enumerate(("29500", "29600"))
    ]
    opts = options(tmp_path, no_container=True, workdir=str(tmp_path), results_dir=results_dir)
    prepared = Prepared([[runs.plan_run(w, [], opts, slot) for slot, w in enumerate(shards)]], [])
    (result,) = runs.execute(prepared, opts, None, (), lambda _: None)
    assert (result.workload, result.outcome, result.junit.tests) == ("moe-tests g (2 shards)", res.Outcome.PASSED, 2)
    assert prepared.files[-1] == results_dir / "junit-moe-g.xml" and prepared.files[-1].is_file()


def test_run_container_with_no_client_at_all_is_the_engines_error(tmp_path, monkeypatch):
    """No docker on PATH and no Debian client: the engine's typed error with its install hint, before anything
    starts (not an exit-127 result naming a client that does not exist)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("rocmci.engine.DEBIAN_CLIENT", str(tmp_path / "no-docker"))
    spec = ctr.ContainerSpec(image="img", argv=(), workdir="/", name="rocmci-t-noclient")
    with pytest.raises(EngineError) as raised:
        ctr.run_container(spec, Engine("auto"), timeout=10, on_line=lambda _: None)
    assert (raised.value.message, raised.value.hint) == (
        "no docker client found",
        "install Debian's docker.io (apt-get install docker.io)",
    )
