"""Data-driven: every file under tests/data/pipeline carries the exact findings it must produce.

An invalid file lists `# expect: LINE RULE [warning]` lines; a valid file must produce no finding.
"""

from __future__ import annotations

import re
from dataclasses import replace
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
    queues = {name: pool.queue for name, pool in ctx.inventory.pools.items()}
    opts = replace(generate.Options(mirror_hw="amdproduction", archs=ARCHS), queues=queues)
    return validate.validate_generated(src, generate.generate(src, opts), ctx).findings


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
    # yaml-syntax (exit 2) and step-limit (501 steps) are exercised in test_pipeline_rules.py
    assert set(rules.RULE_IDS) - covered == {"yaml-syntax", "step-limit"}
