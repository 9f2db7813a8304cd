"""The pipeline tasks as a user runs them: real invoke processes, real files, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import REPO, run_invoke

DATA = REPO / "tests" / "data" / "pipeline"
TEST_INVENTORY = {"ROCMCI_INVENTORY": str(DATA / "agents.yaml")}


def test_workspace_pipeline_generates_and_validates_clean():
    done = run_invoke("pipeline.validate")
    assert (done.returncode, done.stdout.strip()) == (0, "0 error(s), 0 warning(s) in 5 generated steps"), done.stderr


def test_generate_is_byte_identical_and_matches_stdout(tmp_path):
    out = tmp_path / "p.yaml"
    first = run_invoke("pipeline.generate", "--out", str(out))
    assert first.returncode == 0, first.stderr
    stdout = run_invoke("pipeline.generate")
    assert stdout.stdout == out.read_text()
    assert run_invoke("pipeline.generate").stdout == stdout.stdout
    pipeline = yaml.safe_load(out.read_text())
    labels = [s.get("label") for s in pipeline["steps"]]
    assert "mi325_2: DeepEP Qwen1.5-MoE data parallel (2 GPUs)" in labels
    assert "mi355_2: DeepEP MoE kernels (2 GPUs)" in labels and "mi325_2: DeepEP MoE kernels (2 GPUs)" in labels
    assert "amd-cpu: rocmci workspace tests" in labels
    as_json = run_invoke("pipeline.generate", "--format", "json")
    assert json.loads(as_json.stdout) == pipeline


def test_generated_file_validates_as_a_pipeline(tmp_path):
    out = tmp_path / "p.yaml"
    assert run_invoke("pipeline.generate", "--out", str(out)).returncode == 0
    done = run_invoke("pipeline.validate", "--pipeline", str(out))
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip() == "0 error(s), 0 warning(s) in 5 steps"


def test_errors_block_the_output_and_keep_the_old_file(tmp_path):
    out = tmp_path / "p.yaml"
    out.write_text("old pipeline\n")
    bad = DATA / "source" / "invalid" / "deepep-wrong-arch.yaml"
    done = run_invoke("pipeline.generate", "--source", str(bad), "--out", str(out), env=TEST_INVENTORY)
    assert done.returncode == 1
    assert out.read_text() == "old pipeline\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]  # no temporary file left behind
    assert "deepep-wrong-arch.yaml:6:3: error [deepep-arch]" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("rocmci: 1 error(s) in the generated pipeline")


def test_validate_json_and_exit_codes():
    bad = DATA / "pipeline" / "invalid" / "queues.yaml"
    done = run_invoke("pipeline.validate", "--pipeline", str(bad), "--json", env=TEST_INVENTORY)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert (report["errors"], report["warnings"], report["steps"]) == (3, 1, 4)
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
    done = run_invoke("pipeline.plan", "--changed-files", str(changed), "--json")
    assert done.returncode == 0, done.stderr
    rows = {(r["pool"], r["label"]): (r["action"], r["reason"]) for r in json.loads(done.stdout)}
    fused = "vllm/model_executor/layers/fused_moe/layer.py matches vllm/model_executor/layers/fused_moe/"
    assert rows[("mi325_2", "DeepEP Qwen1.5-MoE data parallel (2 GPUs)")] == ("run", fused)
    assert rows[("amd-cpu", "rocmci workspace tests")] == ("run", "no source_file_dependencies: always runs")
    table = run_invoke("pipeline.plan", "--diff-base", "HEAD")
    assert table.returncode == 0 and "blocked" in table.stdout


def test_real_vllm_files_generate_and_validate(vllm_fixtures: Path, tmp_path):
    current = vllm_fixtures / "test-amd.yaml"
    done = run_invoke("pipeline.validate", "--source", str(current))
    assert done.returncode == 0 and done.stdout.strip().endswith("in 324 generated steps"), done.stdout
    out = tmp_path / "vllm.yaml"
    assert run_invoke("pipeline.generate", "--source", str(current), "--out", str(out)).returncode == 0
    assert run_invoke("pipeline.validate", "--pipeline", str(out)).returncode == 0


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
    assert run_invoke("pipeline.validate", "--pipeline", str(REPO / ".buildkite" / "pipeline.yml")).returncode == 0
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
    assert yaml.safe_load(done.stdout)["steps"][0]["key"] == "image-build-amd"


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
    done = run_invoke("image.build", "--dry-run", "--arch", "gfx950,GFX942")
    assert done.returncode == 0, done.stderr
    assert "--build-arg 'DEEPEP_ROCM_ARCH=gfx942;gfx950'" in done.stdout
    assert done.stdout.startswith("DOCKER_BUILDKIT=1 ")
    assert "nothing was built" in done.stderr
