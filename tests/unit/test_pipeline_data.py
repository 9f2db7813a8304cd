"""Data-driven: every file under tests/data/pipeline carries the exact findings it must produce.

An invalid file lists `# expect: LINE RULE [warning]` lines; a valid file must produce no finding.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocmci.pipeline import generate, inventory, rules, source, validate

DATA = Path(__file__).resolve().parents[1] / "data" / "pipeline"
EXPECT = re.compile(r"^# expect: (\d+) ([a-z-]+)(?: (warning))?$", re.M)
ARCHS = ("gfx942", "gfx950")


def context() -> rules.Context:
    return rules.Context(inventory.load_inventory(DATA / "agents.yaml"), ARCHS)


def expected(path: Path) -> set[tuple[int, str, str]]:
    return {(int(line), rule, sev or "error") for line, rule, sev in EXPECT.findall(path.read_text())}


def source_findings(path: Path) -> list:
    ctx = context()
    src = source.load_source(path, path.name)
    return validate.validate_generated(src, generate.generate(src, generate.Options()), ctx).findings


def pipeline_findings(path: Path) -> list:
    return validate.validate_pipeline_file(path, context(), path.name).findings


def files(kind: str, validity: str) -> list[Path]:
    return sorted((DATA / kind / validity).glob("*.yaml"))


@pytest.mark.parametrize("path", files("source", "invalid"), ids=lambda p: p.name)
def test_invalid_source_gives_exactly_its_findings(path):
    found = source_findings(path)
    assert {(f.line, f.rule, f.severity) for f in found} == expected(path), "\n".join(f.text() for f in found)
    assert all(f.file == path.name for f in found)


@pytest.mark.parametrize("path", files("pipeline", "invalid"), ids=lambda p: p.name)
def test_invalid_pipeline_gives_exactly_its_findings(path):
    found = pipeline_findings(path)
    assert {(f.line, f.rule, f.severity) for f in found} == expected(path), "\n".join(f.text() for f in found)


@pytest.mark.parametrize("path", files("source", "valid"), ids=lambda p: p.name)
def test_valid_source_is_clean(path):
    assert [f.text() for f in source_findings(path)] == []


@pytest.mark.parametrize("path", files("pipeline", "valid"), ids=lambda p: p.name)
def test_valid_pipeline_is_clean(path):
    assert [f.text() for f in pipeline_findings(path)] == []


def test_every_rule_has_a_failing_example():
    covered = set()
    for path in files("source", "invalid") + files("pipeline", "invalid"):
        covered |= {rule for _, rule, _ in expected(path)}
    # yaml-syntax (exit 2) and step-limit (501 steps) are exercised in test_pipeline_rules.py, argument-size
    # (a command over 128 KiB) in tests/functional/test_env_values.py: files of that size stay out of tests/data
    assert set(rules.RULE_IDS) - covered == {"yaml-syntax", "step-limit", "argument-size"}


def test_a_ci_infra_render_has_no_finding_but_the_real_ones():
    """ci-infra's own output: its 540-minute base refresh on amd-cpu is the template's choice, not a finding."""
    from rocmci import yamldoc
    from rocmci.pipeline import bootstrap, citemplate

    shared = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"
    template = shared / "ci-infra" / "buildkite" / "test-template-amd.j2"
    if not template.is_file():
        pytest.skip(f"{template} not found (needs ../shared beside the repository)")
    agents = Path(__file__).resolve().parents[2] / ".buildkite" / "agents.yaml"
    ctx = rules.Context(inventory.load_inventory(agents), ARCHS)
    for name, real in (("test-amd.yaml", set()), ("test-amd.58da4ee04.yaml", {"gpu-count"})):
        text = citemplate.render_ci_infra(template, shared / "vllm" / name, bootstrap.TemplateInputs(run_all="1"))
        found = validate.validate_pipeline_document(yamldoc.parse(text, "render.yaml"), ctx).findings
        assert {f.rule for f in found} == real, "\n".join(f.text() for f in found)
