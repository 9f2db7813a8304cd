"""Characters that are line breaks or refused inside a double-quoted YAML value, in a command or a label.

The template pastes a step's commands into `VLLM_TEST_COMMANDS: "..."` and its label between double quotes.
A carriage return (or U+0085) there is a line break, which the YAML reader folds into a space: the job
runs `echo a b`, not `echo a<CR>b`. rocmci's shortcut for text with nothing to unescape (no backslash,
quote or line feed) once let such text through unchanged, so the generated pipeline differed from
ci-infra's render. Compared here with ci-infra's real template, field by field.
"""

from __future__ import annotations

import pytest

from rocmci.pipeline import bootstrap, conformance, scalars
from tests.unit.test_mutants_gen import ci_infra_and_rocmci


def _yaml_double_quoted(text: str) -> str:
    """A YAML double-quoted scalar holding `text` (the step file's own escapes, not the template's paste)."""
    out = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in text)
    return f'"{out}"'


@pytest.mark.parametrize("char", ["\r", "\x85"], ids=["CR", "NEL"])
@pytest.mark.parametrize("where", ["command", "label"])
def test_a_line_break_in_a_command_or_label_is_generated_as_ci_infra_renders_it(tmp_path, char, where):
    command = f"echo a{char}b" if where == "command" else "echo ok"
    label = f"Odd{char}one" if where == "label" else "Odd"
    step_file = tmp_path / "steps.yaml"
    step_file.write_text(
        "steps:\n"
        f"- label: {_yaml_double_quoted(label)}\n"
        "  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n"
        f"  commands:\n  - {_yaml_double_quoted(command)}\n"
    )
    inputs = bootstrap.TemplateInputs(run_all="1")
    reference, ours = ci_infra_and_rocmci(step_file, inputs)
    comparison = conformance.compare(reference, ours)
    assert not comparison.differences, comparison.summary(examples=5)
    step = next(s for _, s in conformance.flatten_steps(ours) if "VLLM_TEST_COMMANDS" in (s.get("env") or {}))
    if where == "command":
        assert step["env"]["VLLM_TEST_COMMANDS"].endswith(" && echo a b")
    else:
        assert step["label"] == "mi300_1: Odd one"


@pytest.mark.parametrize("fn", [scalars.double_quoted, scalars.command_text], ids=["double_quoted", "command_text"])
@pytest.mark.parametrize("text", ["a\x07b", "a\x1bb", "a\x7fb"], ids=["BEL", "ESC", "DEL"])
def test_a_control_character_is_a_template_break_not_passed_through(fn, text):
    """The YAML reader refuses these inside a double-quoted value: the pasted text breaks the upload."""
    with pytest.raises(scalars.TemplateBreak, match="control characters are not allowed"):
        fn(text)
