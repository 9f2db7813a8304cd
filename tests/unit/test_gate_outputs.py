"""Issue 32, class 5: outputs that lie (pipeline.generate). What --keep-going writes is never a pipeline
`pipeline.validate --pipeline` rejects for anything but the reason a step is held, and never one Buildkite
refuses (its 500-step limit, its schema); a run that writes no pipeline leaves no
earlier one in --out; --annotation always says this run's findings; --out and --annotation are two files."""

from __future__ import annotations

import io
import json
import signal
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmci.cli import program
from tests.unit.gate_cli import outside_any_workspace_fixture, rocmci_fixture  # noqa: F401 - fixtures

OLD = "# an earlier run's pipeline\nsteps: []\n"


def step(i: int, *, gated: bool = True, label: str | None = None, env: dict | None = None, gpus=None) -> str:
    text = f"- label: {json.dumps(label or f'step {i}')}\n  agent_pool: mi300_1\n  mirror_hardwares: [amdproduction]\n"
    if gated:  # a step with dependencies and no changed files waits behind a block step: two generated steps
        text += "  source_file_dependencies: [vllm/x]\n"
    if env:
        text += f"  env: {json.dumps(env)}\n"
    if gpus is not None:
        text += f"  num_gpus: {gpus}\n"
    return text + f"  commands: [echo {i}]\n"


def step_file(folder: Path, steps: list[str]) -> Path:
    path = folder / "test-amd.yaml"
    path.write_text("steps:\n" + "".join(steps))
    return path


def test_keep_going_never_writes_more_steps_than_buildkite_takes(rocmci, outside_any_workspace):
    source = step_file(outside_any_workspace, [step(i) for i in range(260)])  # 524 generated steps
    out, annotation = outside_any_workspace / "pipeline.yaml", outside_any_workspace / "annotation.md"
    out.write_text(OLD)
    code, stdout, err = rocmci("pipeline.generate", "--source", str(source), "--keep-going", "--out", str(out),
                               "--annotation", str(annotation))  # fmt: skip
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("rocmci: --keep-going: the pipeline it would write is one Buildkite refuses ([step-limit]")
    assert out.read_text() == OLD and stdout == ""  # nothing written: not the refused pipeline, not half of it
    assert "[step-limit]" in annotation.read_text()  # the build page says why too


def test_a_change_with_no_pipeline_leaves_no_earlier_pipeline_or_annotation(rocmci, outside_any_workspace):
    source = step_file(outside_any_workspace, [step(0)])
    changed = outside_any_workspace / "changed.txt"
    changed.write_text("docs/usage.md\n")
    out, annotation = outside_any_workspace / "pipeline.yaml", outside_any_workspace / "annotation.md"
    out.write_text(OLD)
    annotation.write_text("**rocmci** checked: 3 errors (an earlier run)\n")
    code, _, err = rocmci("pipeline.generate", "--source", str(source), "--changed-files", str(changed),
                          "--out", str(out), "--annotation", str(annotation))  # fmt: skip
    assert code == 0, err
    assert not out.exists() and not annotation.exists()
    assert f"removed {out} (--out)" in err and f"removed {annotation} (--annotation)" in err


def test_an_annotation_with_no_findings_replaces_an_earlier_one(rocmci, outside_any_workspace):
    source = step_file(outside_any_workspace, [step(0, gated=False)])
    annotation = outside_any_workspace / "annotation.md"
    annotation.write_text("s.yaml:1:1: error [gpu-count] an earlier run's finding\n")
    code, _, err = rocmci("pipeline.generate", "--source", str(source), "--out", "p.yaml", "--annotation",
                          str(annotation))  # fmt: skip
    assert code == 0, err
    assert "0 errors, 0 warnings" in annotation.read_text() and "earlier" not in annotation.read_text()


@pytest.mark.parametrize("same", ["{f}", "./{f}", "sub/../{f}", "link"])
def test_out_and_annotation_cannot_be_one_file(rocmci, outside_any_workspace, same):
    source = step_file(outside_any_workspace, [step(0)])
    (outside_any_workspace / "sub").mkdir()
    out = outside_any_workspace / "pipeline.yaml"
    out.write_text(OLD)
    (outside_any_workspace / "link").symlink_to(out)
    code, stdout, err = rocmci("pipeline.generate", "--source", str(source), "--out", str(out), "--annotation",
                               same.format(f="pipeline.yaml"))  # fmt: skip
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and err.startswith("rocmci: --out and --annotation name the same file")
    assert out.read_text() == OLD


# --- the property: over generated step files, --keep-going writes only what validate --pipeline accepts


def _main(*argv: str) -> tuple[int, str]:
    saved = sys.stdout, sys.stderr
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        try:
            program.main(["rocmci", *argv])
        except SystemExit as ended:
            return ended.code, sys.stdout.getvalue() + sys.stderr.getvalue()
        raise AssertionError("rocmci did not exit")
    finally:
        sys.stdout, sys.stderr = saved
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
STEP = st.builds(
    lambda gated, label, env, gpus: (gated, label, env, gpus),
    st.booleans(),
    st.sampled_from([None, "a`b", "$HOME x", "x" * 400, "tab\there", "tok " + TOKEN, "esc \x1b"]),
    st.sampled_from([None, {"HF_TOKEN": "literal-4711"}, {"A": "1"}]),
    st.sampled_from([None, 1, 0, -1, 9]),
)


@settings(max_examples=25, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(st.integers(1, 8), st.integers(0, 300), st.lists(STEP, max_size=6))
def test_keep_going_output_is_never_rejected_by_validate_pipeline(outside_any_workspace, plain, gated, odd):
    steps = [step(i, gated=False) for i in range(plain)] + [step(plain + i) for i in range(gated)]
    steps += [step(900 + n, gated=g, label=label, env=env, gpus=gpus) for n, (g, label, env, gpus) in enumerate(odd)]
    with tempfile.TemporaryDirectory(dir=outside_any_workspace) as folder:
        source, out = step_file(Path(folder), steps), Path(folder) / "pipeline.yaml"
        code, err = _main("pipeline.generate", "--source", str(source), "--keep-going", "--out", str(out))
        assert code in (0, 1), err
        if code == 1:  # refused, and said which
            assert not out.exists() and "Buildkite refuses" in err.strip().splitlines()[-1], err
            return
        check, report = _main("pipeline.validate", "--pipeline", str(out), "--json")
        assert check in (0, 1), report
        held = _held_origins(yaml.safe_load(out.read_text()))
        for f in json.loads(report)["findings"]:
            if f["severity"] == "error":  # only why a step is held, and nothing Buildkite refuses the upload for
                assert f["rule"] not in UPLOAD_REFUSED and f["origin"] in held, f


# Buildkite refuses the whole upload for these (its YAML, its schema, its 500-step limit, keys, dependencies)
UPLOAD_REFUSED = {"yaml-syntax", "duplicate-key", "schema", "step-limit", "unique-key", "key-pattern", "depends-on",
                  "dependency-cycle"}  # fmt: skip


def _held_origins(pipeline: dict) -> set[str]:
    """The step-file origins (AMD_CI_STEP_SOURCE) of the steps that wait behind a block step rocmci wrote."""
    members = pipeline["steps"][0]["steps"]
    holds = {s["key"] for s in members if "block" in s and str(s["block"]).startswith("rocmci: ")}
    return {s["env"]["AMD_CI_STEP_SOURCE"] for s in members
            if s.get("depends_on") in holds and "AMD_CI_STEP_SOURCE" in (s.get("env") or {})}  # fmt: skip


@pytest.mark.parametrize("label", ["x" * 400, "$HOME x", "${BUILDKITE_BRANCH}"])
def test_a_held_step_gets_a_block_key_buildkite_takes(rocmci, outside_any_workspace, label):
    """The template's block key is the label's slug: past 100 characters, or with a $NAME, --keep-going must
    give the hold its own key, or the upload is refused (found by the property below)."""
    source = step_file(outside_any_workspace, [step(0, gated=False), step(1, label=label, gpus=-1)])
    out = outside_any_workspace / "pipeline.yaml"
    code, _, err = rocmci("pipeline.generate", "--source", str(source), "--keep-going", "--out", str(out))
    assert code == 0 and "held behind a block step" in err, err
    keys = [s["key"] for s in yaml.safe_load(out.read_text())["steps"][0]["steps"] if "block" in s]
    assert all(len(k) <= 100 and "$" not in k for k in keys), keys
