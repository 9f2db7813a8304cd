"""What rocmci says in a vLLM checkout agrees with what its tasks do (issue 34, item 2).

- `rocmci doctor`: the pipeline tasks work with the packaged inventory, so "pipeline tasks: ready" and
  `doctor --for pipeline` exits 0;
- `pipeline.plan --run-all` says what runs and what still waits (the template unblocks optional steps
  only in nightly builds), and names how run_all was asked for (the flag or RUN_ALL=1);
- `pipeline.validate --arch gfx90a` is refused as the image tasks refuse it (DeepEP builds gfx942/gfx950);
- `rocmci run.step LABEL` is `rocmci run.step --step LABEL`;
- ROCMCI_VLLM_SRC locates the step file when the task runs outside the checkout.

The checkout is test_vllm_checkout's: vLLM's real files from ../shared/fixtures/vllm, nothing of rocmci's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.functional.checkouts import make_checkout, rocmci
from tests.functional.test_vllm_checkout import assert_no_rocmci_files

LABEL = "mi300_1: Kernels MoE Test %N"  # a step of the real test-amd.yaml


def ids(text: str) -> str:
    """The text with each run's own build and job ids and pod names masked."""
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID", text)
    return re.sub(r"rocmci-pod-[0-9a-f]{10}", "POD", text)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, vllm_fixtures: Path) -> Path:
    return make_checkout(tmp_path_factory.mktemp("vllm"), vllm_fixtures)


def test_doctor_says_the_pipeline_tasks_work_with_the_packaged_inventory(checkout):
    assert_no_rocmci_files(checkout)
    done = rocmci("doctor", "--for", "pipeline", cwd=checkout)
    assert done.returncode == 0, done.stderr
    assert "pipeline tasks: ready" in done.stdout
    inventory = next(line for line in done.stdout.splitlines() if line.startswith("inventory "))
    assert "ok" in inventory and "(the packaged inventory)" in inventory
    assert rocmci("pipeline.validate", cwd=checkout).returncode == 0  # and the task does work


def test_plan_with_run_all_says_what_still_waits_and_why(checkout):
    flag = rocmci("pipeline.plan", "--run-all", cwd=checkout)
    assert flag.returncode == 0, flag.stderr
    summary = flag.stdout.splitlines()[0]
    assert summary.startswith("57 of 190 steps run, 133 wait behind a block step")
    assert ": --run-all was given, every step on amdproduction runs except the 133 optional steps" in summary
    assert "run_all: --run-all was given" in flag.stdout and "RUN_ALL=1" not in flag.stdout

    env = rocmci("pipeline.plan", cwd=checkout, RUN_ALL="1")
    assert env.returncode == 0, env.stderr
    assert "run_all: RUN_ALL=1 was set" in env.stdout and "--run-all" not in env.stdout.splitlines()[0]
    assert env.stdout.splitlines()[0].startswith("57 of 190 steps run")

    label = rocmci("pipeline.plan", "--label", "ready-run-all-tests", cwd=checkout)
    assert label.stdout.splitlines()[0].endswith(
        "not on amdproduction: the PR has the label ready-run-all-tests, every step on amdproduction runs"
    )

    nightly = rocmci("pipeline.plan", "--run-all", "--nightly", cwd=checkout)
    assert nightly.stdout.splitlines()[0] == (
        "190 of 190 steps run, 0 wait behind a block step, 0 are not on amdproduction: --run-all was given, "
        "every step on amdproduction runs"
    )


def test_validate_refuses_an_arch_deepep_cannot_be_built_for(checkout):
    done = rocmci("pipeline.validate", "--arch", "gfx90a", cwd=checkout)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "rocmci: DeepEP on ROCm cannot target gfx90a (MI210/MI250/MI250X). DEEPEP_ROCM_ARCH may only name "
        "gfx942 (MI300A/MI300X/MI325X), gfx950 (MI350X/MI355X)"
    ]
    image = rocmci("image.build", "-n", "--arch", "gfx90a", cwd=checkout)
    assert (image.returncode, image.stderr) == (done.returncode, done.stderr)  # one refusal, both sides


def test_run_step_takes_the_label_as_its_argument(checkout):
    bare = rocmci("run.step", LABEL, "-n", cwd=checkout)
    flag = rocmci("run.step", "-n", "--step", LABEL, cwd=checkout)
    assert bare.returncode == 0, bare.stderr
    assert (ids(bare.stdout), bare.stderr) == (ids(flag.stdout), flag.stderr)  # the same run, its own ids
    assert "# step 'mi300_1: Kernels MoE Test %N' from .buildkite/test-amd.yaml:1623" in bare.stdout
    after_a_value = rocmci("run.step", "--source", ".buildkite/test-amd.yaml", LABEL, "-n", cwd=checkout)
    assert ids(after_a_value.stdout) == ids(flag.stdout)  # a flag's value is not taken for the label
    help_ = rocmci("run.step", "-h", cwd=checkout)
    assert help_.returncode == 0 and help_.stdout.startswith("Usage: rocmci run.step [STEP] [flags]")
    bogus = rocmci("run.step", LABEL, "--bogus", cwd=checkout)
    assert (bogus.returncode, bogus.stderr.splitlines()[0]) == (2, "rocmci: unknown flag --bogus for rocmci run.step; "
                                                                   "did you mean --gpus?")  # fmt: skip
    none = rocmci("run.step", "-n", cwd=checkout)
    assert none.returncode == 2 and "`rocmci run.step 'Basic Correctness'`" in none.stderr


def test_rocmci_vllm_src_locates_the_step_file(checkout, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = rocmci("pipeline.validate", cwd=elsewhere, ROCMCI_VLLM_SRC=str(checkout))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"{checkout}/.buildkite/test-amd.yaml: 0 errors, 0 warnings in 384 generated steps"
    )
    doctor = rocmci("doctor", "--for", "pipeline", cwd=elsewhere, ROCMCI_VLLM_SRC=str(checkout))
    assert doctor.returncode == 0, doctor.stderr
    step_file = next(line for line in doctor.stdout.splitlines() if line.startswith("step file "))
    assert step_file.split()[2:] == ["ok", f"{checkout}/.buildkite/test-amd.yaml"]
