"""`run.step --dry-run` prints exactly the generated pipeline's command, env and working dir.

Three steps of vLLM's real test-amd.yaml: a DeepEP step, a step with parallelism, a native
(`dind: false`) step. The expectation is the generator's own output (pipeline/generate.py, which the
conformance test holds equal to ci-infra's render), looked up independently of runs/steps.py.
"""

from __future__ import annotations

import shlex

import pytest

from rocmci.pipeline import generate as gen
from rocmci.pipeline import source
from rocmci.pipeline.bootstrap import TemplateInputs
from rocmci.runs import steps as st
from tests.conftest import SHARED_VLLM, run_invoke

STEP_FILE = SHARED_VLLM / "test-amd.yaml"
DEEPEP = "Kernels FP8 MoE Test (2xH100-2xMI300)"
PARALLEL = "Multi-Modal Processor (CPU) %N"
NATIVE = "Basic Correctness"


@pytest.fixture(scope="module")
def generated() -> dict[str, dict]:
    if not STEP_FILE.is_file():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    src = source.load_source(STEP_FILE, "test-amd.yaml")
    opts = gen.Options(inputs=TemplateInputs(run_all="1"), origin_env=False)
    result = gen.generate(src, opts)
    return {o.label: s for s, o in zip(result.steps, result.origins, strict=True) if o and "command" in s}


def dry_run(tmp_path, *args: str):
    env = {"ROCMCI_RESULTS_DIR": str(tmp_path / "results"), "ROCMCI_HF_CACHE": str(tmp_path / "hf"),
           "ROCMCI_IMAGE": "rocmci-test/no-such-image:1"}  # fmt: skip
    return run_invoke("run.step", "--source", str(STEP_FILE), "--host-root", str(tmp_path), "--dry-run", *args,
                      env=env, cwd=tmp_path)  # fmt: skip


def command_words(out: str) -> list[str]:
    """The printed commands as words (shell continuation lines joined, comments left out)."""
    words = shlex.split("\n".join(line for line in out.splitlines() if not line.startswith("#")))
    return [w for w in words if w != "\n"]  # shlex keeps an escaped line break as a word of its own


def bash_commands(out: str) -> list[str]:
    """The `/bin/bash -c` argument of each printed command."""
    words = command_words(out)
    return [words[i + 2] for i, w in enumerate(words) if w == "/bin/bash" and words[i + 1] == "-c"]


@pytest.mark.parametrize("label", [DEEPEP, PARALLEL, NATIVE])
def test_dry_run_prints_the_generated_command_env_and_working_dir(tmp_path, generated, label):
    step = generated[label]
    done = dry_run(tmp_path, "--step", label, *(("--parallel-job", "2") if label == PARALLEL else ()))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"# generated command: {step['command']}" in lines
    for key, value in step["env"].items():
        assert f"#   {key}={value}" in lines
    workdir = step["env"]["VLLM_TEST_COMMANDS"].split(" && cd ", 1)[1].split(" && ", 1)[0]
    assert f"# working_dir: {workdir}" in lines
    (command,) = bash_commands(done.stdout)
    assert command.endswith(" && " + st.unescape(step["env"]["VLLM_TEST_COMMANDS"]))


def test_parallel_job_runs_one_shard_as_buildkite_would(tmp_path, generated):
    assert generated[PARALLEL]["parallelism"] == 6
    one = dry_run(tmp_path, "--step", PARALLEL, "--parallel-job", "2").stdout
    words = command_words(one)
    assert "BUILDKITE_PARALLEL_JOB=2" in words and "BUILDKITE_PARALLEL_JOB_COUNT=6" in words
    assert words.count("run") == 1
    (command,) = bash_commands(one)
    assert "--shard-id=$BUILDKITE_PARALLEL_JOB" in command  # Buildkite's $$ escape undone
    every = dry_run(tmp_path, "--step", PARALLEL).stdout
    assert len(bash_commands(every)) == 6
    late = dry_run(tmp_path, "--step", PARALLEL, "--parallel-job", "6")
    assert late.returncode == 2 and "has parallelism 6" in late.stderr


def test_native_step_on_the_host(tmp_path, generated):
    step = generated[NATIVE]
    done = dry_run(tmp_path, "--step", f"mi300_1: {NATIVE}", "--no-container")
    assert done.returncode == 0, done.stderr
    assert "(native pod)" in done.stdout
    assert bash_commands(done.stdout) == [st.unescape(step["env"]["VLLM_TEST_COMMANDS"])]


def test_a_mistyped_step_gets_did_you_mean(tmp_path):
    if not STEP_FILE.is_file():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    done = dry_run(tmp_path, "--step", "Basic Corectness")
    assert done.returncode == 2
    assert done.stderr.startswith("rocmci: no step 'Basic Corectness' in ") and "did you mean 'Basic Correctness'" in (
        done.stderr
    )


def test_run_step_without_a_step_is_one_line(tmp_path):
    done = run_invoke("run.step", "--dry-run", cwd=tmp_path, env={"ROCMCI_RESULTS_DIR": str(tmp_path / "r")})
    assert (done.returncode, done.stderr.splitlines()[0]) == (
        2, "rocmci: run.step needs a step: its label, or --step LABEL. e.g. `rocmci run.step 'Basic Correctness'` "
        "(`rocmci pipeline.plan` lists them)"
    )  # fmt: skip


def test_part_of_a_label_picks_the_one_step_that_has_it_or_lists_them(generated):
    """A label copied in part from a Buildkite job title: one step is taken, several are named, none is one line."""
    src = source.load_source(STEP_FILE, "test-amd.yaml")
    steps = st.generated_steps(src, "amdproduction", "rocm/vllm-ci:build-1")
    one = st.find(steps, "fp8 moe test (2xh100-2xmi300)", "test-amd.yaml")
    assert one.source_label == DEEPEP and one.label.startswith("mi300_2: ")
    with pytest.raises(st.UsageError) as several:
        st.find(steps, "Kernels FP8 MoE", "test-amd.yaml")
    assert str(several.value).startswith("2 steps of test-amd.yaml have 'Kernels FP8 MoE' in their label")
    with pytest.raises(st.UsageError) as none:
        st.find(steps, "no step is called this", "test-amd.yaml")
    assert str(none.value).startswith("no step 'no step is called this' in test-amd.yaml")
