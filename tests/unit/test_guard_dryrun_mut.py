"""What `--dry-run` prints, beyond test_guard_dryrun's redaction cases (src/rocmci/runs/dryrun.py): the
environment's own secrets are masked whether the caller passes the environment or it is read from the
process, `--public` shows them, the runner's `-e NAME=value` is masked like `--env`, a step command that starts
with a given name's assignment is shown whole, and each line the text form promises (GPUs, the command of a
step and of an example, workarounds, every job, the host process's GPUs, the secrets given by name, escapes).
Written for the survivors of `nox -s mutants` on dryrun.py; each was applied by hand and seen to turn a test red.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rocmci.engine import Engine
from rocmci.gpus import Gpu
from rocmci.runs import container as ctr
from rocmci.runs import dryrun
from rocmci.runs.types import PlannedRun, Prepared, RunOptions
from rocmci.runs.workloads import Workload

LONG = "s3cr3t-given-value"
ENV_SECRET = "opensesame-value-1"  # the value of a secret-named variable of the environment, not given with --env


def opts(env: dict[str, str] | None = None, public: frozenset[str] = frozenset()) -> RunOptions:
    return RunOptions(
        image="img:1", results_dir=Path("/r"), timeout=60, network=None, shm_size="16g", memory=None,
        hf_cache="/hf", workdir="/w", env={"MY_VAL": LONG, **(env or {})}, public=public,
    )  # fmt: skip


def host(env: dict[str, str] | None = None, **kw) -> PlannedRun:
    return PlannedRun(Workload("w", "moe-tests", ("python3", "x.py", ENV_SECRET), **kw), [], None, 0, env=env or {})


def words(line: str) -> list[str]:
    """A printed shell line (continued over lines with backslashes) as its words."""
    return shlex.split(line.replace("\\\n", " "))


@pytest.mark.parametrize("how", ["passed", "read"])
def test_the_environments_secrets_are_masked_passed_or_read_from_the_process(monkeypatch, how):
    prepared = Prepared([[host()]], [f"warning {ENV_SECRET}"], [f"note {ENV_SECRET}"])
    if how == "passed":
        monkeypatch.delenv("MY_API_TOKEN", raising=False)  # the process's own environment does not hold it
        environ = {"MY_API_TOKEN": ENV_SECRET}
    else:
        monkeypatch.setenv("MY_API_TOKEN", ENV_SECRET)
        environ = None
    for text in (dryrun.dry_run_lines(prepared, None, opts(), environ=environ),
                 [json.dumps(dryrun.dry_run_json(prepared, None, opts(), environ=environ))]):  # fmt: skip
        joined = "\n".join(text)
        assert ENV_SECRET not in joined and "warning ***" in joined and "note ***" in joined


def test_a_public_name_of_the_environment_shows():
    prepared = Prepared([[host()]], [f"warning {ENV_SECRET}"])
    o = opts(public=frozenset({"MY_API_TOKEN"}))
    lines = dryrun.dry_run_lines(prepared, None, o, environ={"MY_API_TOKEN": ENV_SECRET})
    assert lines[0] == f"# preflight: warning {ENV_SECRET}"
    data = dryrun.dry_run_json(prepared, None, o, environ={"MY_API_TOKEN": ENV_SECRET})
    assert data["warnings"] == [f"warning {ENV_SECRET}"]


def test_the_runners_short_e_is_masked_like_env():
    # run-amd-test.sh passes values with `-e NAME=value` (and secrets by name, `-e HF_TOKEN`).
    shown = ("docker", "run", "-e", "MY_SHORT=ab", "-e", "HF_TOKEN", "--env", "MY_VAL=x", "img", "true")
    job = PlannedRun(Workload("step s", "step", ("/bin/bash", "-c", "true")), [], None, 0, shown=shown)
    o = opts({"MY_SHORT": "ab", "MY_VAL": "x"})
    data = dryrun.dry_run_json(Prepared([[job]], []), None, o, environ={})
    assert data["runs"][0]["argv"] == ["docker", "run", "-e", "MY_SHORT=***", "-e", "HF_TOKEN", "--env", "MY_VAL=***",
                                       "img", "true"]  # fmt: skip
    assert words(dryrun.dry_run_lines(Prepared([[job]], []), None, o, environ={})[-1])[3] == "MY_SHORT=***"


def test_a_step_command_that_sets_a_given_name_is_shown_whole():
    # `--env VLLM_LOGGING_LEVEL=DEBUG` and a step whose command starts `VLLM_LOGGING_LEVEL=DEBUG pytest ...`: the
    # command is a word of argv, not an assignment; its short value masks nothing.
    command = "VLLM_LOGGING_LEVEL=DEBUG pytest -v tests/kernels"
    step = PlannedRun(Workload("step s", "step", ("/bin/bash", "-c", command)), [], None, 0)
    o = opts({"VLLM_LOGGING_LEVEL": "DEBUG"})
    assert dryrun.dry_run_json(Prepared([[step]], []), None, o, environ={})["runs"][0]["argv"][2] == command
    line = dryrun.dry_run_lines(Prepared([[step]], []), None, o, environ={})[0]
    assert line == f"# step s on GPUs [none detected]: /bin/bash -c {command}"


def test_a_container_run_names_the_engines_client_and_masks_its_env():
    spec = ctr.ContainerSpec(image="img:1", argv=("python3", "-m", "pytest"), workdir="/w", env={"MY_VAL": LONG},
                             name="rocmci-run-1")  # fmt: skip
    run = PlannedRun(Workload("w", "moe-tests", ("python3", "-m", "pytest")), [], spec, 0)
    engine = Engine("/opt/other/docker")
    expected = dryrun.ValueRedactor(opts(), {}).argv(ctr.run_argv(spec, "/opt/other/docker"))
    assert expected[0] == "/opt/other/docker" and ["--env", "MY_VAL=***"] == expected[-8:-6]
    assert expected[-4:] == ["img:1", "python3", "-m", "pytest"]
    data = dryrun.dry_run_json(Prepared([[run]], []), engine, opts(), environ={})
    assert data["runs"][0]["argv"] == expected
    assert words(dryrun.dry_run_lines(Prepared([[run]], []), engine, opts(), environ={})[-1]) == expected
    no_engine = dryrun.dry_run_json(Prepared([[run]], []), None, opts(), environ={})["runs"][0]["argv"]
    assert no_engine == ["docker", *expected[1:]]


GPUS = [Gpu(0, 2, "gfx942", 128), Gpu(3, 5, "gfx950", 131)]


def test_each_line_of_a_host_run():
    run = PlannedRun(
        Workload("w", "moe-tests", ("python3", "x.py", "a b"), env={"VLLM_LOGGING_LEVEL": "DEBUG"},
                 workarounds=("wa-one", "wa-two")),
        GPUS, None, 0, env={"ROCR_VISIBLE_DEVICES": "0,3"},
    )  # fmt: skip
    o = opts({"HF_TOKEN": "hf_x", "A_TOKEN": "y"})
    lines = dryrun.dry_run_lines(Prepared([[run]], []), None, o, environ={})
    assert lines[:-1] == [
        "# w on GPUs [0:gfx942, 3:gfx950]: VLLM_LOGGING_LEVEL=DEBUG python3 x.py 'a b'",
        "# workarounds from the registry: wa-one, wa-two",
        "# host process: GPUs 0,3 visible (ROCR_VISIBLE_DEVICES=0,3; HIP sees them from 0)",
        "# plus from --env, values not shown: A_TOKEN, HF_TOKEN",
        "cd /w",
    ]
    assert words(lines[-1]) == ["env", "ROCR_VISIBLE_DEVICES=0,3", "python3", "x.py", "a b"]
    assert dryrun.dry_run_json(Prepared([[run]], []), None, o, environ={})["runs"][0]["gpus"] == [0, 3]
    # No ROCR_VISIBLE_DEVICES, no options: no line about them.
    bare = PlannedRun(Workload("w", "moe-tests", ("true",)), [], None, 0, env={"ROCR_VISIBLE_DEVICES_X": "1"})
    lines = dryrun.dry_run_lines(Prepared([[bare]], []), None, None, environ={})
    assert lines[0] == "# w on GPUs [none detected]: true" and len(lines) == 2
    assert words(lines[1]) == ["env", "ROCR_VISIBLE_DEVICES_X=1", "true"]


def test_every_job_of_a_step_is_shown():
    jobs = [
        PlannedRun(Workload(f"step s job {i}/2", "step", ("/bin/bash", "-c", "true")), [], None, i,
                   env={"BUILDKITE_PARALLEL_JOB": str(i)}, shown=("docker", "run", f"img{i}"))
        for i in range(2)
    ]  # fmt: skip
    lines = dryrun.dry_run_lines(Prepared([jobs], []), None, opts(), environ={})
    assert [words(line) for line in lines if not line.startswith("#")] == [
        ["docker", "run", f"img{i}"] for i in range(2)
    ]
    assert "#   BUILDKITE_PARALLEL_JOB=1" in lines


@pytest.mark.parametrize(
    "raw, shown",
    [("\u2028", "\\u2028"), ("\u202e", "\\u202e"), ("\x1b", "\\x1b"), ("\x85", "\\x85"), ("\n", "\\x0a")],
)
def test_a_comment_shows_unsafe_characters_as_escapes(raw, shown):
    assert dryrun._comment(f"a{raw}b") == f"# a{shown}b"


def test_a_given_value_of_8_characters_is_masked_inside_a_word_and_7_only_where_it_is_the_value():
    work = Workload("w", "step", ("python3", "--opt=abcd1234", "--other=abc1234"))
    o = opts({"MY_EIGHT": "abcd1234", "MY_SEVEN": "abc1234"})
    argv = dryrun.dry_run_json(Prepared([[PlannedRun(work, [], None, 0)]], []), None, o, environ={})["runs"][0]["argv"]
    assert argv == ["python3", "--opt=***", "--other=abc1234"]
