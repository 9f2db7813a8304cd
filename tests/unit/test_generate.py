from __future__ import annotations

import pytest

from rocmci import yamldoc
from rocmci.findings import ERROR, Finding
from rocmci.pipeline import bootstrap, generate, keepgoing, scalars, source
from rocmci.pipeline.bootstrap import Request, TemplateInputs
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
  commands: [pytest kernels, "pytest -k \\"not slow\\""]
- label: Optional nightly
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  optional: true
  commands: [pytest slow]
- label: Experimental only
  mirror_hardwares: [amdexperimental]
  agent_pool: mi355_1
  commands: [pytest exp]
- label: Native CPU
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  no_gpu: true
  dind: false
  working_dir: /vllm-workspace
  source_file_dependencies: [tests/never/]
  command: python3 -c 'print(1)'
"""


def load() -> source.SourceFile:
    src = source.from_document(yamldoc.parse(STEPS, "steps.yaml"))
    assert src.findings == []
    return src


def by_label(result: generate.Generated) -> dict[str, dict]:
    return {s.get("label") or s.get("block"): s for s in result.steps}


def gen(**inputs) -> generate.Generated:
    return generate.generate(load(), Options(inputs=TemplateInputs(**inputs)))


def test_template_semantics_of_a_test_step():
    steps = by_label(gen(list_file_diff="vllm/model_executor/x.py"))
    kernels = steps["mi300_2: Kernels"]
    assert kernels["agents"] == {"queue": "amd_mi300_2"} and kernels["depends_on"] == "image-build-amd"
    assert kernels["timeout_in_minutes"] == 180  # the template caps it
    assert kernels["env"]["CONTAINER_TIMEOUT_S"] == "10740"  # a minute before Buildkite's timeout
    assert kernels["soft_fail"] is True and kernels["priority"] == 100 and kernels["parallelism"] == 4
    assert kernels["env"]["VLLM_TEST_COMMANDS"].endswith(
        '&& cd /vllm-workspace/tests && pytest kernels && pytest -k "not slow"'
    )
    assert kernels["env"]["VLLM_TEST_COMMANDS"].startswith("(command rocm-smi || true) && echo 'ROCm debug agent")
    assert kernels["env"]["VLLM_CI_EXPECTED_GPU_COUNT"] == "2"
    assert kernels["env"]["AMD_CI_STEP_SOURCE"] == "steps.yaml:2"
    assert kernels["env"]["VLLM_CI_FALLBACK_IMAGE"] == "rocm/vllm-ci:build-$BUILDKITE_BUILD_ID"
    assert {"exit_status": -1, "signal_reason": "none", "limit": 1} in kernels["retry"]["automatic"]
    assert "plugins" not in kernels  # Docker-in-Docker unless dind: false
    assert "mi355_1: Experimental only" not in steps  # mirror_hw filter


def test_native_step_gets_the_kubernetes_pod_and_native_env():
    step = by_label(gen(run_all="1"))["mi300_1: Native CPU"]
    container = step["plugins"][0]["kubernetes"]["podSpecPatch"]["containers"][0]
    assert container["resources"] == {"limits": {"amd.com/gpu": "0"}, "requests": {"amd.com/gpu": "0"}}
    assert container["image"] == "rocm/vllm-dev:ci_base-build-$BUILDKITE_BUILD_ID"
    assert step["env"]["AMD_CI_RUNTIME"] == "native" and step["env"]["PYTORCH_ROCM_ARCH"] == ""
    assert step["env"]["VLLM_TEST_COMMANDS"].endswith("cd /vllm-workspace && python3 -c 'print(1)'")


def test_image_chain_and_deepep_arch_pass_through():
    result = generate.generate(load(), Options(deepep_arch="gfx942;gfx950"))
    refresh, ci_base, image = result.steps[:3]
    assert [refresh["key"], ci_base["depends_on"], image["depends_on"]] == [
        "refresh-rocm-base-amd",
        "refresh-rocm-base-amd",
        "ensure-ci-base-amd",
    ]
    assert refresh["timeout_in_minutes"] == 540 and image["env"]["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx942;gfx950"
    assert image["commands"][0] == "bash .buildkite/scripts/rocm/build-test-image.sh"
    assert ci_base["env"]["DEEPEP_ROCM_ARCH"] == image["env"]["DEEPEP_ROCM_ARCH"] == "gfx942;gfx950"
    assert "DEEPEP_ROCM_ARCH" not in generate.generate(load(), Options()).steps[2]["env"]
    skipped = generate.generate(load(), Options(inputs=TemplateInputs(rocm_base_refresh_skip="1"))).steps[0]
    assert skipped["timeout_in_minutes"] == 15 and skipped["env"]["ROCM_BASE_REFRESH_SKIP"] == "1"


def test_block_steps_and_their_reasons():
    result = gen(list_file_diff="docs/README.md|.buildkite/scripts/hardware_ci/run-amd-test.sh")
    steps = by_label(result)
    assert steps["Run mi300_1: Optional nightly"]["key"] == "block-mi300_1-optional-nightly"
    assert steps["mi300_1: Optional nightly"]["depends_on"] == "block-mi300_1-optional-nightly"
    assert "Run mi300_2: Kernels" in steps
    assert "Run mi300_1: Native CPU" not in steps  # run-amd-test.sh changed: native steps run
    reasons = {d.step.label: (d.action, d.reason) for d in result.decisions}
    assert reasons["Kernels"] == ("block", "no changed file matches its source_file_dependencies")
    assert reasons["Native CPU"][1].startswith(".buildkite/scripts/hardware_ci/run-amd-test.sh changed")
    assert reasons["Experimental only"][0] == "skip"
    nightly = by_label(gen(nightly="1", list_file_diff="nightly"))
    assert not [label for label in nightly if label.startswith("Run ")]


def test_backslashes_are_unescaped_once_like_the_template_and_bad_text_is_a_problem():
    assert scalars.command_text("find . -exec x {} \\\\;") == "find . -exec x {} \\;"
    with pytest.raises(scalars.TemplateBreak, match="unknown escape"):
        scalars.command_text("find . -exec x {} \\;")
    with pytest.raises(scalars.TemplateBreak, match="double quote"):
        scalars.double_quoted('label "quoted"')
    assert scalars.plain("true") is True and scalars.plain("block-a:b") == "block-a:b"


@pytest.mark.parametrize(
    ("request_", "run_all", "nightly", "listing"),
    [
        (Request(changed=("vllm/a.py", "tests/b.py")), "0", "0", "vllm/a.py|tests/b.py"),
        (Request(changed=("requirements/common.txt",)), "1", "0", "run_all"),
        (Request(changed=("csrc/cpu/x.cpp", "cmake/cpu_extension.cmake")), "0", "0", None),
        (Request(changed=("docker/Dockerfile.rocm_base",)), "0", "1", "nightly"),
        (Request(changed=("vllm/a.py",), labels=("ready-run-all-tests",)), "1", "1", "run_all"),
        (Request(changed=None), "1", "0", "run_all"),
    ],
)
def test_bootstrap_decisions(request_, run_all, nightly, listing):
    decision = bootstrap.decide(request_)
    assert (decision.inputs.run_all, decision.inputs.nightly) == (run_all, nightly)
    assert decision.inputs.list_file_diff == (listing or "|".join(request_.changed))
    assert decision.inputs.vllm_use_precompiled == ("0" if "1" in (run_all, nightly) else "1")
    assert bool(decision.reasons) == ("1" in (run_all, nightly))


def test_bootstrap_skips_docs_only_changes_and_fastcheck_uses_its_mirror():
    assert bootstrap.decide(Request(changed=("docs/a.md", "x/README.md", "mkdocs.yaml"))).skip
    assert bootstrap.decide(Request(changed=("docs/a.md",), docs_only_disable=True)).skip is None
    assert bootstrap.decide(Request(pipeline_slug="fastcheck")).inputs.mirror_hw == "amdtentative"


def test_keep_going_holds_an_erroneous_step_behind_a_block_step():
    src = load()
    result = gen(run_all="1")
    bad = Finding("steps.yaml", 4, 3, "gpu-count", ERROR, "needs 2 GPUs")
    pipeline, held = keepgoing.hold(src, result, [bad])
    members = pipeline["steps"][0]["steps"]
    at = next(i for i, s in enumerate(members) if s.get("label") == "mi300_2: Kernels")
    block = members[at - 1]
    assert block["block"].startswith("rocmci: needs 2 GPUs (steps.yaml:4)") and block["key"] == "block-mi300_2-kernels"
    assert members[at]["depends_on"] == "block-mi300_2-kernels" and block["depends_on"] == "image-build-amd"
    assert [(h.title, h.how) for h in held] == [("mi300_2: Kernels", "held")]
    assert result.steps[3]["depends_on"] == "image-build-amd"  # the generated pipeline itself is untouched
    # A step that already waits behind the template's block step keeps that block, now carrying the finding.
    optional = Finding("steps.yaml", 14, 3, "x", ERROR, "bad")
    pipeline, _ = keepgoing.hold(src, result, [optional])
    labels = [s.get("block", "") for s in pipeline["steps"][0]["steps"]]
    assert sum(label.startswith("rocmci: bad") for label in labels) == 1
    assert len(pipeline["steps"][0]["steps"]) == len(result.steps)


def test_same_input_same_output():
    assert gen(list_file_diff="x").pipeline == gen(list_file_diff="x").pipeline
