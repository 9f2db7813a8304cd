"""Run promises that a hand-made mutation once slipped past (issue 24); README "Mutation testing" maps each
mutation to the test here that now turns red.

Real components throughout: host-mode runs start the stand-in vLLM tree's pytest as real processes
(as tests/functional/test_host_runs.py does: no Docker, no GPU), process tests start real process groups,
and the report tests write real files.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from rocmci import process
from rocmci import workaround_registry as wr
from rocmci.runs import container as ctr
from rocmci.runs import execute as runs
from rocmci.runs import outcomes
from rocmci.runs import results as res
from rocmci.runs import workarounds as wa
from rocmci.runs import workloads as wl
from tests.conftest import REPO, run_invoke
from tests.functional.test_host_runs import _agent, args, make_host, reports

SECRET = "s3cr3t-canary-9d2f7b1e"
REGISTRY = REPO / "src" / "rocmci" / "data" / "workarounds.yaml"
STANDIN_MODULE = "tests/kernels/moe/test_deepep_moe.py"


@pytest.fixture
def host(tmp_path) -> dict:
    """A fake four-GPU host and a copy of the stand-in vLLM tree, as tests/functional/test_host_runs.py has them."""
    return make_host(tmp_path)


def _append_to_standin(host: dict, code: str) -> None:
    """Extend this test's copy of the stand-in module (the shared stand-in stays as it is)."""
    module = host["tree"] / STANDIN_MODULE
    module.write_text(module.read_text() + "\n" + code)


# --- SIGABRT: retried once, as vLLM's pipeline does; the previous JUnit file never read ---------------------

ABORT_ALWAYS = """
if os.environ.get("STANDIN_MODE") == "abort-always":  # added by test_guards_runs.py
    os.makedirs(os.environ["STANDIN_REPORT_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["STANDIN_REPORT_DIR"], "starts"), "a") as fh:
        fh.write("start\\n")
    os.kill(os.getpid(), signal.SIGABRT)
"""


def test_sigabrt_is_retried_exactly_once_and_a_stale_junit_is_never_read(host):
    _append_to_standin(host, ABORT_ALWAYS)
    stale = host["results"] / "junit-moe-high-throughput.xml"
    stale.parent.mkdir(parents=True)
    stale.write_text('<testsuite name="pytest" tests="4" failures="0" errors="0" skipped="0"></testsuite>\n')
    done = run_invoke(*args(host, "--mode", "high-throughput", "--json", mode="abort-always"), env=host["env"])
    (result,) = json.loads(done.stdout)["results"]
    assert (host["reports"] / "starts").read_text() == "start\nstart\n"  # the first run and one retry
    assert result["attempts"] == 2 and done.stderr.count("retrying once") == 1
    assert (result["outcome"], result["junit"]) == ("crashed", None), result  # not the 4 passes of before
    assert "SIGABRT" in result["detail"] and done.returncode == 12
    assert not stale.exists()


# --- host mode: the CI job's orchestration variables never reach the workload -------------------------------


def test_orchestration_variables_are_dropped_in_host_mode(host):
    inherited = {name: "from-the-ci-job" for name in wl.ORCHESTRATION_VARS}
    inherited["VLLM_CI_EXPECTED_GPU_COUNT"] = "8"  # read by rocmci's preflight: a number
    assert wl.host_env({**inherited, "PATH": "/usr/bin", "HOME": "/root"}) == {"PATH": "/usr/bin", "HOME": "/root"}
    done = run_invoke(*args(host, "--mode", "low-latency"), env={**host["env"], **inherited})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = reports(host)["none"]
    assert rows and all(not set(wl.ORCHESTRATION_VARS) & set(r["env"]) for r in rows), rows[0]["env"]
    assert all(not set(wl.ORCHESTRATION_VARS) & set(r["worker_env"]) for r in rows)


# --- a secret --env goes to `docker run` by name, never by value --------------------------------------------


def test_a_secret_env_reaches_docker_run_by_name_only(tmp_path):
    from tests.unit.test_runs import moe, options

    root = tmp_path
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/kfd").write_text("")
    opts = options(root, env={"MY_SECRET": SECRET, "PLAIN_VALUE": "shown"}, skip_preflight=True)
    (workload,) = moe()
    spec = runs.spec_for(workload, [], opts, 0)
    argv = ctr.run_argv(spec, "docker")
    assert not [a for a in argv if SECRET in a], "a secret value is on docker's command line"
    assert argv[argv.index("MY_SECRET") - 1] == "--env"  # by name: docker takes the value from its own env
    # A plain name may hold a secret too: by name as well, never on the argv `ps` shows every user.
    assert argv[argv.index("PLAIN_VALUE") - 1] == "--env" and "PLAIN_VALUE=shown" not in argv
    assert runs._client_env(opts)["MY_SECRET"] == SECRET  # where docker finds it
    assert runs._client_env(opts)["PLAIN_VALUE"] == "shown"


# --- workarounds: what could not be read is no evidence that one is obsolete --------------------------------


def test_a_missing_checkout_file_is_no_evidence_of_obsolescence(tmp_path):
    (workaround,) = [w for w in wr.load_registry(REGISTRY) if w.id == "rocprofiler-register-teardown"]
    (dockerfile_only := tmp_path / "dockerfile-only" / "docker").mkdir(parents=True)
    (dockerfile_only / "Dockerfile.rocm_base").write_text("FROM x\nRUN patch -p1 < ROCm/rocm-systems#6942.patch\n")
    (tests_only := tmp_path / "tests-only" / "tests/kernels/moe").mkdir(parents=True)
    (tests_only / "test_deepep_moe.py").write_text("import os\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for checkout in (dockerfile_only.parent, tests_only.parents[2], empty):
        check = wa.check(workaround, wa.Sources(vllm_src=checkout))
        assert check.status == wa.APPLIES, (checkout, check.evidence)
    part = next(c for c in workaround.remove_when[0].parts if c.kind == "vllm_tests_do_not_set")
    met, evidence = wa.check_condition(part, wa.Sources(vllm_src=empty))
    assert met is None and "test_deepep_moe.py" in evidence
    docker_part = next(c for c in workaround.remove_when[0].parts if c.kind == "vllm_dockerfile_applies")
    assert wa.check_condition(docker_part, wa.Sources(vllm_src=empty)) == (
        None, f"{empty}/docker/Dockerfile.rocm_base not found"
    )  # fmt: skip
    both = tmp_path / "both"
    (both / "docker").mkdir(parents=True)
    (both / "docker" / "Dockerfile.rocm_base").write_text((dockerfile_only / "Dockerfile.rocm_base").read_text())
    (both / "tests/kernels/moe").mkdir(parents=True)
    (both / "tests/kernels/moe/test_deepep_moe.py").write_text("import os\n")
    assert wa.check(workaround, wa.Sources(vllm_src=both)).status == wa.OBSOLETE  # the evidence, when it exists


# --- shards: one that drew no case does not spoil the others ----------------------------------------------


def _result(name: str, outcome: res.Outcome, tests: int, code: int = 0) -> res.Result:
    return res.Result(name, outcome, code, 1.0, "", res.JUnitSummary(tests=tests))


def test_an_empty_shard_does_not_spoil_the_merged_result():
    merged = outcomes.merge_shards(
        [_result("s0", res.Outcome.PASSED, 3), _result("s1", res.Outcome.NO_TESTS, 0, 5)], "moe-tests x (2 shards)"
    )
    assert (merged.outcome, merged.junit.tests) == (res.Outcome.PASSED, 3)
    alone = outcomes.merge_shards([_result("s0", res.Outcome.NO_TESTS, 0, 5)] * 2, "moe-tests x (2 shards)")
    assert alone.outcome is res.Outcome.NO_TESTS  # nothing ran anywhere: that is still said
    failed = outcomes.merge_shards(
        [_result("s0", res.Outcome.FAILED, 3, 1), _result("s1", res.Outcome.NO_TESTS, 0, 5)], "x"
    )
    assert failed.outcome is res.Outcome.FAILED


# --- the report files: replaced whole (never written in place), and redacted --------------------------------


def _report(tmp_path: Path, capsys) -> tuple[Path, str]:
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    for name in ("annotation.md", "results.json"):
        (tmp_path / f"old-{name}").write_text(f"old {name}\n")
        os.link(tmp_path / f"old-{name}", results_dir / name)  # a second name for the old content
    opts = runs.RunOptions(
        image="img", results_dir=results_dir, timeout=60.0, network=None, shm_size="1g", memory=None,
        hf_cache=str(tmp_path), workdir="/", env={"MY_SECRET": SECRET},
    )  # fmt: skip
    junit = res.JUnitSummary(tests=2, failures=1, failed_cases=[f"test_x[{SECRET}]"])
    result = res.Result("moe-tests", res.Outcome.FAILED, 1, 1.0, f"1 failed: test_x[{SECRET}]", junit)
    env = {k: v for k, v in os.environ.items() if k not in ("BUILDKITE", "BUILDKITE_AGENT_ACCESS_TOKEN")}
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # not under Buildkite here: the build page is checked end to end below
    try:
        code = outcomes.report([result], opts, False, [f"a note naming {SECRET}"], [], runs.redactor(opts))
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert code == 1
    return results_dir, capsys.readouterr().out


def test_report_files_are_replaced_whole_never_written_in_place(tmp_path, capsys):
    results_dir, _ = _report(tmp_path, capsys)
    for name in ("annotation.md", "results.json"):
        assert (tmp_path / f"old-{name}").read_text() == f"old {name}\n", f"{name} was written in place"
        assert (results_dir / name).read_text() != f"old {name}\n"
    assert json.loads((results_dir / "results.json").read_text())["results"][0]["outcome"] == "failed"
    assert not [p for p in results_dir.iterdir() if p.name.endswith(".tmp")]


def test_every_report_output_goes_through_the_redactor(tmp_path, capsys):
    results_dir, table = _report(tmp_path, capsys)
    outputs = {"table": table, **{p.name: p.read_text() for p in results_dir.iterdir()}}
    assert set(outputs) == {"table", "annotation.md", "results.json"}
    for name, text in outputs.items():
        assert SECRET not in text, f"{name} shows the secret"
        shown = text.replace("\\*", "*") if name.endswith(".md") else text  # Markdown escapes the mask's '*'
        assert "***" in shown, f"{name} lost the failing case instead of redacting it"


LEAK = """
if os.environ.get("STANDIN_MODE") == "leak":  # added by test_guards_runs.py
    @pytest.mark.parametrize("token", [os.environ["MY_SECRET"]])
    def test_secret_in_the_id(token):
        pytest.fail("a failure whose test id carries a secret")
"""


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_secret_in_a_failing_test_id_reaches_no_output(host, tmp_path, as_json):
    """The real leak of issue 24: the test id reached the table, --json, results.json, annotation.md and the
    build page unredacted (5 times)."""
    _append_to_standin(host, LEAK)
    agent_env, record = _agent(tmp_path)
    given = ("--json",) if as_json else ()
    done = run_invoke(
        *args(host, "--mode", "high-throughput", "--env", f"MY_SECRET={SECRET}", *given, mode="leak"),
        env={**host["env"], **agent_env},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    outputs = {
        "stdout": done.stdout,
        "stderr": done.stderr,
        "agent": record.read_text(),
        # rocmci's own files; pytest's JUnit XML is the workload's own file, uploaded as it was written
        **{p.name: p.read_text(errors="replace") for p in host["results"].iterdir() if p.suffix != ".xml"},
    }
    leaked = [name for name, text in outputs.items() if SECRET in text]
    assert leaked == [], f"the secret appears in {leaked}"
    assert "test_secret_in_the_id\\[\\*\\*\\*\\]" in outputs["annotation.md"]  # as Markdown text: [ ] escaped
    annotate = json.loads(record.read_text().splitlines()[0])
    assert annotate["argv"][0] == "annotate" and "test_secret_in_the_id\\[\\*\\*\\*\\]" in annotate["stdin"]


# --- process groups: whatever the child left behind goes with it, also after a normal end ----------------


def test_the_whole_group_is_killed_after_a_normal_end(tmp_path):
    pidfile = tmp_path / "pid"
    code = f"import subprocess; p = subprocess.Popen(['sleep', '300']); open({str(pidfile)!r}, 'w').write(str(p.pid))"
    lines: list[str] = []
    done = process.stream([sys.executable, "-c", code], lines.append, group=True, timeout=60)
    assert (done.returncode, done.timed_out) == (0, False)
    left = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(left), "the child's own child outlived it"


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def test_a_lone_child_that_ignores_sigterm_is_killed_when_stopped():
    """A `docker run` client passes SIGTERM on to its container and stays; stop_all must not leave it."""
    running = process.Running()
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(300)"
    )
    started = time.monotonic()

    def target() -> None:
        process.stream([sys.executable, "-c", code], lambda line: running.stop_all(), timeout=120, running=running)

    process.run_threads([target], running)
    assert time.monotonic() - started < process.GRACE_SECONDS + 10
