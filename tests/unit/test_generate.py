from __future__ import annotations

from rocmci.pipeline import generate, source, yamldoc
from rocmci.pipeline.generate import Options

STEPS = """\
steps:
- label: Kernels
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_2
  num_gpus: 2
  timeout_in_minutes: 600
  parallelism: 4
  source_file_dependencies: [vllm/model_executor/]
  commands: [pytest kernels, pytest more]
- label: Optional nightly
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  optional: true
  commands: [pytest slow]
- label: Experimental only
  mirror_hardwares: [amdexperimental]
  agent_pool: mi355_1
  commands: [pytest exp]
- label: CPU
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  no_gpu: true
  working_dir: /vllm-workspace
  command: python3 -c 'print(1)'
"""


def load() -> source.SourceFile:
    src = source.from_document(yamldoc.parse(STEPS, "steps.yaml"))
    assert src.findings == []
    return src


def by_label(pipeline: dict) -> dict[str, dict]:
    return {s.get("label") or s.get("block"): s for s in pipeline["steps"]}


def test_vllm_template_semantics():
    steps = by_label(generate.generate(load(), Options(changed_files=("vllm/model_executor/x.py",))).pipeline)
    kernels = steps["mi300_2: Kernels"]
    assert kernels["agents"] == {"queue": "amd_mi300_2"}
    assert kernels["timeout_in_minutes"] == 180  # capped
    assert kernels["soft_fail"] is True and kernels["priority"] == 100 and kernels["parallelism"] == 4
    assert kernels["env"]["VLLM_TEST_COMMANDS"] == "cd /vllm-workspace/tests && pytest kernels && pytest more"
    assert kernels["env"]["VLLM_CI_EXPECTED_GPU_COUNT"] == "2"
    assert kernels["env"]["AMD_CI_STEP_SOURCE"] == "steps.yaml:2"
    assert kernels["depends_on"] == ["image-build-amd"]
    assert kernels["command"] == "bash .buildkite/scripts/hardware_ci/run-amd-test.sh"
    retries = kernels["retry"]["automatic"]
    assert {"exit_status": 134, "limit": 1} in retries and {"signal_reason": "agent_stop", "limit": 1} in retries
    cpu = steps["mi300_1: CPU"]
    assert cpu["env"]["VLLM_CI_EXPECTED_GPU_COUNT"] == "0"
    assert cpu["env"]["VLLM_TEST_COMMANDS"] == "cd /vllm-workspace && python3 -c 'print(1)'"
    assert "mi355_1: Experimental only" not in steps  # mirror_hw filter
    image = steps[":docker: Build ROCm image (gfx942;gfx950)"]
    assert image["key"] == "image-build-amd"
    assert image["command"] == "invoke image.build --arch gfx942,gfx950 --tag rocm/vllm-ci:$BUILDKITE_COMMIT --push"


def test_optional_and_unaffected_steps_get_a_block_step():
    result = generate.generate(load(), Options(changed_files=("docs/README.md",)))
    steps = by_label(result.pipeline)
    assert steps["Run mi300_1: Optional nightly"]["key"] == "block-mi300-1-optional-nightly"
    assert steps["mi300_1: Optional nightly"]["depends_on"] == ["image-build-amd", "block-mi300-1-optional-nightly"]
    assert "Run mi300_2: Kernels" in steps  # no changed file matches its dependency
    assert "Run mi300_1: CPU" not in steps  # no dependencies: always runs
    reasons = {d.step.label: (d.action, d.reason) for d in result.decisions}
    assert reasons["Kernels"] == ("block", "no changed file matches its source_file_dependencies")
    assert reasons["Experimental only"][0] == "skip"


def test_run_all_nightly_and_trigger_files():
    for opts in (
        Options(changed_files=(), run_all=True),
        Options(changed_files=("docker/Dockerfile.rocm",)),
        Options(changed_files=("csrc/moe/topk.cu",)),
    ):
        steps = by_label(generate.generate(load(), opts).pipeline)
        assert "Run mi300_2: Kernels" not in steps
        assert "Run mi300_1: Optional nightly" in steps  # optional still waits outside nightly
    nightly = by_label(generate.generate(load(), Options(changed_files=(), nightly=True)).pipeline)
    assert not [label for label in nightly if label.startswith("Run ")]


def test_same_input_same_output():
    a = generate.generate(load(), Options(changed_files=("x",))).pipeline
    b = generate.generate(load(), Options(changed_files=("x",))).pipeline
    assert a == b


def test_slugs_are_valid_buildkite_keys():
    assert generate.slugify("mi300_2: Kernels (2 GPUs) / DeepEP; gfx942") == "mi300-2-kernels-2-gpus-deepep-gfx942"
    assert generate.slugify("???") == "step"
    assert len(generate.slugify("x" * 300)) == 90
