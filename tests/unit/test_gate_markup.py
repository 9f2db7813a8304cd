"""Issue 32, class 2: markup injection on the build page. Outside text (step labels, test ids, findings) in
the annotations rocmci writes (`annotation.md`, `buildkite-agent annotate`, `pipeline.generate --annotation`)
renders as the text it is: rendered by a real CommonMark renderer with raw HTML and GFM tables on (as
Buildkite renders annotations), no tag, link, image or code span of the text's own appears, and a table row
keeps its cells."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from rocmci.findings import ERROR, Finding
from rocmci.pipeline import keepgoing
from rocmci.runs.results import JUnitSummary, Outcome, Result, render_annotation
from tests.unit.gate_cli import outside_any_workspace_fixture, rocmci_fixture  # noqa: F401 - fixtures

ATTACKS = [
    "x` <img src=x onerror=alert(1)> [click](https://evil.example) `y",
    "tests/t.py::test[<script>alert(1)</script>]",
    "</details><details open><summary>fake</summary>",
    "![pixel](https://evil.example/p.png) and [a][b] <https://evil.example>",
    "```\n**not code any more**\n```",
    "a | b | c",
    "&lt;img&gt; <!-- hidden -->",
]
RENDER = MarkdownIt("commonmark", {"html": True}).enable("table")


def _tags(html: str) -> set[str]:
    return set(re.findall(r"<\s*/?\s*([a-zA-Z][a-zA-Z0-9]*)", html))


def _clean(html: str, allowed: set[str]) -> None:
    assert _tags(html) <= allowed, html
    assert "evil.example" not in "".join(re.findall(r'(?:href|src)="([^"]*)"', html)), html


@pytest.mark.parametrize("text", ATTACKS)
def test_a_held_title_renders_as_its_text(text):
    finding = Finding("steps.yaml", 3, 3, "gpu-count", ERROR, f"bad {text}")
    held = [keepgoing.Held(0, f"mi300_1: {text}", (finding,), "held")]
    html = RENDER.render(keepgoing.annotation(f"steps{text}.yaml", [finding], held))
    _clean(html, {"p", "strong", "code", "ul", "li", "pre"})
    assert html.count("<code>") == 3 and html.count("<pre>") == 1  # the name, the title, the findings block


@pytest.mark.parametrize("text", ATTACKS)
def test_a_test_id_in_the_results_annotation_renders_as_its_text(text):
    r = Result(f"moe {text}", Outcome.FAILED, 1, 2.0, f"failing: {text}", JUnitSummary(tests=2, failures=1))
    html = RENDER.render(render_annotation([r], [f"note {text} (vllm-project/vllm#1)"]))
    _clean(html, {"h3", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "a", "p"})
    assert html.count("<td>") == 5  # one row, five cells: nothing split a cell
    assert html.count("<a ") == 1  # only rocmci's own link, to the issue


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(st.text(st.sampled_from("<>[]()!`|\\&*_#-\n /:a") | st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_no_text_makes_markup(text):
    from rocmci import markup  # the one escaper (imported here: on code without it, the other tests still run)

    html = RENDER.render(f"| a |\n|---|\n| {markup.inline(text)} |\n\n- {markup.code(text)}\n")
    assert _tags(html) <= {"table", "thead", "tbody", "tr", "th", "td", "ul", "li", "code"}, html
    assert html.count("<td>") == 1 and html.count("<code>") == 1


def test_keep_going_writes_an_annotation_with_no_markup_of_the_step_file(rocmci, outside_any_workspace):
    label = "Gated` <img src=x onerror=alert(1)> `</details>"
    source = outside_any_workspace / "steps.yaml"
    source.write_text(f"steps:\n- label: {json.dumps(label)}\n  agent_pool: mi300_1\n  mirror_hardwares: "
                      "[amdproduction]\n  commands: [\"echo \\u001b\"]\n")  # fmt: skip
    annotation = outside_any_workspace / "annotation.md"
    code, _, err = rocmci("pipeline.generate", "--source", str(source), "--keep-going", "--out", "p.yaml",
                          "--annotation", str(annotation))  # fmt: skip
    assert code == 0, err
    _clean(RENDER.render(annotation.read_text()), {"p", "strong", "code", "ul", "li", "pre"})
