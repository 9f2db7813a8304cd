"""The pipeline tasks as a user runs them: real invoke processes, real files, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import REPO, run_invoke

DATA = REPO / "tests" / "data" / "pipeline"
TEST_INVENTORY = {"ROCMCI_INVENTORY": str(DATA / "agents.yaml")}


VALID = DATA / "source" / "valid" / "deepep.yaml"
BAD = DATA / "source" / "invalid" / "deepep-wrong-arch.yaml"


def test_valid_step_file_generates_and_validates_clean():
    done = run_invoke("pipeline.validate", "--source", str(VALID), env=TEST_INVENTORY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"{VALID.relative_to(REPO)}: 0 errors, 0 warnings in 8 generated steps", done.stdout


def test_generate_is_byte_identical_and_matches_stdout(tmp_path):
    out = tmp_path / "p.yaml"
    first = run_invoke("pipeline.generate", "--source", str(VALID), "--out", str(out), env=TEST_INVENTORY)
    assert first.returncode == 0, first.stderr
    stdout = run_invoke("pipeline.generate", "--source", str(VALID), env=TEST_INVENTORY)
    assert stdout.stdout == out.read_text()
    pipeline = yaml.safe_load(out.read_text())
    (group,) = pipeline["steps"]
    assert group["group"] == "AMD Tests"
    keys = [s.get("key") for s in group["steps"][:3]]
    assert keys == ["refresh-rocm-base-amd", "ensure-ci-base-amd", "image-build-amd"]
    as_json = run_invoke("pipeline.generate", "--source", str(VALID), "--format", "json", env=TEST_INVENTORY)
    assert json.loads(as_json.stdout) == pipeline


def test_generated_file_validates_as_a_pipeline(tmp_path):
    out = tmp_path / "p.yaml"
    done = run_invoke("pipeline.generate", "--source", str(VALID), "--out", str(out), env=TEST_INVENTORY)
    assert done.returncode == 0, done.stderr
    done = run_invoke("pipeline.validate", "--pipeline", str(out), env=TEST_INVENTORY)
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip() == f"{out}: 0 errors, 0 warnings in 8 steps"


def test_errors_block_the_output_and_keep_the_old_file(tmp_path):
    out = tmp_path / "p.yaml"
    out.write_text("old pipeline\n")
    done = run_invoke("pipeline.generate", "--source", str(BAD), "--out", str(out), env=TEST_INVENTORY)
    assert done.returncode == 1
    assert out.read_text() == "old pipeline\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]  # no temporary file left behind
    assert "deepep-wrong-arch.yaml:7:5: error [deepep-arch]" in done.stderr  # the command's own line
    assert done.stderr.strip().splitlines()[-1].startswith("rocmci: 1 error in the generated pipeline")


def test_keep_going_writes_the_pipeline_with_the_step_held(tmp_path):
    out, notes = tmp_path / "p.yaml", tmp_path / "notes.md"
    args = ["--source", str(BAD), "--out", str(out), "--keep-going", "--annotation", str(notes), "--run-all"]
    done = run_invoke("pipeline.generate", *args, env=TEST_INVENTORY)
    assert done.returncode == 0, done.stderr
    assert "deepep-wrong-arch.yaml:7:5: error [deepep-arch]" in done.stderr
    steps = yaml.safe_load(out.read_text())["steps"][0]["steps"]
    block, step = steps[-2:]
    assert block["block"].startswith("rocmci: runs DeepEP on mi250_2 (gfx90a)")
    assert step["depends_on"] == block["key"] and step["label"] == "mi250_2: DeepEP on MI250"
    assert "held behind a block step" in notes.read_text() and "deepep-wrong-arch.yaml:7:5" in notes.read_text()
    assert run_invoke("pipeline.validate", "--pipeline", str(out), env=TEST_INVENTORY).returncode == 1


def test_validate_json_and_exit_codes():
    bad = DATA / "pipeline" / "invalid" / "queues.yaml"
    done = run_invoke("pipeline.validate", "--pipeline", str(bad), "--json", env=TEST_INVENTORY)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert (report["errors"], report["warnings"], report["steps"]) == (2, 2, 4)  # an unknown queue warns
    first = report["findings"][0]
    assert (first["line"], first["col"], first["rule"], first["severity"]) == (2, 3, "unknown-queue", "error")


def test_unreadable_input_exits_2_with_one_line(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("steps:\n- label: a\n  commands: [x\n")
    for args in (("--pipeline", str(broken)), ("--source", str(broken)), ("--pipeline", str(tmp_path / "nope.yaml"))):
        done = run_invoke("pipeline.validate", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rocmci: ") and "Traceback" not in done.stderr
    assert "broken.yaml:4:1: invalid YAML" in run_invoke("pipeline.validate", "--source", str(broken)).stderr


def test_bad_flags_exit_2():
    assert run_invoke("pipeline.generate", "--format", "toml").returncode == 2
    done = run_invoke("pipeline.validate", "--arch", "gfx942;$(id)")
    assert done.returncode == 2 and "contains '$'" in done.stderr


def test_plan_shows_what_runs_and_why(tmp_path):
    changed = tmp_path / "changed.txt"
    changed.write_text("vllm/model_executor/layers/fused_moe/layer.py\n# a comment\n\n")
    args = ["--source", str(VALID), "--changed-files", str(changed), "--json"]
    done = run_invoke("pipeline.plan", *args, env=TEST_INVENTORY)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    rows = {(r["pool"], r["label"]): (r["action"], r["reason"]) for r in plan["steps"]}
    assert ("run", "no source_file_dependencies: always runs") in rows.values()
    assert plan["inputs"]["list_file_diff"] == "vllm/model_executor/layers/fused_moe/layer.py"
    changed.write_text("csrc/moe/topk.cu\n")
    table = run_invoke("pipeline.plan", "--source", str(VALID), "--changed-files", str(changed), env=TEST_INVENTORY)
    assert table.returncode == 0
    assert "run_all: csrc/moe/topk.cu changed (pattern csrc/)" in table.stdout
    docs = tmp_path / "docs.txt"
    docs.write_text("docs/index.md\n")
    skipped = run_invoke("pipeline.generate", "--source", str(VALID), "--changed-files", str(docs))
    assert skipped.returncode == 0 and skipped.stdout == "" and "no pipeline: only docs" in skipped.stderr


def test_real_vllm_files_generate_and_validate(vllm_fixtures: Path, tmp_path):
    current = vllm_fixtures / "test-amd.yaml"
    done = run_invoke("pipeline.validate", "--source", str(current))
    assert done.returncode == 0 and done.stdout.strip().endswith(": 0 errors, 0 warnings in 384 generated steps"), (
        done.stdout
    )
    out = tmp_path / "vllm.yaml"
    assert run_invoke("pipeline.generate", "--source", str(current), "--out", str(out)).returncode == 0
    # What was written is ci-infra's render for the same inputs, field by field (plus the documented additions).
    from rocmci.pipeline import bootstrap, citemplate, conformance

    template = vllm_fixtures.parent / "ci-infra" / "buildkite" / "test-template-amd.j2"
    inputs = bootstrap.decide(bootstrap.Request()).inputs  # no changed files given, not under Buildkite
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(template, current, inputs), "ci-infra")
    comparison = conformance.compare(reference, citemplate.parse_pipeline(out.read_text(), str(out)))
    assert not comparison.unexpected, comparison.summary(examples=10)
    assert comparison.our_steps == comparison.reference_steps == 384
    validated = run_invoke("pipeline.validate", "--pipeline", str(out))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert validated.stdout.strip().endswith(": 0 errors, 0 warnings in 384 steps"), validated.stdout


def test_real_april_file_findings_are_real(vllm_fixtures: Path):
    """The April 2026 file asks two 1-GPU mi250_1 agents for 2 GPUs: both findings are right.

    'Metrics, Tracing (2 GPUs)' (line 328) and 'Distributed Comm Ops' (line 1112) say num_gpus: 2
    but agent_pool: mi250_1, whose agents have one GPU each; the August file no longer has them there.
    """
    done = run_invoke("pipeline.validate", "--source", str(vllm_fixtures / "test-amd.58da4ee04.yaml"), "--json")
    assert done.returncode == 1
    found = [(f["line"], f["rule"]) for f in json.loads(done.stdout)["findings"]]
    assert found == [(332, "gpu-count"), (1116, "gpu-count")]


def test_ci_entrypoint_validates_and_dry_runs_without_the_agent(tmp_path):
    entry = REPO / ".buildkite" / "pipeline.yml"
    done = run_invoke("pipeline.validate", "--pipeline", str(entry))
    assert done.returncode == 0 and done.stdout.strip().endswith(": 0 errors, 0 warnings in 2 steps"), done.stdout
    generate, workspace = yaml.safe_load(entry.read_text())["steps"]
    assert generate["key"] == "generate-amd-pipeline"
    # rocmci's own suite runs from the checkout on the CPU queue, not through vLLM's runner in its image.
    assert (workspace["label"], workspace["agents"], workspace["command"]) == (
        "rocmci workspace tests",
        {"queue": "amd-cpu"},
        "bash .ci/run",
    )
    # The workspace's own step file (what the entrypoint generates from) is clean: no step key with a '.'.
    own = run_invoke("pipeline.validate")
    assert own.returncode == 0, own.stdout + own.stderr
    assert own.stdout.strip().startswith(".buildkite/test-amd.yaml: 0 errors, 0 warnings"), own.stdout
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "BUILDKITE"))}
    # PATH without buildkite-agent, but with this interpreter's invoke.
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    done = subprocess.run(
        ["bash", str(REPO / ".buildkite" / "upload-pipeline.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "dry run: buildkite-agent not found" in done.stderr
    steps = yaml.safe_load(done.stdout)["steps"][0]["steps"]
    assert steps[2]["key"] == "image-build-amd"


def test_pre_commit_hook_validates_a_step_file_in_another_repo(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / ".buildkite").mkdir()
    good = tmp_path / ".buildkite" / "test-amd.yaml"
    good.write_text((DATA / "source" / "valid" / "deepep.yaml").read_text())
    hook = [sys.executable, "-m", "rocmci.hook", "--arch", "gfx942,gfx950"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    done = subprocess.run([*hook, str(good)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text((DATA / "source" / "invalid" / "unknown-key.yaml").read_text())
    done = subprocess.run(
        [*hook, str(good), str(bad)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert (
        "bad.yaml:4:3: error [source-schema] unknown step key 'agent_poll'; did you mean 'agent_pool'?" in done.stdout
    )
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["entry"] == "rocmci-validate"


def test_image_build_dry_run_shows_the_exact_command():
    import shlex

    standin = {"ROCMCI_VLLM_SRC": str(REPO / "tests" / "data" / "vllm-standin")}  # image.build reads a checkout
    done = run_invoke("image.build", "--dry-run", "--arch", "gfx950,GFX942", env=standin)
    assert done.returncode == 0, done.stderr
    # The printed commands are shell text a user can paste: one per stage, continuation lines joined.
    commands = [shlex.split(line) for line in done.stdout.replace("\\\n", " ").splitlines() if line.strip()[:1] != "#"]
    builds, checks = commands[0::2], commands[1::2]  # each build is followed by its DeepEP check (issue 31)
    assert [argv[argv.index("--target") + 1] for argv in builds] == ["ci_base", "test"]
    assert [(argv[1:5], argv[-4:]) for argv in checks] == [
        (["run", "--rm", "-i", "--network"], [tag, "-", "--expect", "gfx942;gfx950"])
        for tag in (builds[0][builds[0].index("--tag") + 1], builds[1][builds[1].index("--tag") + 1])
    ]
    for argv in builds:
        assert argv[:2] == ["env", "DOCKER_BUILDKIT=1"] and argv[3] == "build", argv
        build_args = [argv[i + 1] for i, word in enumerate(argv) if word == "--build-arg"]
        arch_args = [a for a in build_args if a.startswith("DEEPEP_ROCM_ARCH=")]
        assert arch_args == ["DEEPEP_ROCM_ARCH=gfx942;gfx950"]  # normalised, sorted, given once
        assert argv[-1] == standin["ROCMCI_VLLM_SRC"]
    assert "nothing was built" in done.stderr


def test_older_real_files_validate_clean_and_generate_without_holding_anything(vllm_fixtures: Path, tmp_path):
    """December 2025 and March 2026: NVIDIA keys, steps no AMD mirror renders, 2-node steps. vLLM's CI ran them."""
    for name, steps in (("test-amd.a0b421b7.yaml", 91), ("test-amd.b47dcc58.yaml", 471)):
        path = vllm_fixtures / name
        done = run_invoke("pipeline.validate", "--source", str(path))
        assert done.returncode == 0, done.stdout
        assert done.stdout.strip().endswith(f": 0 errors, 0 warnings in {steps} generated steps"), done.stdout
        out = tmp_path / name
        done = run_invoke("pipeline.generate", "--source", str(path), "--keep-going", "--out", str(out))
        assert done.returncode == 0 and "--keep-going" not in done.stderr, done.stderr  # nothing held or left out
        assert "block-rocmci" not in out.read_text() and "rocmci: " not in out.read_text()


def test_a_file_with_no_step_for_the_mirror_is_valid_with_a_warning(tmp_path):
    """ci-infra renders only the image build steps for it: so does generate, and validate warns (no exit 2)."""
    step_file = DATA / "source" / "invalid" / "no-step-for-mirror.yaml"
    done = run_invoke("pipeline.validate", "--source", str(step_file), env=TEST_INVENTORY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning [no-step-for-mirror] no step lists mirror_hw 'amdproduction'" in done.stdout
    assert "the steps list: amdexperimental" in done.stdout
    done = run_invoke("pipeline.generate", "--source", str(step_file), env=TEST_INVENTORY)
    assert done.returncode == 0, done.stderr
    (group,) = yaml.safe_load(done.stdout)["steps"]
    assert [s["key"] for s in group["steps"]] == ["refresh-rocm-base-amd", "ensure-ci-base-amd", "image-build-amd"]
    done = run_invoke("pipeline.generate", "--source", str(step_file), "--mirror-hw", "amdexperimental")
    assert done.returncode == 0 and len(yaml.safe_load(done.stdout)["steps"][0]["steps"]) == 4, done.stderr
