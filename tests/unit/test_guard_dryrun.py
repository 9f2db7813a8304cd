"""What a run task's `--dry-run` prints (src/rocmci/runs/dryrun.py), text and JSON: every given `--env` value and every
secret is masked in each part it can reach (preflight warnings, notes, the step's lines, a run's name, the job env,
the host command), a `--public` name shows, secrets given by name are listed without values, the workdir is quoted,
and every comment stays one line. Survivors of hand mutations of dryrun.py (issue 35: the dry run's redaction).
docs/guards.md maps each test to the mutation it was watched to kill.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rocmci.runs import dryrun
from rocmci.runs.types import PlannedRun, Prepared, RunOptions
from rocmci.runs.workloads import Workload

LONG = "s3cr3t-given-value"  # a given --env value of 8 characters or more: masked in any word
TOKEN = "hf_" + "Ab1" * 11  # a secret by name (HF_TOKEN) and by shape
SHORT = "ab"  # a short given value: masked only as its own NAME=value


def opts(**env) -> RunOptions:
    given = {"MY_VAL": LONG, "HF_TOKEN": TOKEN, "MY_SHORT": SHORT, "MY_PUB": "shown-value-1", **env}
    return RunOptions(
        image="img:1", results_dir=Path("/r"), timeout=60, network=None, shm_size="16g", memory=None,
        hf_cache="/hf", workdir="/work dir", env=given, public=frozenset({"MY_PUB"}),
    )  # fmt: skip


def host_run(name: str = f"moe-tests {LONG}") -> PlannedRun:
    work = Workload(name, "moe-tests", ("python3", "-m", "pytest", f"--opt={LONG}", "ab"), about=(f"about {LONG}",))
    env = {"MY_VAL": LONG, "MY_SHORT": SHORT, "MY_PUB": "shown-value-1", "PLAIN": "ab"}
    return PlannedRun(work, [], None, 0, env=env)


def job_run() -> PlannedRun:
    work = Workload(f"step {LONG}", "step", ("/bin/bash", "-c", "true"))
    env = {"MY_VAL": LONG, "BUILDKITE_LABEL": f"x {TOKEN}", "MY_PUB": "shown-value-1"}
    shown = ("docker", "run", "--env", f"MY_VAL={LONG}", "--env", "MY_SHORT=ab", "--network", "ab", "img", "/bin/bash")
    return PlannedRun(work, [], None, 0, env=env, shown=shown)


def prepared(*runs: PlannedRun) -> Prepared:
    return Prepared([list(runs)], [f"warning {LONG}", f"token {TOKEN}"], [f"note {LONG}\nsecond line"])


def words(line: str) -> list[str]:
    return shlex.split(line.replace("\\\n", " "))


def text(p: Prepared, o: RunOptions | None = None) -> list[str]:
    return dryrun.dry_run_lines(p, None, opts() if o is None else o, environ={})


def test_no_given_value_or_secret_reaches_any_line_of_the_text_form():
    lines = text(prepared(host_run(), job_run()))
    joined = "\n".join(lines)
    assert LONG not in joined and TOKEN not in joined
    assert lines[0] == "# preflight: warning ***" and lines[1].startswith("# preflight: token ")
    assert lines[2] == "# note ***\\x0asecond line"  # a comment stays one line
    assert "# about ***" in lines and any(line.startswith("# moe-tests *** on GPUs [none detected]:") for line in lines)
    assert all(not line.startswith("#") or "\n" not in line for line in lines)


def test_a_host_run_prints_cd_and_env_with_given_values_masked_and_public_ones_shown():
    lines = text(prepared(host_run()))
    assert "cd '/work dir'" in lines
    assert "# plus from --env, values not shown: HF_TOKEN" in lines
    command = words(lines[-1])
    assert command[:5] == ["env", "MY_VAL=***", "MY_SHORT=***", "MY_PUB=shown-value-1", "PLAIN=ab"]
    assert command[5:] == ["python3", "-m", "pytest", "--opt=***", "ab"]  # a short value is no word's mask


def test_without_secrets_given_no_such_line_is_printed():
    o = RunOptions(image="i", results_dir=Path("/r"), timeout=1, network=None, shm_size="1g", memory=None,
                   hf_cache="/hf", workdir="/w", env={"MY_VAL": LONG})  # fmt: skip
    lines = text(prepared(host_run()), o)
    assert not any(line.startswith("# plus from --env") for line in lines)
    assert "cd /w" in lines


def test_a_jobs_env_and_command_are_masked_the_same_way():
    lines = text(prepared(job_run()))
    at = lines.index("# job env:")
    assert lines[at + 1] == "#   MY_VAL=***" and lines[at + 3] == "#   MY_PUB=shown-value-1"
    assert lines[at + 2].startswith("#   BUILDKITE_LABEL=x ") and "***" in lines[at + 2]
    assert TOKEN not in lines[at + 2]
    shown = words(lines[-1])
    assert shown == [
        "docker",
        "run",
        "--env",
        "MY_VAL=***",
        "--env",
        "MY_SHORT=***",
        "--network",
        "ab",
        "img",
        "/bin/bash",
    ]


def test_the_json_form_masks_names_env_argv_warnings_and_notes():
    data = dryrun.dry_run_json(prepared(host_run(), job_run()), None, opts(), environ={})
    dumped = json.dumps(data)
    assert LONG not in dumped and TOKEN not in dumped
    host, job = data["runs"]
    assert host["name"] == "moe-tests ***" and job["name"] == "step ***"
    assert host["env"] == ["MY_VAL=***", "MY_SHORT=***", "MY_PUB=shown-value-1", "PLAIN=ab"]
    assert host["argv"] == ["python3", "-m", "pytest", "--opt=***", "ab"]
    assert job["argv"][3] == "MY_VAL=***" and job["argv"][5] == "MY_SHORT=***"
    assert data["warnings"][0] == "warning ***" and data["notes"] == ["note ***\nsecond line"]
    assert data["dry_run"] is True


@pytest.mark.parametrize("value", ["abcdefg", "xyz1234"])
def test_a_secret_named_value_is_masked_as_a_word_however_short(value):
    """7 characters: a plain given value that short shows as a word; one given under a secret's name does not."""
    work = Workload("w", "moe-tests", ("python3", value))
    plain = text(Prepared([[PlannedRun(work, [], None, 0)]], []), opts(MY_OTHER=value))
    secret = text(Prepared([[PlannedRun(work, [], None, 0)]], []), opts(HF_TOKEN=value))
    assert words(plain[-1])[-1] == value and words(secret[-1])[-1] == "***"


def test_a_public_name_is_not_masked_even_when_long():
    work = Workload("w", "moe-tests", ("echo", "shown-value-1"))
    lines = text(Prepared([[PlannedRun(work, [], None, 0, env={"MY_PUB": "shown-value-1"})]], []))
    assert words(lines[-1]) == ["env", "MY_PUB=shown-value-1", "echo", "shown-value-1"]
