"""Differential conformance: rocmci's generator against ci-infra's real template, field by field.

ci-infra's test-template-amd.j2 is rendered with minijinja (the engine bootstrap-amd.sh uses through
minijinja-cli) with the variables bootstrap-amd.sh passes, for both shared vLLM step files and a step
file of the features they do not use, in a PR, run_all, nightly and main-branch build. Every field of
every step must be equal, except conformance.ALLOWED (each listed with its reason in README).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.pipeline import bootstrap, citemplate, conformance, generate, service, source
from tests.conftest import REPO, run_invoke

SHARED = REPO.parent / "shared" / "fixtures"
TEMPLATE = SHARED / "ci-infra" / "buildkite" / "test-template-amd.j2"
VLLM_FILES = [SHARED / "vllm" / "test-amd.yaml", SHARED / "vllm" / "test-amd.58da4ee04.yaml"]
FEATURES = REPO / "tests" / "data" / "pipeline" / "conformance" / "features.yaml"
# A PR touching a few areas (paths taken from the step files' source_file_dependencies) and the runner.
PR_CHANGES = (
    "vllm/distributed/parallel_state.py",
    "tests/kernels/moe/test_deepep_moe.py",
    "vllm/model_executor/layers/fused_moe/layer.py",
    ".buildkite/scripts/hardware_ci/run-amd-test.sh",
    "README.md",
)
CASES = {
    "pr": bootstrap.Request(changed=PR_CHANGES, branch="feature/x"),
    "run_all": bootstrap.Request(changed=("csrc/moe/topk.cu",), branch="feature/x"),
    "nightly": bootstrap.Request(changed=("docker/Dockerfile.rocm_base",), branch="feature/x"),
    "main": bootstrap.Request(changed=("vllm/distributed/utils.py",), branch="main"),
}

pytestmark = pytest.mark.skipif(
    not TEMPLATE.is_file(), reason=f"{TEMPLATE} not found (the shared fixtures sit beside the repository)"
)


def rocmci_steps(step_file: Path, inputs: bootstrap.TemplateInputs) -> list:
    """rocmci's pipeline as it is written to disk (rendered YAML, read back), to test the whole path."""
    src = source.load_source(step_file, step_file.name)
    pipeline = generate.generate(src, generate.Options(inputs=inputs)).pipeline
    return citemplate.parse_pipeline(service.render(pipeline, "yaml", step_file.name), "rocmci")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("step_file", [*VLLM_FILES, FEATURES], ids=lambda p: p.name)
def test_generator_equals_ci_infra_template(step_file, case):
    decision = bootstrap.decide(CASES[case])
    assert decision.skip is None
    reference = citemplate.parse_pipeline(
        citemplate.render_ci_infra(TEMPLATE, step_file, decision.inputs), "ci-infra render"
    )
    comparison = conformance.compare(reference, rocmci_steps(step_file, decision.inputs))
    assert not comparison.unexpected, comparison.summary(examples=10)
    assert comparison.reference_steps == comparison.our_steps > 4
    # The allowed differences are exactly the documented additions, once per test step.
    assert {d.field for d in comparison.differences} <= set(conformance.ALLOWED)


def test_cases_exercise_both_gates_and_every_feature():
    """The cases are not vacuous: runs, block steps, native pods, no_plugin and multi-node all occur."""
    seen: dict[str, set] = {}
    for case, request in CASES.items():
        inputs = bootstrap.decide(request).inputs
        for step_file in [*VLLM_FILES, FEATURES]:
            text = citemplate.render_ci_infra(TEMPLATE, step_file, inputs)
            steps = conformance.flatten_steps(citemplate.parse_pipeline(text, "render"))
            kinds = seen.setdefault(case, set())
            for _, step in steps:
                kinds |= {k for k in ("block", "plugins", "parallelism") if k in step}
                env = step.get("env") or {}
                kinds |= {"multi-node"} if env.get("VLLM_CI_EXECUTION_MODE") == "multi-node" else set()
                kinds |= {"no_plugin"} if step.get("command", "").startswith("python3 -c") else set()
                kinds |= {"run"} if step.get("depends_on") == generate.IMAGE_STEP_KEY and "label" in step else set()
    assert seen["pr"] >= {"block", "plugins", "parallelism", "multi-node", "no_plugin", "run"}
    assert "block" in seen["run_all"] and "block" not in seen["nightly"]


def test_a_changed_template_is_reported_field_by_field(tmp_path):
    changed = tmp_path / "test-template-amd.j2"
    changed.write_text(TEMPLATE.read_text().replace('HF_HUB_ETAG_TIMEOUT: "60"', 'HF_HUB_ETAG_TIMEOUT: "90"'))
    inputs = bootstrap.decide(CASES["run_all"]).inputs
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(changed, VLLM_FILES[0], inputs), "render")
    comparison = conformance.compare(reference, rocmci_steps(VLLM_FILES[0], inputs))
    native = sum(1 for _, s in conformance.flatten_steps(reference) if "plugins" in s)
    assert native > 100
    assert comparison.counts() == {("env.HF_HUB_ETAG_TIMEOUT", conformance.CHANGED): native}
    assert "ci-infra '90' != rocmci '60'" in comparison.summary()


def test_pipeline_diff_task(tmp_path):
    changes = tmp_path / "changed.txt"
    changes.write_text("\n".join(PR_CHANGES) + "\n")
    args = ["--template", str(TEMPLATE), "--source", str(VLLM_FILES[1]), "--changed-files", str(changes)]
    done = run_invoke("pipeline.diff", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 unexpected differences" in done.stdout
    broken = tmp_path / "t.j2"
    broken.write_text(TEMPLATE.read_text().replace("priority: 100", "priority: 50"))
    done = run_invoke("pipeline.diff", "--template", str(broken), "--source", str(VLLM_FILES[1]), "--run-all")
    assert done.returncode == 1
    assert "x priority (different)" in done.stdout
