"""run.bisect with a local registry: CI-like per-commit images for a 16-commit vLLM-like history.

The step's stand-in test fails from commit K on; one commit has no image; one bad commit is flaky (its
first run passes). Each try runs the commit's own step file and runner (the fixture run-amd-test.sh) in
that commit's image, pulled from the registry by the runner's docker run, and records itself in the
results folder, so the test counts how often each commit ran.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_VLLM, interruptible, run_invoke
from tests.integration.helpers import build_runner_ci_image, fake_host, serve_registry  # noqa: F401 - a fixture

RUNNER = SHARED_VLLM / "buildkite" / "scripts" / "hardware_ci" / "run-amd-test.sh"
BUILD_SCRIPT = SHARED_VLLM / "buildkite" / "scripts" / "rocm" / "build-test-image.sh"
LABEL = "rocmci-test.bisect"
RUN_ID = uuid.uuid4().hex
K, NO_IMAGE, FLAKY = 4, 5, 7  # indices among the 16 candidates (oldest first): the search passes all three
STEPS = """\
steps:
- label: Bisect Me
  agent_pool: mi250_1
  mirror_hardwares: [amdproduction]
  source_file_dependencies: [vllm/]
  commands:
  - pytest -q test_bisect.py
"""
# The test of each commit's image: MODE is baked in; every run appends its commit to /rocmci-results/runs.
TEST = """\
import os
MODE = open("/opt/mode").read().strip()
COMMIT = open("/opt/vllm-ci/commit.txt").read().strip()

def test_the_step():
    with open("/rocmci-results/runs", "a") as fh:
        fh.write(COMMIT + "\\n")
    flaky_seen = f"/rocmci-results/flaky-{COMMIT}"
    if MODE == "flaky" and not os.path.exists(flaky_seen):
        open(flaky_seen, "w").close()
        return  # its first run passes
    assert MODE == "pass"
"""


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[str]]:
    """A vLLM-like checkout: good (the root), then 16 commits; the runner and build script as vLLM has them."""
    root = tmp_path_factory.mktemp("vllm")
    (root / ".buildkite/scripts/hardware_ci").mkdir(parents=True)
    (root / ".buildkite/scripts/rocm").mkdir(parents=True)
    shutil.copyfile(RUNNER, root / ".buildkite/scripts/hardware_ci/run-amd-test.sh")
    shutil.copyfile(BUILD_SCRIPT, root / ".buildkite/scripts/rocm/build-test-image.sh")
    (root / ".buildkite/test-amd.yaml").write_text(STEPS)
    (root / "docker").mkdir()
    shutil.copyfile(SHARED_VLLM / "docker" / "Dockerfile.rocm", root / "docker" / "Dockerfile.rocm")
    (root / "setup.py").write_text("")
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "good"], check=True)
    commits = []
    for i in range(16):
        (root / "marker").write_text(str(i))
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", f"change {i}"], check=True)
        commits.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    return root, commits


@pytest.fixture(scope="module")
def published(engine, python_image, history, tmp_path_factory):
    """The registry holds `<registry>/rocm/vllm-ci:<commit>` for every commit but one; removed afterwards."""
    with serve_registry(tmp_path_factory.mktemp("registry")) as address:
        yield from _publish(engine, python_image, history, tmp_path_factory, f"{address}/rocm/vllm-ci")


def _publish(engine, python_image, history, tmp_path_factory, repo: str):
    base = build_runner_ci_image(engine, python_image, tmp_path_factory.mktemp("ci"), f"{LABEL}={RUN_ID}")
    _, commits = history
    tags = []
    try:
        for i, commit in enumerate(commits[:-1]):  # the --bad commit is never run
            if i == NO_IMAGE:
                continue
            mode = "flaky" if i == FLAKY else "fail" if i >= K else "pass"
            context = tmp_path_factory.mktemp(f"c{i}")
            (context / "test_bisect.py").write_text(TEST)
            (context / "Dockerfile").write_text(
                f"FROM {base}\nCOPY test_bisect.py /opt/vllm-ci/workspace/tests/\n"
                f"RUN echo {mode} > /opt/mode && echo {commit} > /opt/vllm-ci/commit.txt\n"
            )
            tag = f"{repo}:{commit}"
            engine.cli("build", "-q", "--network", "none", "-t", tag, str(context), timeout=300)
            engine.cli("push", tag, timeout=300)
            engine.cli("rmi", tag)  # only the registry has it: the runner's docker run pulls it
            tags.append(tag)
        yield repo
    finally:
        for tag in tags:
            engine.cli("rmi", "-f", tag, check=False)
        engine.cli("rmi", "-f", base, check=False)


@pytest.fixture
def host(fake_host, tmp_path) -> Path:  # noqa: F811 - the fixture imported above
    import stat

    root = tmp_path / "host"
    shutil.copytree(fake_host / "sys", root / "sys")
    (root / "dev/dri").mkdir(parents=True)
    for node in [fake_host / "dev/kfd", *(fake_host / "dev/dri").iterdir()]:
        os.mknod(root / node.relative_to(fake_host), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "etc").mkdir()
    (root / "etc/group").write_text("render:x:4711:\n")
    return root


def bisect_args(history, host: Path, *extra: str) -> tuple[str, ...]:
    root, commits = history
    return ("run.bisect", "--step", "Bisect Me", "--good", "main~16", "--bad", commits[-1], "--vllm-src", str(root),
            "--host-root", str(host), "--skip-preflight", "--repeat", "2", *extra)  # fmt: skip


def settings(tmp_path: Path, repo: str) -> dict[str, str]:
    return {"ROCMCI_RESULTS_DIR": str(tmp_path / "results"), "ROCMCI_HF_CACHE": str(tmp_path / "hf"),
            "ROCMCI_RUN_NETWORK": "none", "ROCM_CI_IMAGE_REPO": repo}  # fmt: skip


def runs_of(tmp_path: Path) -> list[str]:
    path = tmp_path / "results" / "runs"
    return path.read_text().split() if path.exists() else []


def test_bisect_names_the_first_bad_commit_within_the_bound(engine, history, published, host, tmp_path):
    _, commits = history
    dry = run_invoke(*bisect_args(history, host, "--dry-run", "--json"), env=settings(tmp_path, published))
    assert dry.returncode == 0, dry.stderr
    rows = json.loads(dry.stdout)["candidates"]
    assert [r["commit"] for r in rows] == commits[:-1]
    assert [i for i, r in enumerate(rows) if not r["digest"]] == [NO_IMAGE] and runs_of(tmp_path) == []
    done = run_invoke(*bisect_args(history, host, "--json"), env=settings(tmp_path, published))
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    assert answer["first_bad"] == commits[K] and answer["last_good"] == commits[K - 1]
    assert answer["skipped"] == [commits[NO_IMAGE]]
    ran = runs_of(tmp_path)
    assert len(ran) <= math.ceil(math.log2(16)) + 1 + 2 * 2  # + the skip + the repeats of the good ones
    assert ran.count(commits[FLAKY]) == 2  # its first run passed: the second decided it
    assert commits[NO_IMAGE] not in ran
    assert f"--image {published}:{commits[K]}" in answer["reproduce"]["bad"]
    assert not engine.containers(f"{LABEL}={RUN_ID}")


def test_an_interrupted_bisect_resumes_without_rerunning_finished_commits(engine, history, published, host, tmp_path):
    env = {**os.environ, **settings(tmp_path, published)}
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), *bisect_args(history, host)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)  # fmt: skip
    log = tmp_path / "results" / "bisect"
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            records = [line for p in log.glob("*.jsonl") for line in p.read_text().splitlines()[1:]]
            if len(records) >= 2:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    first = runs_of(tmp_path)
    finished = [json.loads(line)["commit"] for p in log.glob("*.jsonl") for line in p.read_text().splitlines()[1:]]
    assert len(finished) >= 2
    done = run_invoke(*bisect_args(history, host, "--json"), env=settings(tmp_path, published))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stderr and json.loads(done.stdout)["first_bad"] == history[1][K]
    again = runs_of(tmp_path)[len(first) :]
    assert not set(again) & {c for c in finished if c in first}  # finished commits did not run again
    assert not engine.containers(f"{LABEL}={RUN_ID}")


# ------------------------------------------------------------------------------ --on buildkite, --from-results


def fan_out(history, tmp_path, published, *extra: str):
    root, commits = history
    out = tmp_path / "bisect.yml"
    argv = ("run.bisect", "--step", "Bisect Me", "--good", "main~16", "--bad", commits[-1], "--vllm-src", str(root),
            "--repeat", "2", "--on", "buildkite", "--out", str(out), *extra)  # fmt: skip
    return run_invoke(*argv, env=settings(tmp_path, published)), out


def run_step_dry_run(history, commit: str, image: str, host: Path, tmp_path: Path, published: str) -> dict:
    """What `run.step --dry-run --json` derives for the commit: a clone at that commit, its image."""
    root, _ = history
    clone = tmp_path / f"at-{commit[:12]}"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    argv = ("run.step", "--step", "Bisect Me", "--vllm-src", str(clone), "--source",
            str(clone / ".buildkite/test-amd.yaml"), "--image", image, "--host-root", str(host), "--skip-preflight",
            "--dry-run", "--json")  # fmt: skip
    done = run_invoke(*argv, env=settings(tmp_path, published))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_fan_out_pipeline_passes_both_validators_and_its_jobs_are_run_step_jobs(
    engine, history, published, host, tmp_path
):
    import jsonschema
    import yaml
    from check_jsonschema.builtin_schemas import get_builtin_schema

    from rocmci.runs import agent

    _, commits = history
    done, out = fan_out(history, tmp_path, published)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{commits[NO_IMAGE][:12]} (6 of 15): skipped (no image" in done.stderr
    text = out.read_text()
    assert f"# skipped {commits[NO_IMAGE][:12]}: no image" in text
    document = yaml.safe_load(text)
    jsonschema.Draft7Validator(get_builtin_schema("vendor.buildkite")).validate(document)  # Buildkite's own schema
    check = run_invoke("pipeline.validate", "--pipeline", str(out), "--json", env=settings(tmp_path, published))
    assert check.returncode == 0, check.stdout + check.stderr  # rocmci's validator, as a user would run it
    jobs = document["steps"][0]["steps"]
    with_image = [c for i, c in enumerate(commits[:-1]) if i != NO_IMAGE]
    assert [j["key"] for j in jobs] == [f"bisect-{c[:12]}-r{r}" for c in with_image for r in range(2)]
    job = next(j for j in jobs if j["key"] == f"bisect-{commits[K][:12]}-r0")
    pinned = f"{published}@{engine.registry_digest(f'{published}:{commits[K]}')}"
    assert job["env"]["DOCKER_IMAGE_NAME"] == pinned  # the commit's image, by the registry's digest
    expected = run_step_dry_run(history, commits[K], pinned, host, tmp_path, published)
    step_env = dict(item.split("=", 1) for item in expected["runs"][0]["env"])
    # The job Buildkite hands the agent (upload interpolation, as agent.job does it) is run.step's job:
    ids = agent.Ids(step_env["BUILDKITE_BUILD_ID"], step_env["BUILDKITE_JOB_ID"], commits[K], "main")
    uploaded = agent.job(job, parallel_job=None, ids=ids, checkout=step_env["BUILDKITE_BUILD_CHECKOUT_PATH"])
    assert uploaded.queue == step_env["BUILDKITE_AGENT_META_DATA_QUEUE"] == "amd_mi250_1"
    assert uploaded.gpus == len(expected["runs"][0]["gpus"]) == 1
    for name, value in job["env"].items():  # every variable of the step, as run.step gives it to the runner
        assert agent.interpolate(value, {"BUILDKITE_BUILD_ID": ids.build_id}) == step_env[name], name
    from_agent = set(agent.job({"label": "", "command": ""}, parallel_job=None, ids=ids, checkout="/x").env)
    assert set(job["env"]) == set(step_env) - from_agent  # and nothing more, nothing less
    lines = job["command"].splitlines()  # the step's command, unchanged, run in the commit's tree
    assert f"rocmci_bisect_exit=0; {step_env['BUILDKITE_COMMAND']} || rocmci_bisect_exit=$$?" in lines
    assert f"git -c advice.detachedHead=false checkout --quiet --force {commits[K]}" in lines
    assert job["timeout_in_minutes"] * 60 == uploaded.timeout_s
    assert job["label"] == f"mi250_1: Bisect Me @ {commits[K][:12]} (run 1 of 2)"
    assert f"rocmci-bisect-{commits[K]}-r0-p*.json" in job["artifact_paths"]


def outcome_files(pipeline: Path, folder: Path, exit_of) -> None:
    """Each job's outcome record as its script writes it: its printf line, after the upload's interpolation."""
    import yaml

    from rocmci.runs import agent

    folder.mkdir()
    for job in yaml.safe_load(pipeline.read_text())["steps"][0]["steps"]:
        line = next(x for x in job["command"].splitlines() if x.startswith("printf"))
        commit, run = job["key"].split("-")[1], int(job["key"].rsplit("r", 1)[1])
        full = next(c for c in exit_of if c.startswith(commit))
        script = f"rocmci_bisect_exit={exit_of[full][run]}\n{agent.interpolate(line, {})}"
        subprocess.run(["bash", "-e", "-c", script], cwd=folder, check=True, env={"PATH": os.environ["PATH"]})


def test_from_results_names_the_first_bad_commit_of_the_fanned_out_jobs(engine, history, published, tmp_path):
    root, commits = history
    done, out = fan_out(history, tmp_path, published)
    assert done.returncode == 0, done.stderr[-3000:]
    exit_of = {c: (1, 1) if i >= K else (0, 0) for i, c in enumerate(commits[:-1])}
    exit_of[commits[FLAKY]] = (0, 1)  # its first run passed
    exit_of[commits[K - 2]] = (0, 139)  # died by a signal in one run: decides nothing
    exit_of[commits[K]] = (0, 0)  # exit 0 both times, but their JUnit reports name a failed case
    outcome_files(out, tmp_path / "artifacts", exit_of)
    failed = '<testsuite><testcase classname="t" name="test_the_step"><failure/></testcase></testsuite>'
    for run in (0, 1):
        (tmp_path / "artifacts" / f"rocmci-bisect-{commits[K]}-r{run}-p0.xml").write_text(failed)
    (tmp_path / "artifacts" / "notes.json").write_text("{}")  # not an outcome file's name: ignored
    common = ("run.bisect", "--step", "Bisect Me", "--good", "main~16", "--bad", commits[-1], "--vllm-src", str(root),
              "--from-results", str(tmp_path / "artifacts"))  # fmt: skip
    argv = (*common, "--repeat", "2")
    got = run_invoke(*argv, "--json", env=settings(tmp_path, published))
    assert got.returncode == 0, got.stderr[-3000:]
    answer = json.loads(got.stdout)
    assert answer["first_bad"] == commits[K] and answer["last_good"] == commits[K - 1]
    assert answer["skipped"] == [commits[K - 2], commits[NO_IMAGE]]
    assert answer["reproduce"]["bad"] == (
        f"git checkout {commits[K]} && rocmci run.step --step 'Bisect Me' --image {published}:{commits[K]}"
    )
    text = run_invoke(*argv, env=settings(tmp_path, published))
    assert f"first bad commit: {commits[K]}" in text.stdout and "skipped: 2" in text.stdout
    # Results of another search, garbage, a commit outside the range: one line each, exit 2, no traceback.
    again = run_invoke(*common, "--repeat", "3", env=settings(tmp_path, published))
    assert again.returncode == 2 and "belongs to another bisect" in again.stderr
    garbage = tmp_path / "artifacts" / f"rocmci-bisect-{commits[3]}-r0-p0.json"
    garbage.write_text("not json{")
    bad = run_invoke(*argv, env=settings(tmp_path, published))
    assert bad.returncode == 2 and "not an outcome file of run.bisect (not JSON)" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
