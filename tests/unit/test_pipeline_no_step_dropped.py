"""No step dropped (issue #19 item 4): every step ci-infra's template renders is in the generated pipeline.

Where the render is a pipeline Buildkite accepts, rocmci's step equals it (tests/functional/test_conformance.py
compares the fields; here the counts). Where the template stops on a value (the whole render fails, so
bootstrap-amd.sh uploads nothing) or renders YAML no parser reads, the error says so, the step is still
generated, and --keep-going holds it behind a block step in a pipeline that Buildkite accepts.
All against ci-infra's real test-template-amd.j2, rendered with minijinja.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.errors import InputError
from rocmci.pipeline import (
    bootstrap,
    citemplate,
    conformance,
    generate,
    inventory,
    keepgoing,
    rules,
    schema,
    service,
    source,
    validate,
)
from tests.conftest import REPO

TEMPLATE = REPO.parent / "shared" / "fixtures" / "ci-infra" / "buildkite" / "test-template-amd.j2"
DATA = REPO / "tests" / "data" / "pipeline" / "conformance"
FILES = [DATA / "once-dropped.yaml", DATA / "wrong-types.yaml", DATA / "features.yaml"]
CASES = {
    "pr": bootstrap.Request(changed=("vllm/distributed/x.py",), branch="feature/x"),
    "run_all": bootstrap.Request(changed=("csrc/moe/topk.cu",), branch="feature/x"),
    "main": bootstrap.Request(changed=("vllm/distributed/x.py",), branch="main"),
}
STEP = "- label: shape\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_2\n"
# The template raises on these values (minijinja's message), so ci-infra's whole render fails.
STOPS = {
    "env-a-list": ("  no_plugin: true\n  env: [A]\n  command: x\n", "env", "cannot convert value into pairs"),
    "agent_tags-text": ("  dind: false\n  agent_tags: zone\n  commands: [x]\n", "agent_tags", "into pairs"),
    "agent_tags-a-list-dind-0": ("  dind: 0\n  agent_tags: [zone]\n  commands: [x]\n", "agent_tags", "into pairs"),
    "deps-a-number": ("  source_file_dependencies: 5\n  commands: [x]\n", "source_file_dependencies", "not iterable"),
    "deps-item-a-number": ("  source_file_dependencies: [1]\n  commands: [x]\n", "source_file_dependencies", "length"),
    "mirrors-a-number": ("  commands: [x]\n", "mirror_hardwares", "containment"),
    "commands-a-number": ("  commands: 5\n", "commands", "cannot join"),
}
# The template renders these into YAML that buildkite-agent cannot parse: the upload is refused.
UNPARSABLE = {
    "label-a-list": "  commands: [x]\n",
    "pool-a-mapping": "  commands: [x]\n",
    "working_dir-a-list": "  working_dir: [/tmp]\n  commands: [x]\n",
    "node-command-with-a-quote": "  num_nodes: 2\n  commands: [['echo \"hi\"'], [b]]\n",
}

pytestmark = pytest.mark.skipif(not TEMPLATE.is_file(), reason=f"{TEMPLATE} not found")


def _test_steps(members: list) -> list:
    """The group's test steps: neither the 3 image steps nor block steps."""
    return [s for s in members if "block" not in s and s.get("depends_on") != "refresh-rocm-base-amd"][2:]


def _context() -> rules.Context:
    return rules.Context(inventory=inventory.load_inventory(service.packaged_inventory()), archs=("gfx942",))


def _shape_file(tmp_path: Path, name: str, extra: str) -> Path:
    step = STEP
    if name == "label-a-list":
        step = step.replace("label: shape", "label: [shape]")
    elif name == "pool-a-mapping":
        step = step.replace("agent_pool: mi300_2", "agent_pool: {mi300: 2}")
    elif name == "mirrors-a-number":
        step = step.replace("mirror_hardwares: [amdproduction]", "mirror_hardwares: 5")
    path = tmp_path / f"{name}.yaml"
    # a good step before and after: the bad one must not take its neighbours with it
    good = "- label: good {n}\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n  commands: [x]\n"
    path.write_text("steps:\n" + good.format(n=1) + step + extra + good.format(n=2))
    return path


def _held(path: Path, inputs: bootstrap.TemplateInputs):
    src = source.load_source(path, path.name)
    generated = generate.generate(src, generate.Options(inputs=inputs))
    report = validate.validate_generated(src, generated, _context())
    pipeline, held = keepgoing.hold(src, generated, report.findings)
    return src, generated, report, pipeline, held


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("step_file", FILES, ids=lambda p: p.name)
def test_generated_steps_are_the_rendered_steps(step_file, case):
    inputs = bootstrap.decide(CASES[case]).inputs
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(TEMPLATE, step_file, inputs), "ci-infra")
    src = source.load_source(step_file, step_file.name)
    generated = generate.generate(src, generate.Options(inputs=inputs))
    ours = citemplate.parse_pipeline(service.render(generated.pipeline, "yaml", step_file.name), "rocmci")
    rendered = [i for i, raw in enumerate(src.raw_steps) if source.renders(raw, inputs.mirror_hw)]
    assert len(_test_steps(ours[0]["steps"])) == len(_test_steps(reference[0]["steps"])) == len(rendered) >= 5
    assert len(conformance.flatten_steps(ours)) == len(conformance.flatten_steps(reference))
    # and --keep-going adds block steps only: every rendered step is still there, none left out
    _, _, _, pipeline, held = _held(step_file, inputs)
    assert "left out" not in {h.how for h in held}
    assert len(_test_steps(pipeline["steps"][0]["steps"])) == len(rendered)


def test_every_once_dropped_step_is_reported_and_held():
    """Each step of once-dropped.yaml has a mistake; the ones that are errors wait behind a block step."""
    inputs = bootstrap.decide(CASES["run_all"]).inputs
    src, _, report, pipeline, held = _held(DATA / "once-dropped.yaml", inputs)
    errors = keepgoing.errors_by_step(src, report.findings)
    # the bounds and the null env value are errors (a value the CI receives changed, or a typo); a timeout
    # of 0100 reaches the CI as the 180-minute cap: the step still runs, so that is a warning, not held
    assert {9, 10, 11, 4} <= set(errors) and 0 not in errors
    line = src.doc.pos(("steps", 0, "timeout_in_minutes")).line
    assert [f.severity for f in report.findings if f.rule == "yaml-meaning" and f.line == line] == ["warning"]
    assert sorted(h.step_index for h in held) == sorted(errors) and {h.how for h in held} == {"held"}
    assert schema.is_valid(pipeline)


@pytest.mark.parametrize("name", sorted(STOPS))
def test_a_value_the_template_stops_on_is_an_error_that_says_so_and_the_step_is_held(tmp_path, name):
    extra, key, minijinja_says = STOPS[name]
    path = _shape_file(tmp_path, name, extra)
    inputs = bootstrap.decide(CASES["run_all"]).inputs
    with pytest.raises(InputError, match=minijinja_says):
        citemplate.render_ci_infra(TEMPLATE, path, inputs)
    src, generated, report, pipeline, held = _held(path, inputs)
    assert len(_test_steps(generated.steps)) == 3
    said = [f for f in report.findings if f.severity == "error" and f.line == src.doc.pos(("steps", 1, key)).line]
    assert said and "stops on it" in said[0].message and "uploads no pipeline" in said[0].message, report.findings
    assert [(h.step_index, h.how) for h in held] == [(1, "held")]
    assert len(_test_steps(pipeline["steps"][0]["steps"])) == 3 and schema.is_valid(pipeline)


@pytest.mark.parametrize("name", sorted(UNPARSABLE))
def test_a_render_no_parser_reads_is_an_error_and_the_step_is_held(tmp_path, name):
    path = _shape_file(tmp_path, name, UNPARSABLE[name])
    inputs = bootstrap.decide(CASES["run_all"]).inputs
    text = citemplate.render_ci_infra(TEMPLATE, path, inputs)
    with pytest.raises(InputError, match="invalid YAML"):
        citemplate.parse_pipeline(text, "ci-infra render")
    src, generated, report, pipeline, held = _held(path, inputs)
    assert len(_test_steps(generated.steps)) == 3
    errors = keepgoing.errors_by_step(src, report.findings)
    assert list(errors) == [1] and any(f.rule == "template-escape" for f in errors[1]), report.findings
    assert [(h.step_index, h.how) for h in held] == [(1, "held")]
    # what rocmci writes is a pipeline buildkite-agent reads, with the held step in it
    written = citemplate.parse_pipeline(service.render(pipeline, "yaml", path.name), "rocmci")
    assert len(_test_steps(written[0]["steps"])) == 3 and schema.is_valid(pipeline)
