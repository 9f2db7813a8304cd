"""Differential conformance: rocmci's generator against ci-infra's real template, field by field.

ci-infra's test-template-amd.j2 is rendered with minijinja (the engine bootstrap-amd.sh uses through
minijinja-cli) with the variables bootstrap-amd.sh passes, for both shared vLLM step files and a step
file of the features they do not use, in a PR, run_all, nightly and main-branch build. Every field of
every step must be equal, except conformance.ALLOWED (each listed with its reason in README).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.pipeline import (
    bootstrap,
    citemplate,
    conformance,
    generate,
    inventory,
    keepgoing,
    rules,
    service,
    source,
    validate,
)
from tests.conftest import REPO, run_invoke

SHARED = REPO.parent / "shared" / "fixtures"
TEMPLATE = SHARED / "ci-infra" / "buildkite" / "test-template-amd.j2"
VLLM_FILES = [SHARED / "vllm" / "test-amd.yaml", SHARED / "vllm" / "test-amd.58da4ee04.yaml"]
# Older eras of the same file (December 2025 upstream, a March 2026 fork): NVIDIA keys of the shared format,
# steps no AMD mirror renders, and 2-node steps whose commands are per-node lists.
OLDER_FILES = [SHARED / "vllm" / "test-amd.a0b421b7.yaml", SHARED / "vllm" / "test-amd.b47dcc58.yaml"]
FEATURES = REPO / "tests" / "data" / "pipeline" / "conformance" / "features.yaml"
WRONG_TYPES = REPO / "tests" / "data" / "pipeline" / "conformance" / "wrong-types.yaml"
# Values of the wrong type or past a bound that rocmci once left out of the pipeline (issue #19 item 4).
ONCE_DROPPED = REPO / "tests" / "data" / "pipeline" / "conformance" / "once-dropped.yaml"
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
@pytest.mark.parametrize(
    "step_file", [*VLLM_FILES, *OLDER_FILES, FEATURES, WRONG_TYPES, ONCE_DROPPED], ids=lambda p: p.name
)
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


@pytest.mark.parametrize("case", ["pr", "run_all", "nightly"])
@pytest.mark.parametrize("mirror_hw", ["amdproduction", "amdexperimental"])
@pytest.mark.parametrize("step_file", OLDER_FILES, ids=lambda p: p.name)
def test_older_step_files_generate_as_ci_infra_renders_them_with_nothing_held(step_file, mirror_hw, case):
    """Files vLLM's real AMD CI ran: 0 errors (so --keep-going holds nothing) and the render, 2-node steps included."""
    request = CASES[case]._replace(mirror_hw=mirror_hw)
    inputs = bootstrap.decide(request).inputs
    src = source.load_source(step_file, step_file.name)
    generated = generate.generate(src, generate.Options(inputs=inputs))
    ctx = rules.Context(inventory=inventory.load_inventory(service.packaged_inventory()), archs=("gfx942", "gfx950"))
    report = validate.validate_generated(src, generated, ctx)
    errors = [f for f in report.findings if f.severity == "error"]
    if (step_file.name, mirror_hw) == ("test-amd.b47dcc58.yaml", "amdexperimental"):
        # a true defect of that fork: with its block steps (a PR build) 506 steps for amdexperimental, past
        # Buildkite's 500 per upload
        assert [f.rule for f in errors] == (["step-limit"] if case == "pr" else [])
        errors = []
    assert errors == [], [f.text() for f in errors][:5]
    pipeline, held = keepgoing.hold(src, generated, errors)
    assert held == [] and pipeline == generated.pipeline
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(TEMPLATE, step_file, inputs), "ci-infra render")
    comparison = conformance.compare(reference, rocmci_steps(step_file, inputs))
    assert not comparison.unexpected, comparison.summary(examples=10)
    assert comparison.reference_steps == comparison.our_steps > 4
    multi_node = [
        s for _, s in conformance.flatten_steps(reference) if (s.get("env") or {}).get("VLLM_NODE_COMMAND_COUNT")
    ]
    # the 2-node steps: on mi325_4 (amdexperimental only) in December 2025; on mi250_4 and mi325_4, and for
    # amdexperimental also mi355_4, in March 2026. Each node's commands arrive as a list, as minijinja-cli 2.3.1
    # prints one (Rust's Debug format: ["a", "b"]; newer minijinja prints ['a', 'b'])
    expected = {"a0b421b7": {"amdproduction": 0, "amdexperimental": 1}, "b47dcc58": {"amdproduction": 2}}
    assert len(multi_node) == expected[step_file.name.split(".")[1]].get(mirror_hw, 3)
    assert all(s["env"]["VLLM_NODE_COMMAND_1"].endswith('"]') for s in multi_node)


def test_keep_going_holds_every_step_with_an_error_and_drops_none():
    """Wrong types, no label, no pool: ci-infra renders such steps (the test above compares them), so rocmci
    renders them too and --keep-going gates each one behind a block step; nothing is left out."""
    inputs = bootstrap.decide(CASES["run_all"]).inputs
    src = source.load_source(WRONG_TYPES, WRONG_TYPES.name)
    generated = generate.generate(src, generate.Options(inputs=inputs))
    ctx = rules.Context(inventory=inventory.load_inventory(service.packaged_inventory()), archs=("gfx942",))
    report = validate.validate_generated(src, generated, ctx)
    pipeline, held = keepgoing.hold(src, generated, report.findings)
    rendered = [i for i, raw in enumerate(src.raw_steps) if source.renders(raw, inputs.mirror_hw)]
    assert len(src.steps) == len(rendered) == 13
    with_errors = keepgoing.errors_by_step(src, report.findings)
    assert len(with_errors) >= 9  # all but the harmless types (a label 123, a mirror list written as text)
    assert sorted(h.step_index for h in held) == sorted(with_errors) and {h.how for h in held} == {"held"}
    members = pipeline["steps"][0]["steps"]
    for h in held:  # each held step waits for its block step
        step = next(
            m
            for m in members
            if m.get("env", {}).get(generate.ORIGIN_ENV, "").endswith(f":{src.doc.pos(('steps', h.step_index)).line}")
        )
        assert step["depends_on"].startswith(("block-", "rocmci-hold-"))
