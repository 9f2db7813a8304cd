"""run.bisect --on buildkite / --from-results: the pure fan-out planning, the job's script run for real by bash
in a git history, the verdicts read back from outcome files, and the face that refuses a pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path

import pytest

from rocmci.errors import FindingsError, InputError, UsageError
from rocmci.pipeline import source as srcmod
from rocmci.runs import agent, fanout
from rocmci.runs import bisect as bs
from rocmci.runs import steps as st

STEPS = """\
steps:
- label: Bisect Me
  agent_pool: mi300_2
  num_gpus: 2
  mirror_hardwares: [amdproduction]
  commands:
  - pytest -q test_bisect.py
- label: Native Me
  agent_pool: mi300_2
  num_gpus: 2
  dind: false
  parallelism: 2
  mirror_hardwares: [amdproduction]
  commands:
  - pytest -q test_native.py
"""
DIGEST = "sha256:" + "ab" * 32
IMAGE = f"localhost:5000/rocm/vllm-ci@{DIGEST}"
C = [f"{i:x}" * 40 for i in range(1, 8)]  # seven commits, the last is --bad


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, st.Step]:
    path = tmp_path_factory.mktemp("steps") / "test-amd.yaml"
    path.write_text(STEPS)
    src = srcmod.load_source(path, "test-amd.yaml")
    found = st.generated_steps(src, "amdproduction", "rocm/vllm-ci:build-$BUILDKITE_BUILD_ID")
    return {s.source_label: s for s in found}


def test_the_image_is_pinned_by_the_registry_digest():
    assert fanout.pinned_image(f"localhost:5000/rocm/vllm-ci:{C[0]}", DIGEST) == IMAGE
    assert fanout.pinned_image("rocm/vllm-ci:abc", DIGEST) == f"rocm/vllm-ci@{DIGEST}"
    with pytest.raises(UsageError, match="not a sha256 digest"):
        fanout.pinned_image("rocm/vllm-ci:abc", "sha256:short")


def test_each_job_is_the_generated_step_on_its_queue_with_the_commits_image(generated):
    step = generated["Bisect Me"]
    jobs = fanout.job_steps(step.data, C[0], IMAGE, 3, "s1")
    assert [j["key"] for j in jobs] == [f"bisect-{C[0][:12]}-r{r}" for r in range(3)]
    for job in jobs:
        assert job["agents"] == step.data["agents"] == {"queue": "amd_mi300_2"}
        assert job["env"] == {**step.env, "DOCKER_IMAGE_NAME": IMAGE}  # nothing else of the env changes
        assert "depends_on" not in job and job["timeout_in_minutes"] == step.data["timeout_in_minutes"]
        assert job["retry"] == step.data["retry"] and job["soft_fail"] == step.data["soft_fail"]
        assert f"rocmci_bisect_exit=0; {step.command} || rocmci_bisect_exit=$$?" in job["command"].splitlines()
        assert job["artifact_paths"][:-1] == step.data["artifact_paths"]
    ids = agent.Ids("b", "j", C[0], "main")
    assert agent.job(jobs[0], parallel_job=None, ids=ids, checkout="/c").gpus == 2  # an agent of mi300_2 owns 2
    assert step.data["env"]["DOCKER_IMAGE_NAME"] != IMAGE  # the generated step itself was not changed


def test_a_native_job_runs_its_pod_in_the_commits_image(generated):
    step = generated["Native Me"]
    (job,) = fanout.job_steps(step.data, C[1], IMAGE, 1, "s1")
    pod = job["plugins"][0]["kubernetes"]["podSpecPatch"]["containers"][0]
    assert pod["image"] == IMAGE and job["env"] == step.env and job["parallelism"] == 2
    assert "export BUILDKITE_COMMIT=" + C[1] in job["command"]  # the native runner compares it with the image's


def test_only_a_full_commit_and_a_pinned_image_reach_the_script(generated):
    data = generated["Bisect Me"].data
    with pytest.raises(UsageError, match="not a full commit hash"):
        fanout.job_steps(data, "abc; rm -rf /", IMAGE, 1, "s")
    with pytest.raises(UsageError, match="not an image pinned by digest"):
        fanout.job_steps(data, C[0], "rocm/vllm-ci:latest", 1, "s")


def test_the_pipeline_holds_the_commits_with_an_image_and_refuses_to_be_empty(generated):
    data = generated["Bisect Me"].data
    cands = [fanout.Candidate(C[0], "t", IMAGE, step=data), fanout.Candidate(C[1], "t", None, "no image")]
    doc = fanout.pipeline("Bisect Me", cands, 2, "s")
    assert [j["key"] for j in doc["steps"][0]["steps"]] == [f"bisect-{C[0][:12]}-r0", f"bisect-{C[0][:12]}-r1"]
    with pytest.raises(UsageError, match="no candidate commit has a CI image"):
        fanout.pipeline("Bisect Me", cands[1:], 2, "s")


def _git(root: Path, *args: str) -> str:
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    return subprocess.run([*git, *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_job_script_runs_the_commits_runner_and_records_its_exit_status(generated, tmp_path):
    """The script, after the upload's interpolation, run by bash -e -c as the agent runs it, in a clone at HEAD."""
    root = tmp_path / "repo"
    runner = root / ".buildkite/scripts/hardware_ci/run-amd-test.sh"
    runner.parent.mkdir(parents=True)
    commits = []
    for code in (3, 0):  # the older commit's runner exits 3
        runner.write_text(f'echo "$BUILDKITE_COMMIT $DOCKER_IMAGE_NAME" > "$HOME/seen"\nexit {code}\n')
        _git(root, "init", "-q", "-b", "main") if not commits else None
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", str(code))
        commits.append(_git(root, "rev-parse", "HEAD"))
    (job,) = fanout.job_steps(generated["Bisect Me"].data, commits[0], IMAGE, 1, "s1")
    script = agent.interpolate(job["command"], {})
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "BUILDKITE_PARALLEL_JOB": "0",
           "DOCKER_IMAGE_NAME": job["env"]["DOCKER_IMAGE_NAME"], "BUILDKITE_COMMIT": commits[1]}  # fmt: skip
    done = subprocess.run([*agent.AGENT_SHELL, script], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 3, done.stderr  # the runner's exit status is the job's
    assert _git(root, "rev-parse", "HEAD") == commits[0]  # the commit's own runner ran
    assert (tmp_path / "seen").read_text().split() == [commits[0], IMAGE]
    path = root / f"{fanout.PREFIX}{commits[0]}-r0-p0.json"
    outcome = fanout.parse_outcome(path.read_bytes(), str(path), "s1")
    assert (outcome.commit, outcome.run, outcome.parallel_job, outcome.parallel_jobs, outcome.exit_code) == (
        commits[0], 0, 0, 1, 3)  # fmt: skip
    assert path.match(fanout.outcome_glob(commits[0], 0))  # the job's artifact_paths upload it


def record(commit: str, run: int = 0, job: int = 0, jobs: int = 1, code: int = 0, search: str = "s1") -> bytes:
    return json.dumps({"rocmci_bisect": 1, "search": search, "commit": commit, "run": run, "parallel_job": job,
                       "parallel_jobs": jobs, "exit_code": code, "seconds": 5}).encode()  # fmt: skip


def outcomes(*items: tuple[str, int, int, int, str]) -> list[tuple[fanout.Outcome, str]]:
    out = []
    for commit, run, job, jobs, word in items:
        name = f"{fanout.PREFIX}{commit}-r{run}-p{job}.json"
        out.append((fanout.parse_outcome(record(commit, run, job, jobs), name, "s1"), word))
    return out


def test_verdicts_from_outcomes_need_every_job_to_call_a_commit_good():
    found = outcomes(
        (C[0], 0, 0, 1, "passed"), (C[0], 1, 0, 1, "passed"),  # good: both runs passed
        (C[1], 0, 0, 1, "passed"),  # one of two runs reported: undecided
        (C[2], 0, 0, 1, "failed"),  # bad already (--bad-if any), whatever the other run says
        (C[3], 0, 0, 2, "passed"), (C[3], 0, 1, 2, "passed"), (C[3], 1, 0, 2, "passed"),  # 3 of 2 x 2 jobs
        (C[4], 0, 0, 1, "passed"), (C[4], 1, 0, 1, "crashed at teardown"),  # decides nothing
    )  # fmt: skip
    got = fanout.decide(C, found, repeat=2)
    assert {c: d.verdict for c, d in got.items()} == {
        C[0]: bs.GOOD, C[1]: bs.SKIP, C[2]: bs.BAD, C[3]: bs.SKIP, C[4]: bs.SKIP, C[5]: bs.SKIP}  # fmt: skip
    assert got[C[1]].why == "undecided: 1 of 2 jobs uploaded an outcome"
    assert got[C[3]].why == "undecided: 3 of 4 jobs uploaded an outcome"
    assert got[C[4]].why.startswith("no run passed or failed")
    assert got[C[5]].why.startswith("no outcome uploaded") and C[6] not in got  # --bad is never run
    assert fanout.decide(C, found, repeat=2, any_fails=False)[C[2]].verdict == bs.SKIP  # all must fail, 1 seen


def test_the_answer_from_outcomes_is_the_first_bad_commit():
    found = outcomes(*[(c, 0, 0, 1, "failed" if i >= 3 else "passed") for i, c in enumerate(C[:-1]) if i != 1])
    verdicts = {c: d.verdict for c, d in fanout.decide(C, found, repeat=1).items()}
    answer = bs.Search(C, verdicts).answer()
    assert (answer.first_bad, answer.last_good, answer.skipped) == (C[3], C[2], (C[1],))
    assert fanout.out_of_order(C, verdicts) == []
    assert fanout.out_of_order(C, {**verdicts, C[0]: bs.BAD}) == [C[0]]


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"\xff\xfe", None, "not JSON"),
        (b"[1, 2]", None, "its fields are not"),
        (record(C[0]).replace(b'"exit_code": 0', b'"exit_code": true'), None, "its fields are not"),
        (record(C[0]).replace(b'"exit_code": 0', b'"exit_code": 999'), None, "is not an exit status"),
        (record(C[0], job=2, jobs=2), f"{fanout.PREFIX}{C[0]}-r0-p2.json", "parallel job 2 of 2 is not a job"),
        (record(C[0], search="other"), None, "belongs to another bisect"),
        (record(C[0]), f"{fanout.PREFIX}{C[1]}-r0-p0.json", "name and content name different jobs"),
    ],
)
def test_a_file_that_is_not_this_bisects_outcome_is_one_line(data, name, message):
    where = name or f"{fanout.PREFIX}{C[0]}-r0-p0.json"
    with pytest.raises(InputError, match=message) as err:
        fanout.parse_outcome(data, f"dl/{where}", "s1")
    assert "\n" not in err.value.one_line() and err.value.one_line().startswith("dl/")


def test_an_outcome_outside_the_range_or_the_repeats_is_refused():
    with pytest.raises(InputError, match="not a candidate after --good up to --bad"):
        fanout.decide(C[2:], outcomes((C[0], 0, 0, 1, "passed")), repeat=1)
    with pytest.raises(InputError, match="this bisect runs each commit 1 time"):
        fanout.decide(C, outcomes((C[0], 1, 0, 1, "passed")), repeat=1)


def test_a_pipeline_the_validator_refuses_is_not_written_and_an_earlier_one_goes(monkeypatch, tmp_path, generated):
    """The face: rocmci's validator and Buildkite's schema judge the pipeline before any byte is written."""
    from rocmci import settings as settingsmod
    from rocmci.cli import bisect as face
    from rocmci.runs import service

    data = {k: v for k, v in generated["Bisect Me"].data.items()}
    data["soft_fail"] = "sometimes"  # Buildkite's schema refuses it
    doc = fanout.pipeline("Bisect Me", [fanout.Candidate(C[0], "t", IMAGE, step=data)], 1, "s")
    monkeypatch.setattr(service, "bisect_fanout", lambda v: (doc, [], settingsmod.resolve()))
    out = tmp_path / "bisect.yml"
    out.write_text("an earlier run's pipeline\n")
    flags = types.SimpleNamespace(step="Bisect Me", out=str(out), dry_run=False, on="buildkite", from_results=None)
    with pytest.raises(FindingsError, match=r"would be refused .*\[schema\].*nothing was written, and the earlier"):
        face.bisect(flags)
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no temporary file left either
    data["soft_fail"] = True
    doc = fanout.pipeline("Bisect Me", [fanout.Candidate(C[0], "t", IMAGE, step=data)], 1, "s")
    assert face.bisect(flags) == 0
    written = out.read_text()
    assert written.startswith("# Written by rocmci run.bisect --on buildkite") and f"bisect-{C[0][:12]}-r0" in written
