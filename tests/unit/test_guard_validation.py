"""Validation and generation promises of issue 35 that no fast test guarded: `num_gpus: 0` is an error (the
step gets 1 GPU), `--keep-going` holds a step and never drops what makes it, the pre-commit hook fails when
any file has errors. docs/guards.md maps each test to the mutation it was watched to kill.

Real components: vLLM's real step file and ci-infra's real template (../shared/fixtures), the hook's own
`main` in process, jsonschema with Buildkite's schema.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from rocmci import hook, yamldoc
from rocmci.findings import ERROR, Finding
from rocmci.pipeline import bootstrap, citemplate, conformance, generate, keepgoing, schema, service, source
from tests.conftest import REPO, SHARED_VLLM

TEMPLATE = SHARED_VLLM.parent / "ci-infra" / "buildkite" / "test-template-amd.j2"
DATA = REPO / "tests" / "data" / "pipeline" / "source"
RUN_ALL = bootstrap.TemplateInputs(run_all="1")


def _steps(*steps: str) -> str:
    return "steps:\n" + "".join(steps)


def _step(label: str, extra: str = "", pool: str = "mi300_1") -> str:
    lines = [f"- label: {label}", "  mirror_hardwares: [amdproduction]", f"  agent_pool: {pool}", "  dind: false"]
    lines += [f"  {line}" for line in extra.splitlines()]
    return "\n".join([*lines, "  commands: [pytest -v tests/x]"]) + "\n"


# --- num_gpus: 0 -----------------------------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """The hook resolves settings from the environment and the folder: neither may come from the caller."""
    for name in list(os.environ):
        if name.startswith("ROCMCI_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _hook_json(*files: str) -> tuple[int, dict]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = hook.main(["--json", "--arch", "gfx942", *files])
    return code, json.loads(out.getvalue())


def test_num_gpus_0_is_an_error_that_says_the_step_gets_1_gpu(clean_env):
    (clean_env / "s.yaml").write_text(_steps(_step("Zero", "num_gpus: 0"), _step("One", "num_gpus: 1")))
    code, data = _hook_json("s.yaml")
    (report,) = data["files"]
    zero = [f for f in report["findings"] if "num_gpus" in f["message"]]
    assert [(f["line"], f["severity"], f["rule"]) for f in zero] == [(6, "error", "source-schema")]
    assert zero[0]["message"] == "'num_gpus' must be at least 1, got 0; the step gets 1 GPU (no_gpu: true for none)"
    assert code == 1


@pytest.mark.parametrize("key", ["num_nodes", "timeout_in_minutes", "parallelism"])
def test_the_other_counts_at_0_are_warnings_read_as_unset(key):
    src = source.from_document(yamldoc.parse(_steps(_step("Zero", f"{key}: 0")), "s.yaml"))
    found = [f for f in [*src.findings, *(s.finding for s in src.step_findings)] if key in f.message]
    assert [(f.severity, f.message.split(":")[0]) for f in found] == [("warning", f"'{key}' 0 is read as unset")]


@pytest.mark.skipif(not TEMPLATE.is_file(), reason=f"{TEMPLATE} not found (the shared fixtures sit beside the repo)")
def test_num_gpus_0_is_generated_with_1_gpu_as_ci_infra_renders_it(tmp_path):
    step_file = tmp_path / "s.yaml"
    step_file.write_text(_steps(_step("Zero", "num_gpus: 0")))
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(TEMPLATE, step_file, RUN_ALL), "ci-infra")
    src = source.load_source(step_file, "s.yaml")
    pipeline = generate.generate(src, generate.Options(inputs=RUN_ALL, origin_env=False)).pipeline
    ours = citemplate.parse_pipeline(service.render(pipeline, "yaml", "s.yaml"), "rocmci")
    assert not conformance.compare(reference, ours).differences
    zero = next(s for _, s in conformance.flatten_steps(ours) if s.get("label") == "mi300_1: Zero")
    resources = zero["plugins"][0]["kubernetes"]["podSpecPatch"]["containers"][0]["resources"]
    assert resources == {"limits": {"amd.com/gpu": "1"}, "requests": {"amd.com/gpu": "1"}}


# --- --keep-going holds a step and never drops what makes it -----------------------------------------------------


def _command_steps(pipeline: dict) -> list[dict]:
    return [s for s in pipeline["steps"][0]["steps"] if isinstance(s, dict) and "command" in s]


@pytest.mark.skipif(not (SHARED_VLLM / "test-amd.yaml").is_file(), reason="vLLM's real step file not found")
def test_keep_going_holds_every_erroneous_step_of_vllms_file_and_drops_none():
    """An error on every step of vLLM's real file: each generated step is still there, as generated but for
    its depends_on, which names its own block step; that block waits for the image."""
    src = source.load_source(SHARED_VLLM / "test-amd.yaml", "test-amd.yaml")
    generated = generate.generate(src, generate.Options(inputs=RUN_ALL))
    lines = {s.index: int(s.where.split(":")[1]) for s in src.steps}
    findings = [Finding("test-amd.yaml", line, 3, "gpu-count", ERROR, f"problem {i}") for i, line in lines.items()]
    pipeline, held = keepgoing.hold(src, generated, findings)
    before, after = _command_steps(generated.pipeline), _command_steps(pipeline)
    assert len(before) == len(after) > 100
    blocks = {s["key"]: s for s in pipeline["steps"][0]["steps"] if isinstance(s, dict) and "block" in s}
    for was, now in zip(before, after, strict=True):
        assert {k: v for k, v in now.items() if k != "depends_on"} == {
            k: v for k, v in was.items() if k != "depends_on"
        }
        block = blocks[now["depends_on"]]
        assert block["depends_on"] == generate.IMAGE_STEP_KEY and block["block"].startswith("rocmci: problem ")
    generated_indices = {s.index for s in generated.origins if s is not None}
    assert sorted(h.step_index for h in held if h.how == "held") == sorted(generated_indices)
    assert schema.is_valid(pipeline)


def test_a_held_step_keeps_what_makes_it_even_where_the_schema_refuses_it():
    """_uploadable removes only the fields Buildkite's schema refuses that are not the step itself: label,
    command, depends_on, agents and key stay whatever their values, so the step is never silently emptied."""
    step = {"label": 5, "command": 5, "agents": "x", "depends_on": 5, "key": 5, "parallelism": 1.5,
            "timeout_in_minutes": 0, "env": {"A": "1"}}  # fmt: skip
    said = keepgoing._uploadable(step)
    assert step == {"label": 5, "command": 5, "agents": "x", "depends_on": 5, "key": 5, "env": {"A": "1"}}
    assert [s.split(":")[0] for s in said] == [
        "rocmci removed 'parallelism' from this step so that Buildkite accepts the pipeline",
        "rocmci removed 'timeout_in_minutes' from this step so that Buildkite accepts the pipeline",
    ]


def test_a_held_step_with_refused_fields_keeps_everything_else(tmp_path):
    text = _steps(_step("Odd", "parallelism: 1.5\ntimeout_in_minutes: 0.5\nnum_gpus: 2\nenv: {A: b}"))
    src = source.from_document(yamldoc.parse(text, "s.yaml"))
    generated = generate.generate(src, generate.Options(inputs=RUN_ALL))
    (was,) = _command_steps(generated.pipeline)
    pipeline, held = keepgoing.hold(src, generated, [Finding("s.yaml", 2, 3, "x", ERROR, "bad")])
    (now,) = _command_steps(pipeline)
    assert [h.how for h in held] == ["held"]
    dropped = {k for k in was if k not in now}
    assert dropped == {"parallelism", "timeout_in_minutes"}
    assert {k: v for k, v in now.items() if k != "depends_on"} == {
        k: v for k, v in was.items() if k not in dropped | {"depends_on"}
    }
    assert schema.is_valid(pipeline)


# --- the pre-commit hook fails when any file has errors ----------------------------------------------------------


@pytest.mark.parametrize("order", ["bad-first", "bad-middle", "bad-last"])
def test_the_hook_fails_when_any_file_has_errors(clean_env, order, capsys):
    good = _steps(_step("Fine", "num_gpus: 1"))
    names = ["a.yaml", "b.yaml", "c.yaml"]
    bad_at = {"bad-first": 0, "bad-middle": 1, "bad-last": 2}[order]
    for i, name in enumerate(names):
        if i == bad_at:
            shutil.copyfile(DATA / "invalid" / "unknown-key.yaml", clean_env / name)
        else:
            (clean_env / name).write_text(good)
    assert hook.main(["--arch", "gfx942", *names]) == 1
    out = capsys.readouterr().out
    assert f"{names[bad_at]}: 3 errors" in out
    code, data = _hook_json(*names)
    assert code == 1 and data["errors"] == 3
    assert [f["errors"] for f in data["files"]] == [3 if i == bad_at else 0 for i in range(3)]


def test_the_hook_passes_clean_files_with_warnings_and_fails_on_an_unreadable_one(clean_env, capsys):
    (clean_env / "warn.yaml").write_text(_steps(_step("Warn", "num_nodes: 0")))
    (clean_env / "good.yaml").write_text(_steps(_step("Fine")))
    assert hook.main(["--arch", "gfx942", "warn.yaml", "good.yaml"]) == 0
    assert "warn.yaml: 0 errors, 1 warning" in capsys.readouterr().out
    shutil.copyfile(DATA / "invalid" / "unknown-key.yaml", clean_env / "bad.yaml")
    assert hook.main(["--arch", "gfx942", "missing.yaml", "bad.yaml", "good.yaml"]) == 2  # the worst of 2 and 1
    assert hook.main(["--arch", "gfx942", "bad.yaml", "missing.yaml"]) == 2


def test_held_steps_whose_block_keys_would_clash_each_wait_for_a_block_of_their_own():
    """`X y`, `X-y` and `x Y` slug alike: each held step still gets its own block step and waits for it."""
    text = _steps(_step("X y"), _step("X-y"), _step("x Y"))
    src = source.from_document(yamldoc.parse(text, "s.yaml"))
    generated = generate.generate(src, generate.Options(inputs=RUN_ALL))
    findings = [Finding("s.yaml", line, 3, "x", ERROR, "bad") for line in (2, 7, 12)]
    pipeline, held = keepgoing.hold(src, generated, findings)
    members = pipeline["steps"][0]["steps"][3:]
    assert [(m.get("key"), m["depends_on"]) for m in members] == [
        ("block-mi300_1-x-y", generate.IMAGE_STEP_KEY),
        (None, "block-mi300_1-x-y"),
        ("rocmci-hold-1", generate.IMAGE_STEP_KEY),
        (None, "rocmci-hold-1"),
        ("rocmci-hold-2", generate.IMAGE_STEP_KEY),
        (None, "rocmci-hold-2"),
    ]
    assert [h.how for h in held] == ["held"] * 3 and schema.is_valid(pipeline)
