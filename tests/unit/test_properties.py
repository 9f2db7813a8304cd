"""Property-based tests on mutations of the real vLLM step files.

- the loader, generator and validator never raise anything but InputError (exit 2), whatever the input;
- whenever a step file is valid, the pipeline generated from it passes rocmci's own validation, both
  in memory and after a round trip through the YAML file it would be uploaded as.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rocmci.errors import InputError
from rocmci.pipeline import generate, inventory, rules, service, source, validate, yamldoc
from rocmci.pipeline.findings import ERROR
from tests.conftest import REPO, SHARED_VLLM

FILES = [SHARED_VLLM / "test-amd.yaml", SHARED_VLLM / "test-amd.58da4ee04.yaml"]
if not all(f.is_file() for f in FILES):
    pytest.skip(f"real vLLM step files not found in {SHARED_VLLM}", allow_module_level=True)

TEXTS = [f.read_text() for f in FILES]
STEPS = [yaml.safe_load(t)["steps"] for t in TEXTS]
INVENTORY = inventory.load_inventory(REPO / ".buildkite" / "agents.yaml")
CTX = rules.Context(INVENTORY, ("gfx942", "gfx950"))
QUEUES = {name: pool.queue for name, pool in INVENTORY.pools.items()}
KEYS = sorted({k for steps in STEPS for step in steps for k in step}) + ["agent_poll", "gpus", "key"]
VALUES = st.sampled_from(
    [None, 0, -1, 1, 2, 8, 181, "", "x", "mi300_2", "mi355_8", "mi999_1", True, False, [], {}, ["a", 1],
     {"A": "1"}, "$BUILDKITE_PARALLEL_JOB", "$$X", "-tp=4 -dp=4", "deepep_low_latency", "x" * 5000, 10**12]
)  # fmt: skip
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated_steps(draw):
    steps = copy.deepcopy(draw(st.sampled_from(STEPS)))
    steps = draw(st.lists(st.sampled_from(steps), min_size=1, max_size=25))
    steps = copy.deepcopy(steps)
    for _ in range(draw(st.integers(0, 6))):
        step = draw(st.sampled_from(steps))
        action = draw(st.sampled_from(["set", "drop", "dup", "command", "pool"]))
        if action == "set":
            step[draw(st.sampled_from(KEYS))] = draw(VALUES)
        elif action == "drop" and step:
            step.pop(draw(st.sampled_from(sorted(step))))
        elif action == "dup":
            steps.append(copy.deepcopy(step))
        elif action == "command":
            step["commands"] = [draw(st.text(alphabet="ab $${}-=&;|`'\"\\\n", max_size=40))]
        else:
            step["agent_pool"] = draw(st.sampled_from(sorted(QUEUES) + ["mi300", "amd_mi300_1", ""]))
    return steps


def run_all(text: str):
    """Load, generate, validate; only InputError may escape."""
    src = source.from_document(yamldoc.parse(text, "mutated.yaml"))
    opts = replace(generate.Options(mirror_hw=""), queues=QUEUES)
    generated = generate.generate(src, opts)
    return src, generated, validate.validate_generated(src, generated, CTX)


@SETTINGS
@given(mutated_steps())
def test_structured_mutations_never_crash_and_valid_input_round_trips(steps):
    text = yaml.safe_dump({"steps": steps}, sort_keys=False, allow_unicode=True)
    try:
        src, generated, report = run_all(text)
    except InputError:
        event("unreadable")
        return
    assert all(f.file == "mutated.yaml" for f in report.findings)
    event("has errors" if report.errors else "valid: round trip checked")
    if not any(f.severity == ERROR for f in report.findings):
        rendered = service.render(generated.pipeline, "yaml", "mutated.yaml")
        again = validate.validate_pipeline_document(yamldoc.parse(rendered, "generated.yaml"), CTX)
        assert [f.text() for f in again.findings if f.severity == ERROR] == []
        assert len(again.findings) == len(report.findings)  # warnings agree too


@SETTINGS
@given(
    st.sampled_from(TEXTS),
    st.lists(st.tuples(st.floats(0, 1), st.integers(0, 40), st.text(max_size=8)), min_size=1, max_size=4),
)
def test_text_mutations_give_findings_or_one_input_error(text, edits):
    for where, cut, insert in edits:
        at = int(where * len(text))
        text = text[:at] + insert + text[at + cut :]
    try:
        _, _, report = run_all(text)
    except InputError as exc:
        assert "\n" not in exc.one_line()
        return
    for finding in report.findings:
        assert finding.line >= 1 and finding.col >= 1


@SETTINGS
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_refused_cleanly(data):
    try:
        yamldoc.parse(data, "random.bin")
    except InputError as exc:
        assert exc.one_line().startswith("random.bin")
