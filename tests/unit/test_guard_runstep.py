"""run.step (issue 35): its env as vLLM's runner sets it (cpu_platform_env), a no_plugin step's own env, its
working dir, its GPU count (0 for no_gpu), and which image a build id names (test image vs native ci_base).

Real parts: rocmci's generator plans the steps from a step file, rocmci's agent plans the job, and vLLM's own
run-amd-test.sh (../shared/fixtures, unmodified) is executed under rocmci's trace stand-ins, as run.step does;
the build id's images are checked against ci-infra's real template rendered with minijinja. docs/guards.md maps
each test to the mutation it was watched to kill.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmci.errors import UsageError
from rocmci.pipeline import citemplate, source
from rocmci.pipeline.bootstrap import TemplateInputs
from rocmci.runs import agent, images, jobs, service, stepjobs
from rocmci.runs import steps as st
from tests.conftest import REPO, SHARED_VLLM

RUNNER = SHARED_VLLM / "buildkite" / "scripts" / "hardware_ci" / "run-amd-test.sh"
TEMPLATE = REPO.parent / "shared" / "fixtures" / "ci-infra" / "buildkite" / "test-template-amd.j2"
BUILD = "0190ab12-3c4d-4e5f-8a9b-0c1d2e3f4a5b"

STEPS = """\
steps:
- label: CPU only
  agent_pool: mi300_4
  mirror_hardwares: [amdproduction]
  no_gpu: true
  num_gpus: 4
  working_dir: /vllm-workspace/examples
  commands:
  - pytest -v a.py
- label: Two GPUs
  agent_pool: mi300_2
  mirror_hardwares: [amdproduction]
  num_gpus: 2
  commands:
  - pytest b.py
  - echo $$HOME
- label: Agent side
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  no_plugin: true
  env:
    FOO: bar baz
    N: 3
  commands:
  - make lint
- label: In a pod
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  dind: false
  working_dir: /vllm-workspace/tests/v1
  commands:
  - pytest c.py
"""

needs_runner = pytest.mark.skipif(not RUNNER.is_file(), reason=f"{RUNNER} not found (shared fixtures beside the repo)")


@pytest.fixture
def steps(tmp_path) -> dict[str, st.Step]:
    path = tmp_path / "test-amd.yaml"
    path.write_text(STEPS)
    src = source.load_source(path, "test-amd.yaml")
    return {
        s.source_label: s for s in st.generated_steps(src, "amdproduction", "rocm/vllm-ci:build-$BUILDKITE_BUILD_ID")
    }


def traced_run(step: st.Step, tmp_path: Path) -> list[str]:
    """The `docker run` vLLM's runner starts for the step's job, as run.step traces it."""
    checkout = tmp_path / "vllm"
    (checkout / ".buildkite/scripts/hardware_ci").mkdir(parents=True)
    shutil.copyfile(RUNNER, checkout / jobs.RUNNER)
    job = agent.job(
        step.data, parallel_job=None, ids=agent.Ids(BUILD, "job-1", "c" * 40, "main"), checkout=str(checkout)
    )
    render = agent.render_devices(stepjobs.stand_in_gpus(job.gpus))
    traced = jobs.trace(job, jobs.Place(checkout, tmp_path / "results", str(tmp_path / "hf")), render)
    (run,) = traced.runs()
    assert traced.exit_code == 0, traced.output[-5:]
    return list(run)


def env_words(argv: list[str]) -> dict[str, str]:
    return dict(
        argv[i + 1].split("=", 1) for i, w in enumerate(argv[:-1]) if w in ("-e", "--env") and "=" in argv[i + 1]
    )


def renders(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--device" and "renderD" in argv[i + 1]]


# --- GPU count, and the runner's cpu_platform_env ----------------------------------------------------------------


def test_a_no_gpu_step_counts_0_gpus_whatever_its_num_gpus(steps):
    cpu, two = steps["CPU only"], steps["Two GPUs"]
    assert (cpu.gpus, two.gpus, steps["Agent side"].gpus) == (0, 2, 1)
    assert (cpu.env["VLLM_CI_EXPECTED_GPU_COUNT"], two.env["VLLM_CI_EXPECTED_GPU_COUNT"]) == ("0", "2")
    ids = agent.Ids(BUILD, "job-1", "c" * 40, "main")
    # An agent of amd_mi300_4 owns 4 GPUs; a step that expects none is handed none.
    assert agent.job(cpu.data, parallel_job=None, ids=ids, checkout="/c").gpus == 0
    assert agent.job(two.data, parallel_job=None, ids=ids, checkout="/c").gpus == 2


@needs_runner
def test_a_step_without_gpus_gets_the_runners_cpu_platform_env_and_no_render_node(steps, tmp_path):
    cpu = traced_run(steps["CPU only"], tmp_path / "cpu")
    assert env_words(cpu).get("VLLM_TARGET_DEVICE") == "cpu" and renders(cpu) == []
    two = traced_run(steps["Two GPUs"], tmp_path / "two")
    assert "VLLM_TARGET_DEVICE" not in env_words(two) and len(renders(two)) == 2


def test_without_vllms_runner_a_step_without_gpus_still_runs_on_the_cpu_platform(steps):
    (cpu,) = st.workloads(steps["CPU only"], None, host=False)
    (two,) = st.workloads(steps["Two GPUs"], None, host=False)
    assert (cpu.env, cpu.gpus) == ({"VLLM_TARGET_DEVICE": "cpu"}, 0)
    assert (two.env, two.gpus) == ({}, 2)
    assert st.workloads(steps["CPU only"], None, host=True)[0].env == {"VLLM_TARGET_DEVICE": "cpu"}


# --- a no_plugin step's env, the working dir ----------------------------------------------------------------------


def test_a_no_plugin_step_runs_its_own_command_with_its_own_env(steps):
    side = steps["Agent side"]
    assert (side.through_runner, side.command, side.env) == (False, "make lint", {"FOO": "bar baz", "N": "3"})
    (work,) = st.workloads(side, None, host=True)
    assert work.argv == ("/bin/bash", "-c", "make lint") and work.env == {"FOO": "bar baz", "N": "3"}
    job = agent.job(side.data, parallel_job=None, ids=agent.Ids(BUILD, "j", "c" * 40, "main"), checkout="/c")
    assert (job.env["FOO"], job.env["N"], job.command) == ("bar baz", "3", "make lint")
    # No VLLM_CI_EXPECTED_GPU_COUNT in its env: the agent of amd_mi300_1 still hands over the 1 GPU it owns.
    assert "VLLM_CI_EXPECTED_GPU_COUNT" not in side.env and job.gpus == 1
    # A runner step's env is the template's, never the step file's own: no_plugin's env is not mixed in there.
    assert "FOO" not in steps["Two GPUs"].env
    with pytest.raises(Exception, match="runs on the agent itself"):
        st.workloads(side, None, host=False)


def test_the_working_dir_is_the_steps_or_vllm_workspace_tests(steps):
    assert steps["CPU only"].working_dir == "/vllm-workspace/examples"
    assert steps["Two GPUs"].working_dir == "/vllm-workspace/tests"
    assert " && cd /vllm-workspace/examples && pytest -v a.py" in steps["CPU only"].test_commands
    assert steps["Two GPUs"].test_commands.endswith(" && cd /vllm-workspace/tests && pytest b.py && echo $$HOME")
    assert "working_dir: /vllm-workspace/tests/v1" in st.about(steps["In a pod"])
    (work,) = st.workloads(steps["Two GPUs"], None, host=True)
    assert work.argv[-1].endswith("cd /vllm-workspace/tests && pytest b.py && echo $HOME")  # `$$` as uploaded


@needs_runner
def test_the_runner_runs_the_commands_in_the_working_dir(steps, tmp_path):
    cpu = traced_run(steps["CPU only"], tmp_path)
    assert "cd /vllm-workspace/examples && pytest -v a.py" in cpu[-1]


# --- a build id's image -----------------------------------------------------------------------------------------


@pytest.mark.skipif(not TEMPLATE.is_file(), reason=f"{TEMPLATE} not found")
def test_a_build_id_names_the_images_ci_infras_template_gives_that_build(tmp_path):
    path = tmp_path / "test-amd.yaml"
    path.write_text(STEPS)
    rendered = citemplate.parse_pipeline(
        citemplate.render_ci_infra(TEMPLATE, path, TemplateInputs(run_all="1")), "render"
    )
    flat = [s for item in rendered if isinstance(item, dict) for s in item.get("steps", [item])]
    tag = next(s["env"]["IMAGE_TAG"] for s in flat if isinstance(s, dict) and "IMAGE_TAG" in s.get("env", {}))
    pod = next(s for s in flat if isinstance(s, dict) and s.get("plugins"))
    pod_image = pod["plugins"][0]["kubernetes"]["podSpecPatch"]["containers"][0]["image"]
    upload = {"BUILDKITE_BUILD_ID": "4711"}
    assert images.build_image("4711", native=False) == agent.interpolate(tag, upload) == "rocm/vllm-ci:build-4711"
    assert images.build_image("4711", native=True) == agent.interpolate(pod_image, upload)
    assert images.build_image("4711", native=True) == "rocm/vllm-dev:ci_base-build-4711"


def test_run_step_takes_a_build_ids_image_by_the_steps_kind_and_image_over_it():
    given = SimpleNamespace(build_id="4711", image=None)
    assert service.run_image(given, None, native=False) == "rocm/vllm-ci:build-4711"
    assert service.run_image(given, None, native=True) == "rocm/vllm-dev:ci_base-build-4711"


def test_a_native_steps_job_runs_its_builds_ci_base(steps):
    job = agent.job(
        steps["In a pod"].data, parallel_job=None, ids=agent.Ids("4711", "j", "c" * 40, "main"), checkout="/c"
    )
    assert job.native and job.pod["image"] == images.build_image("4711", native=True)
    docker = agent.job(steps["Two GPUs"].data, parallel_job=None, ids=agent.Ids("4711", "j", "c" * 40, "main"),
                       checkout="/c")  # fmt: skip
    assert not docker.native and docker.env["VLLM_CI_FALLBACK_IMAGE"] == images.build_image("4711", native=False)


@pytest.mark.parametrize("bad", ["", "-7", "a b", "x" * 101, "7;rm", "../7", "7/x", "7:x"])
def test_a_build_id_that_no_tag_can_hold_is_one_line(bad):
    with pytest.raises(Exception, match="is not a build id"):
        images.build_id("--build-id", bad)
    assert images.build_id("--build-id", "x" * 100) == "x" * 100


# --- naming a step, its parallel jobs (survivors of hand mutations of runs/steps.py) ----------------------------

PARALLEL = """\
steps:
- label: Sharded
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  parallelism: 3
  commands:
  - pytest --shard-id=$$BUILDKITE_PARALLEL_JOB d.py
- label: Sharded again
  agent_pool: mi300_2
  mirror_hardwares: [amdproduction]
  commands:
  - pytest e.py
"""


def test_a_step_is_named_by_its_label_pool_label_key_block_key_or_part_of_its_label(steps):
    listed = list(steps.values())
    two = steps["Two GPUs"]
    for name in ("mi300_2: Two GPUs", "Two GPUs", two.key, f"block-{two.key}", "two gpu", "  Two GPUs  "):
        assert st.find(listed, name, "t.yaml") is two, name
    with pytest.raises(UsageError, match=r"2 steps of t.yaml have 'mi300_' in their label") as many:
        st.find([steps["Two GPUs"], steps["Agent side"]], "mi300_", "t.yaml")
    assert "name one of them: 'mi300_2: Two GPUs', 'mi300_1: Agent side'" in many.value.hint
    with pytest.raises(UsageError, match=r"no step 'Tow GPUs' in t.yaml") as close:
        st.find(listed, "Tow GPUs", "t.yaml")
    assert close.value.hint == "did you mean 'Two GPUs'?"
    with pytest.raises(UsageError, match="no step 'zzz'") as none:
        st.find(listed, "zzz", "t.yaml")
    assert "rocmci pipeline.plan" in none.value.hint


def test_an_exact_label_wins_over_labels_that_hold_it(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PARALLEL)
    found = st.generated_steps(source.load_source(path, "p.yaml"), "amdproduction", "img")
    assert st.find(found, "Sharded", "p.yaml").source_label == "Sharded"  # not "2 steps have 'Sharded'"
    with pytest.raises(UsageError, match="2 steps of p.yaml have 'Shard' in their label"):
        st.find(found, "Shard", "p.yaml")


@pytest.mark.parametrize(
    ("broken", "stop"),
    [
        ("commands: 5", "'commands' ('join' or 'length' of a value that is not a list)"),
        ("commands: [x]\n    source_file_dependencies: [a, 3]",
         "'source_file_dependencies' ('length' of an item that is not text)"),
        ("commands: [x]\n    dind: false\n    agent_tags: [a]",
         "'agent_tags' ('items' of a value that is not a mapping)"),
        ("commands: 5\n    source_file_dependencies: 7",
         "'source_file_dependencies' (a number is not iterable), 'commands' ('join' or 'length' of a value that is "
         "not a list)"),
    ],
)  # fmt: skip
def test_a_step_whose_render_stops_ci_infras_template_is_refused_and_its_neighbours_run(tmp_path, broken, stop):
    # vLLM's CI uploads no pipeline at all for such a file: run.step must not run the step rocmci generates without it.
    path = tmp_path / "p.yaml"
    path.write_text(
        "steps:\n  - label: Broken\n    agent_pool: mi300_1\n    mirror_hardwares: [amdproduction]\n"
        f"    {broken}\n  - label: Fine\n    agent_pool: mi300_1\n    mirror_hardwares: [amdproduction]\n"
        "    commands: [pytest -v]\n"
    )
    src = source.load_source(path, "p.yaml")
    s = SimpleNamespace(mirror_hw="amdproduction", ci_image="img")
    with pytest.raises(UsageError) as err:
        service.find_step(src, "Broken", s)
    assert (err.value.message, err.value.hint) == (
        f"step 'mi300_1: Broken' (p.yaml:2): ci-infra's template stops on its {stop}, so vLLM's CI uploads no "
        "pipeline and never runs this step",
        "fix it in the step file (`rocmci pipeline.validate` shows the error at its line)",
    )
    assert service.find_step(src, "Fine", s).stops == ()


def test_candidates_keep_only_the_steps_a_query_may_name(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PARALLEL)
    src = source.load_source(path, "p.yaml")
    key = st.generated_steps(src, "amdproduction", "img")[1].key
    cases = [
        ("Sharded again", ["Sharded again"]),
        (" Sharded again ", ["Sharded again"]),
        (f"block-{key}", ["Sharded again"]),
        ("mi300_1: Sharded", ["Sharded"]),
        ("shard", ["Sharded", "Sharded again"]),
    ]
    for query, labels in cases:
        assert [s.data["label"] for s in st.candidates(src, query).steps] == labels, query
    assert st.candidates(src, "nothing like it") is src  # the whole file, for "did you mean"
    assert len(src.steps) == 2  # the file itself is left whole


def test_parallel_jobs_are_each_job_or_the_one_asked_for(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PARALLEL)
    sharded, single = st.generated_steps(source.load_source(path, "p.yaml"), "amdproduction", "img")
    assert st.jobs(sharded, None) == [0, 1, 2] and st.jobs(sharded, 2) == [2]
    with pytest.raises(UsageError, match="--parallel-job 3: step 'mi300_1: Sharded' has parallelism 3") as past:
        st.jobs(sharded, 3)
    assert past.value.hint == "give 0..2"
    assert st.jobs(single, None) == [None] and st.jobs(single, 0) == [None]  # job 0 of a step without parallelism
    with pytest.raises(UsageError, match="has no parallelism"):
        st.jobs(single, 1)
    names = [w.name for w in st.workloads(sharded, None, host=True)]
    assert names == [f"step mi300_1: Sharded job {i}/3" for i in range(3)]
    assert [w.env for w in st.workloads(sharded, 1, host=True)] == [
        {"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}
    ]
    assert st.workloads(single, None, host=True)[0].name == "step mi300_2: Sharded again"


# --- the agent's job: GPUs of a queue without a count, render nodes, a pod without containers or limits ----------


def test_a_queue_without_a_gpu_count_hands_over_what_the_step_expects_and_at_least_one():
    assert agent.agent_gpus("amd_mi355_dpx", 3) == 3
    assert agent.agent_gpus("amd_mi355_dpx", -1) == 1  # a negative count is no count
    assert agent.agent_gpus("amd_mi355_dpx", 0) == agent.agent_gpus("amd_mi300_8", 0) == 0


@pytest.mark.parametrize("blank", ["\t", "\n", " "])
def test_a_host_root_with_any_whitespace_is_refused_for_render_nodes(tmp_path, blank):
    from rocmci.gpus import Gpu

    root = tmp_path / f"a{blank}b"
    with pytest.raises(UsageError, match="holds a space"):
        agent.render_devices([Gpu(0, 1, "gfx942", 128)], root)


def _job_of(plugin: dict):
    data = {"label": "p", "command": "true", "agents": {"queue": "amd_mi300_1"}, "plugins": [plugin]}
    return agent.job(data, parallel_job=None, ids=agent.Ids("b", "j", "c", "main"), checkout="/c")


def test_a_pod_without_containers_or_gpu_limits_is_a_pod_of_0_gpus():
    bare = _job_of({"kubernetes": {"podSpecPatch": {}}})
    assert bare.native and bare.pod == {} and bare.gpus == 0
    no_limits = _job_of({"kubernetes": {"podSpecPatch": {"containers": [{"image": "i:$BUILDKITE_BUILD_ID"}]}}})
    assert no_limits.pod == {"image": "i:b"} and no_limits.gpus == 0
    two = _job_of({"kubernetes": {"podSpecPatch": {"containers": [{"resources": {"limits": {"amd.com/gpu": "2"}}}]}}})
    assert two.gpus == 2
    assert not _job_of({"docker": {}}).native  # another plugin is no pod


# --- a pod as one docker run (runs/pod.py) ------------------------------------------------------------------------


def _pod_argv(pod: dict, volumes: tuple = ()) -> list[str]:
    from rocmci.runs import pod as podmod

    job = agent.Job("p", "amd_mi300_1", "true", {}, 0, 60, pod, volumes)
    host = podmod.Host("docker", "pod-1", "node-1", (), Path("/"), "/co", "/res", "/hf", "/bk", None, "/cid", "j")
    return podmod.run_argv(job, host)


@pytest.mark.parametrize(
    ("quantity", "docker"), [("16Gi", "16g"), ("2Ti", "2048g"), ("1T", "1024g"), ("512Mi", "512m"), ("100", "100b")]
)
def test_a_pods_shm_size_is_its_quantity_in_docker_units(quantity, docker):
    from rocmci.runs import pod as podmod

    assert podmod.shm_size(quantity) == docker
    shm = _pod_argv(
        {"volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}]},
        ({"name": "s", "emptyDir": {"sizeLimit": quantity}},),
    )
    assert shm[shm.index("--shm-size") + 1] == docker


def test_a_pods_shm_without_a_size_limit_is_kubernetes_64mi_and_unmounted_volumes_are_skipped():
    mounts = [{"name": "s", "mountPath": "/dev/shm"}, {"name": "h", "mountPath": "/data"}]
    volumes = ({"name": "unmounted", "hostPath": {"path": "/x"}}, {"name": "s", "emptyDir": {}},
               {"name": "h", "hostPath": {"path": "/srv/data"}})  # fmt: skip
    argv = _pod_argv({"volumeMounts": mounts}, volumes)
    assert argv[argv.index("--shm-size") + 1] == "64m"
    assert "/srv/data:/data" in argv and "/x" not in " ".join(argv)


@pytest.mark.parametrize(
    ("security", "words"),
    [
        ({"allowPrivilegeEscalation": False}, ["--security-opt", "no-new-privileges"]),
        ({"allowPrivilegeEscalation": True}, []),
        ({}, []),
        ({"runAsUser": 0}, ["--user", "0"]),
        ({"runAsUser": 1000}, ["--user", "1000"]),
    ],
)
def test_a_pods_security_context_becomes_exactly_these_words(security, words):
    argv = _pod_argv({"securityContext": security})
    got = [
        w
        for i, w in enumerate(argv)
        if w in ("--security-opt", "--user") or argv[i - 1] in ("--security-opt", "--user")
    ]
    assert got == words
