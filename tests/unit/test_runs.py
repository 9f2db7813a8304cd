"""runs.spec_for / preflight / host plans without Docker: each guards one thing a ROCm workload needs.

Mutation map (issue 15): no /dev/kfd, no render nodes, no --init, the workaround not reaching the
workload, the wrong GPU set -- each turns at least one test here red.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocmci import workaround_registry as wr
from rocmci.engine import Engine
from rocmci.errors import PreflightError
from rocmci.runs import container as ctr
from rocmci.runs import execute as runs
from rocmci.runs import workarounds as wa
from rocmci.runs import workloads as wl
from tests.conftest import REPO, SHARED_VLLM
from tests.unit.test_gpus import make_node

PACKAGED_REGISTRY = REPO / "src" / "rocmci" / "data" / "workarounds.yaml"

RUN_AMD_TEST = SHARED_VLLM / "buildkite" / "scripts" / "hardware_ci" / "run-amd-test.sh"
TEMPLATE = SHARED_VLLM.parent / "ci-infra" / "buildkite" / "test-template-amd.j2"


@pytest.fixture
def host(tmp_path) -> Path:
    nodes = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    make_node(nodes, 0, 0)
    for i in range(4):
        make_node(nodes, i + 1, 90402, render=128 + i)
    (tmp_path / "dev/dri").mkdir(parents=True)
    (tmp_path / "dev/kfd").write_text("")
    for i in range(4):
        (tmp_path / f"dev/dri/renderD{128 + i}").write_text("")
    return tmp_path


def options(host: Path, **kw) -> runs.RunOptions:
    base = dict(
        image="img:1", results_dir=host / "results", timeout=60.0, network=None, shm_size="16g", memory=None,
        hf_cache=str(host / "hf"), workdir="/vllm-workspace", host_root=host,
    )  # fmt: skip
    return runs.RunOptions(**{**base, **kw})


def registry():
    return wr.load_registry(PACKAGED_REGISTRY)


def moe(shards: int = 1, obsolete=frozenset()):
    return wl.moe_tests(modes=("high-throughput",), registry=registry(), shards=shards, obsolete=obsolete)


def test_container_gets_kfd_exactly_the_chosen_render_nodes_and_init(host):
    prepared = runs.prepare(moe(), options(host, gpus=(2, 3)), None)
    (run,) = prepared.runs
    assert run.spec.devices == (
        (f"{host}/dev/kfd", "/dev/kfd"),
        (f"{host}/dev/dri/renderD130", "/dev/dri/renderD130"),
        (f"{host}/dev/dri/renderD131", "/dev/dri/renderD131"),
    )
    argv = ctr.run_argv(run.spec, "docker")
    assert argv[:3] == ["docker", "run", "--init"]
    assert argv.count("--device") == 3 and f"{host}/dev/kfd:/dev/kfd" in argv


def test_container_environment_is_upstreams_runner_plus_the_workaround(host):
    (run,) = runs.prepare(moe(), options(host), None).runs
    env = run.spec.env
    assert env["PYTORCH_ROCM_ARCH"] == "" and env["PYTHONPATH"] == "/vllm-workspace"
    assert env["ROCPROFILER_REGISTER_ENABLED"] == "0"
    assert "--env" in (argv := ctr.run_argv(run.spec, "docker")) and "ROCPROFILER_REGISTER_ENABLED=0" in argv
    (left_out,) = runs.prepare(moe(obsolete=frozenset({"rocprofiler-register-teardown"})), options(host), None).runs
    assert "ROCPROFILER_REGISTER_ENABLED" not in left_out.spec.env


def test_shards_get_disjoint_gpu_sets_in_containers_and_on_the_host(host):
    sets = []
    for no_container in (False, True):
        prepared = runs.prepare(moe(shards=2), options(host, no_container=no_container), None)
        sets.append([[g.index for g in r.gpus] for r in prepared.runs])
        if no_container:
            assert [r.env["ROCR_VISIBLE_DEVICES"] for r in prepared.runs] == ["0,1", "2,3"]
            assert [r.env["HIP_VISIBLE_DEVICES"] for r in prepared.runs] == ["0,1", "0,1"]
            assert all(r.env["ROCPROFILER_REGISTER_ENABLED"] == "0" for r in prepared.runs)
            assert all(r.env["PYTORCH_ROCM_ARCH"] == "" for r in prepared.runs)
        else:
            assert [[d[1] for d in r.spec.devices[1:]] for r in prepared.runs] == [
                ["/dev/dri/renderD128", "/dev/dri/renderD129"],
                ["/dev/dri/renderD130", "/dev/dri/renderD131"],
            ]
    assert sets == [[[0, 1], [2, 3]], [[0, 1], [2, 3]]]


def test_preflight_refuses_a_host_without_kfd(host):
    (host / "dev/kfd").unlink()
    with pytest.raises(PreflightError, match="/dev/kfd is missing"):
        runs.prepare(moe(), options(host), None)
    prepared = runs.prepare(moe(), options(host, dry_run=True), None)  # a dry run says it and goes on
    assert prepared.warnings[0].startswith("/dev/kfd is missing")


def test_preflight_refuses_too_few_gpus_and_the_pods_gpu_count(host):
    with pytest.raises(PreflightError, match="need 6 GPUs, this host offers 4"):
        runs.prepare(moe(shards=3), options(host), None)
    with pytest.raises(PreflightError, match="VLLM_CI_EXPECTED_GPU_COUNT=1"):
        runs.preflight(moe(), options(host, no_container=True), None, runs.host_gpus(options(host)),
                       {"VLLM_CI_EXPECTED_GPU_COUNT": "1"})  # fmt: skip
    sets, _ = runs.preflight(moe(), options(host, no_container=True), None, runs.host_gpus(options(host)),
                             {"VLLM_CI_EXPECTED_GPU_COUNT": "2"})  # fmt: skip
    assert [[g.index for g in s] for s in sets] == [[0, 1]]


def test_dry_run_needs_no_engine(host, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{host}/no-engine.sock")  # a real client, nothing listening
    engine = Engine("auto")
    with pytest.raises(Exception, match="not running"):
        runs.prepare(moe(), options(host), engine)
    prepared = runs.prepare(moe(), options(host, dry_run=True), engine)
    assert prepared.warnings == ["image img:1 not checked: the Docker engine is not running"]
    text = "\n".join(runs.dry_run_lines(prepared, engine))
    assert "--env PYTORCH_ROCM_ARCH= \\" in text and "--env ROCPROFILER_REGISTER_ENABLED=0 \\" in text


def test_host_dry_run_with_one_named_gpu_shows_it(host):
    prepared = runs.prepare(moe(), options(host, no_container=True, dry_run=True, gpus=(1,)), None)
    assert prepared.warnings == [
        "1 run of 2 GPUs: together they need 2 GPUs, this host offers 1. use a host with more GPUs, or ask for fewer"
    ]
    (run,) = prepared.runs
    assert (run.env["ROCR_VISIBLE_DEVICES"], run.env["HIP_VISIBLE_DEVICES"]) == ("1", "0")


# --- differential: vLLM's runner and pipeline template ------------------------------------------------------


@pytest.fixture(scope="module")
def runner_text() -> str:
    if not RUN_AMD_TEST.is_file():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    return RUN_AMD_TEST.read_text()


def test_runner_environment_matches_run_amd_test(runner_text):
    assert '-e "PYTORCH_ROCM_ARCH=" \\' in runner_text and 'export PYTORCH_ROCM_ARCH=""' in runner_text
    assert wl.RUNNER_ENV == {"PYTORCH_ROCM_ARCH": ""}
    assert re.search(r'^MYPYTHONPATH="(.*)"$', runner_text, re.M).group(1) == wl.WORKSPACE
    assert wl.runner_env(wl.WORKSPACE) == {"PYTORCH_ROCM_ARCH": "", "PYTHONPATH": "/vllm-workspace"}
    assert '"${VLLM_CI_WORKSPACE:-/vllm-workspace}"' in runner_text


def test_orchestration_variables_are_the_ones_the_runner_clears(runner_text):
    body = runner_text.split("clear_ci_orchestration_env() {", 1)[1].split("}", 1)[0]
    names = tuple(re.findall(r"^\s+([A-Z][A-Z0-9_]+)", body.split("unset -v", 1)[1], re.M))
    assert names == wl.ORCHESTRATION_VARS
    assert wl.host_env({"VLLM_TEST_COMMANDS": "x", "PATH": "/bin"}) == {"PATH": "/bin"}


def test_exit_5_and_134_as_upstream(runner_text):
    """What rocmci does with the two codes, next to where upstream says it (not constants no code reads)."""
    from rocmci.pipeline import amdsteps
    from rocmci.runs import results as res

    handler = runner_text.split("handle_pytest_exit() {", 1)[1].split("\n}", 1)[0]
    assert '"$exit_code" -eq 5' in handler and "exit 0" in handler
    outcome, _ = res.classify(5, None)  # the runner's success, said for what it is; a failure under --strict
    assert outcome is res.Outcome.NO_TESTS
    no_tests = res.Result("w", outcome, 5, 0.0, "")
    assert (res.exit_code([no_tests], strict=False), res.exit_code([no_tests], strict=True)) == (0, 10)
    if TEMPLATE.is_file():
        assert "exit_status: 134" in TEMPLATE.read_text()
    assert {"exit_status": 134, "limit": 1} in amdsteps.retry()["automatic"]  # the pipeline retries it once
    assert res.signal_of(134) == res.signal_of(-6) == 6  # SIGABRT, from a shell or --init and from Python
    assert res.classify(134, None)[0] is res.Outcome.CRASHED


def test_real_dockerfile_rocm_base_does_not_carry_the_backport_yet():
    """The fixture predates vLLM #55099: the backport condition must not fire on it."""
    if not SHARED_VLLM.is_dir():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    (entry,) = registry()
    (both,) = [c for c in entry.remove_when if c.kind == "all_of"]
    backport = next(c for c in both.parts if c.kind == "vllm_dockerfile_applies")
    met, evidence = wa.check_condition(backport, wa.Sources(vllm_src=SHARED_VLLM))
    assert met is False and "no instruction applies ROCm/rocm-systems#6942" in evidence


def test_host_mode_uses_only_gpus_whose_render_node_exists(host):
    """In a pod KFD sysfs lists every GPU of the node; only the pod's render nodes exist under /dev/dri."""
    (host / "dev/dri/renderD128").unlink()
    (host / "dev/dri/renderD130").unlink()
    pod = runs.host_gpus(options(host, no_container=True))
    assert [(g.index, g.render_minor) for g in pod] == [(0, 129), (1, 131)]  # numbered as the runtime does
    assert len(runs.host_gpus(options(host))) == 4  # container mode: docker names the devices itself
    (run,) = runs.prepare(moe(), options(host, no_container=True), None).runs
    assert run.env["ROCR_VISIBLE_DEVICES"] == "0,1"
