"""Promises of pipeline generate / amdsteps that mutation testing (issue 24) found unguarded.

Each test feeds the generator a real step-file text (or vLLM's and ci-infra's real files from
../shared/fixtures) and compares whole outputs: the problems validate turns into findings, the steps written.
"""

from __future__ import annotations

import pytest

from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.pipeline import amdsteps as amd
from rocmci.pipeline import bootstrap, citemplate, conformance, generate, service, source
from tests.conftest import REPO

TEMPLATE = REPO.parent / "shared" / "fixtures" / "ci-infra" / "buildkite" / "test-template-amd.j2"


def _step_file(tmp_path, text: str):
    step_file = tmp_path / "steps.yaml"
    step_file.write_text(text)
    return step_file


def refused_by_ci_infra_then_generated(tmp_path, text: str, inputs, refusal: str):
    """ci-infra's real render of the step file `text` is YAML that buildkite-agent refuses (`refusal`, the
    parser's complaint); returns rocmci's loaded step file and its generation of the same file."""
    with pytest.raises(InputError, match=refusal):
        citemplate.parse_pipeline(citemplate.render_ci_infra(TEMPLATE, _step_file(tmp_path, text), inputs), "render")
    src = source.from_document(yamldoc.parse(text, "steps.yaml"))
    return src, generate.generate(src, generate.Options(inputs=inputs))


QUOTES = """\
steps:
- label: Say "hi"
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  source_file_dependencies: [vllm/never]
  commands: [pytest x]
- label: Tags
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  dind: false
  agent_tags:
    zone: 'a"b'
  commands: [pytest y]
"""


def test_a_double_quote_in_a_label_or_agent_tag_is_a_template_escape_error_on_its_step(tmp_path):
    """The template pastes labels, block labels and agent tag values between double quotes without escaping:
    ci-infra's real render of such a file is YAML buildkite-agent refuses, so rocmci reports one error per
    pasted place, on the step and key at fault, and writes the text as written in its place."""
    inputs = bootstrap.TemplateInputs(list_file_diff="README.md")  # a PR build: the first step is gated
    src, result = refused_by_ci_infra_then_generated(tmp_path, QUOTES, inputs, "invalid YAML")
    said, tags = src.steps
    message = "contains a double quote that the template does not escape: the YAML would break"
    assert [(p.step, p.key, p.message, p.rule, p.severity) for p in result.problems] == [
        (said, "label", message, "template-escape", "error"),  # the block step's label
        (said, "label", message, "template-escape", "error"),  # the test step's label
        (tags, "agent_tags", message, "template-escape", "error"),
    ]
    block, gated, native = result.steps[3:]
    assert block == {"block": 'Run mi300_1: Say "hi"', "depends_on": "image-build-amd", "key": 'block-mi300_1-say-"hi"'}
    assert (gated["label"], gated["depends_on"]) == ('mi300_1: Say "hi"', 'block-mi300_1-say-"hi"')
    assert native["agents"] == {"queue": "amd_mi300_1", "zone": 'a"b'}


def test_a_mapping_of_several_entries_prints_as_rust_debug_with_comma_space():
    """minijinja-cli 2.3.1 prints a mapping with Rust's Debug format: entries joined by ", " (a multi-node
    step's per-node command reaches VLLM_NODE_COMMAND_<i> this way). The differential test cannot see this
    one: citemplate prints lists and mappings through the same rust_debug."""
    assert amd.rust_text({"a": 1, "b": [None, True], "c": {"d": "e", "f": 1.0}}) == (
        '{"a": 1, "b": [none, true], "c": {"d": "e", "f": 1.0}}'
    )
    env = amd.runner_env({"num_nodes": 2, "commands": [{"x": 1, "y": 2}, "b"]}, 180, "", amd.CI_IMAGE)
    assert env["VLLM_NODE_COMMAND_0"].endswith(' && {"x": 1, "y": 2}')


NULL_ENV = """\
steps:
- label: Nulls
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  no_plugin: true
  command: python3 -c pass
  env:
    X: null
    Y: ok
"""


def test_an_explicit_null_env_value_reaches_the_ci_as_none_and_is_a_yaml_meaning_error(tmp_path):
    """A no_plugin step's `env: {X: null}`: the template prints minijinja's none, so the CI receives the text
    'none' (ci-infra's real render says so); rocmci writes the same and reports that '' was meant."""
    step_file = tmp_path / "steps.yaml"
    step_file.write_text(NULL_ENV)
    inputs = bootstrap.TemplateInputs(run_all="1")
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(TEMPLATE, step_file, inputs), "ci-infra")
    assert reference[-1]["steps"][-1]["env"] == {"X": "none", "Y": "ok"}

    src = source.from_document(yamldoc.parse(NULL_ENV, "steps.yaml"))
    result = generate.generate(src, generate.Options(inputs=inputs))
    assert result.steps[3]["env"] == {"X": "none", "Y": "ok", generate.ORIGIN_ENV: "steps.yaml:2"}
    message = (
        "env X '' is null to minijinja-cli, which prints a null as 'none' into the pipeline: the CI receives 'none';"
        " to send '', write the YAML quotes into the value (\"''\"), since the template pastes it without quotes"
    )
    assert [(p.step, p.key, p.message, p.rule, p.severity) for p in result.problems] == [
        (src.steps[0], "env", message, "yaml-meaning", "error")
    ]


LINE_BREAK = """\
steps:
- label: "two\\nlines"
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  source_file_dependencies: [vllm/never]
  commands: [pytest x]
"""


def test_a_line_break_in_a_gated_steps_label_breaks_the_block_key_and_its_depends_on(tmp_path):
    """A gated step's block key and the test step's depends_on are `block-<slug>` written as plain YAML: a
    label with a line break makes ci-infra's real render unreadable, and rocmci reports both places on the
    step's label (the double-quoted labels fold the break to a space and stay valid)."""
    inputs = bootstrap.TemplateInputs(list_file_diff="README.md")
    src, result = refused_by_ci_infra_then_generated(tmp_path, LINE_BREAK, inputs, "invalid YAML")
    message = "contains a line break: the template writes it as a plain YAML value"
    step = src.steps[0]
    assert [(p.step, p.key, p.message, p.rule) for p in result.problems] == [
        (step, "label", message, "template-escape"),  # the block step's key
        (step, "label", message, "template-escape"),  # the test step's depends_on
    ]
    block, gated = result.steps[3:]
    assert (block["block"], block["key"]) == ("Run mi300_1: two lines", "block-mi300_1-two\nlines")
    assert (gated["label"], gated["depends_on"]) == ("mi300_1: two lines", "block-mi300_1-two\nlines")


BAD_POOL = """\
steps:
- label: Pool
  mirror_hardwares: [amdproduction]
  agent_pool: "mi300: 1"
  commands: [pytest x]
"""


def test_an_agent_pool_that_breaks_the_plain_queue_value_is_an_error_on_agent_pool(tmp_path):
    """`queue: amd_{{ agent_pool }}` is pasted bare: a pool with ': ' makes ci-infra's real render unreadable at
    that line, and rocmci reports it on the step's agent_pool, the queue keeping the text as written."""
    inputs = bootstrap.TemplateInputs(run_all="1")
    src, result = refused_by_ci_infra_then_generated(tmp_path, BAD_POOL, inputs, "mapping values are not allowed")
    message = "not a valid plain YAML value once pasted by the template: mapping values are not allowed in this context"
    assert [(p.step, p.key, p.message, p.rule) for p in result.problems] == [
        (src.steps[0], "agent_pool", message, "template-escape")
    ]
    assert result.steps[3]["agents"] == {"queue": "amd_mi300: 1"}


def test_a_command_ending_in_a_backslash_breaks_vllm_test_commands_and_is_an_error_on_commands(tmp_path):
    """VLLM_TEST_COMMANDS is written between double quotes with only `"` escaped: a trailing backslash escapes
    the closing quote, ci-infra's real render is unreadable, and rocmci reports it on `commands` and writes
    the step with no runner environment but its origin (never a half-made one)."""
    text = "steps:\n- label: S\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n"
    text += '  commands: ["echo x\\\\"]\n'
    inputs = bootstrap.TemplateInputs(run_all="1")
    src, result = refused_by_ci_infra_then_generated(tmp_path, text, inputs, "found unexpected end of stream")
    message = "not a valid double-quoted YAML string once pasted by the template: found unexpected end of stream"
    assert [(p.step, p.key, p.message, p.rule) for p in result.problems] == [
        (src.steps[0], "commands", message, "template-escape")
    ]
    assert result.steps[3]["env"] == {generate.ORIGIN_ENV: "steps.yaml:2"}
    assert generate.generate(src, generate.Options(inputs=inputs, origin_env=False)).steps[3]["env"] == {}


def test_a_parallelism_that_breaks_its_plain_value_is_an_error_on_parallelism(tmp_path):
    """`parallelism: {{ parallelism }}` is pasted bare: '2: 3' makes ci-infra's real render unreadable; rocmci
    reports it on the step's parallelism (no second, 'changed meaning' warning) and keeps the text."""
    text = 'steps:\n- label: S\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n  parallelism: "2: 3"\n'
    inputs = bootstrap.TemplateInputs(run_all="1")
    src, result = refused_by_ci_infra_then_generated(tmp_path, text, inputs, "mapping values are not allowed")
    message = "not a valid plain YAML value once pasted by the template: mapping values are not allowed in this context"
    assert [(p.step, p.key, p.message, p.rule, p.severity) for p in result.problems] == [
        (src.steps[0], "parallelism", message, "template-escape", "error")
    ]
    assert result.steps[3]["parallelism"] == "2: 3"


def ci_infra_and_rocmci(step_file, inputs) -> tuple[list, list]:
    """The steps of ci-infra's real render of `step_file` and of rocmci's generated YAML, both read back."""
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(TEMPLATE, step_file, inputs), "ci-infra")
    src = source.load_source(step_file, step_file.name)
    pipeline = generate.generate(src, generate.Options(inputs=inputs, origin_env=False)).pipeline
    return reference, citemplate.parse_pipeline(service.render(pipeline, "yaml", step_file.name), "rocmci")


@pytest.mark.parametrize("odd_first", [True, False])
def test_a_num_gpus_written_as_retry_gets_its_pod_and_the_retry_rules_as_ci_infra_renders_them(tmp_path, odd_first):
    """Generated steps share one pod patch per GPU count and one retry rule set: a native step whose num_gpus
    is the text 'retry' (before or after another step) once got the retry rules as its plugins, or gave them
    its pod. The pipeline equals ci-infra's real render, field by field."""
    steps = [
        "- label: Plain\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n  dind: false\n  commands: [a]\n",
        "- label: Odd\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n  dind: false\n  num_gpus: retry\n"
        "  commands: [b]\n",
    ]
    text = "steps:\n" + "".join(reversed(steps) if odd_first else steps)
    step_file = _step_file(tmp_path, text)
    inputs = bootstrap.TemplateInputs(run_all="1")
    reference, ours = ci_infra_and_rocmci(step_file, inputs)
    comparison = conformance.compare(reference, ours)
    assert not comparison.differences, comparison.summary(examples=5)
    assert comparison.our_steps == 6  # the group, its three image steps, the two test steps
    odd = next(s for _, s in conformance.flatten_steps(ours) if s.get("label") == "mi300_1: Odd")
    assert odd["retry"] == amd.retry() and odd["plugins"][0]["kubernetes"]["podSpecPatch"]["containers"][0][
        "resources"] == {"limits": {"amd.com/gpu": "retry"}, "requests": {"amd.com/gpu": "retry"}}  # fmt: skip
