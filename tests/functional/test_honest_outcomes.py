"""A run passes only when something ran and its results say so; every output goes through the one redactor.

Each case here is one issue 20/22/24 named: "passed when nothing ran", exit codes as documented, and
secrets or their escaped forms in the results table, --json, results.json, annotation.md, the
Buildkite annotation and the dry run. They run rocmci as a user would (a separate process).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rocmci.runs import results as res
from rocmci.runs.outcomes import report
from rocmci.runs.types import RunOptions
from rocmci.secrets import Redactor
from tests.conftest import REPO, SHARED_VLLM, run_invoke
from tests.functional.test_host_runs import fake_host, vllm_tree

SECRET = "s3cr3t-Value-9QzX"  # no credential shape: only the redactor's --env list can hide it


@pytest.fixture
def tree(tmp_path) -> dict:
    if not SHARED_VLLM.is_dir():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    return {
        "root": fake_host(tmp_path / "host"),
        "tree": vllm_tree(tmp_path / "vllm", in_test_workaround=False),
        "env": {"ROCMCI_IMAGE": "unused", "ROCMCI_RESULTS_DIR": str(tmp_path / "results"), "ROCMCI_RUN_TIMEOUT": "300"},
        "results": tmp_path / "results",
    }


def host_moe(tree: dict, *extra: str) -> list[str]:
    return ["run.moe-tests", "--no-container", "--host-root", str(tree["root"]), "--workdir", str(tree["tree"]),
            "--mode", "low-latency", "--json", *extra]  # fmt: skip


# --- passed when nothing ran ------------------------------------------------------------------------------


def test_pytest_version_instead_of_tests_is_not_a_pass(tree):
    done = run_invoke(*host_moe(tree, "--extra=--version"), env=tree["env"])
    (result,) = json.loads(done.stdout)["results"]
    assert (result["outcome"], done.returncode) == ("failed", 1), done.stderr
    assert "no JUnit XML was written" in result["detail"]


def test_a_junit_report_written_elsewhere_is_not_a_pass(tree, tmp_path):
    elsewhere = tmp_path / "elsewhere.xml"
    done = run_invoke(*host_moe(tree, f"--extra=--junitxml={elsewhere}"), env=tree["env"])
    (result,) = json.loads(done.stdout)["results"]
    assert elsewhere.is_file()  # pytest ran and wrote its report, just not where the run reads it
    assert (result["outcome"], done.returncode) == ("failed", 1)


def test_a_docker_client_that_cannot_run_is_an_infrastructure_error(tmp_path, engine, busybox_image):
    client = tmp_path / "docker"
    client.write_text("#!/bin/sh\nexit 0\n")
    client.chmod(stat.S_IRUSR | stat.S_IWUSR)  # present, not executable
    env = {"ROCMCI_IMAGE": busybox_image, "ROCMCI_DOCKER": str(client), "ROCMCI_RESULTS_DIR": str(tmp_path / "r"),
           "ROCMCI_HF_CACHE": str(tmp_path / "hf")}  # fmt: skip
    done = run_invoke("run.moe-tests", "--mode", "low-latency", "--skip-preflight", "--json", env=env)
    assert "Traceback" not in done.stderr
    # Refused before a run starts (the engine's exit 3), or a run that is an infrastructure error (14):
    # never a pass with `"results": []`.
    assert done.returncode in (3, 14), done.stdout + done.stderr
    if done.returncode == 3:
        assert done.stderr.startswith(f"rocmci: docker client '{client}' cannot be run")
    else:
        assert [r["outcome"] for r in json.loads(done.stdout)["results"]] == ["infrastructure error"]


def test_a_client_that_fails_inside_a_run_gives_an_infrastructure_result(tmp_path):
    """The container starter itself: an OSError from the client is this run's result, not a lost thread."""
    from rocmci.engine import Engine
    from rocmci.runs import container as ctr

    client = tmp_path / "docker"
    client.write_text("#!/bin/sh\nexit 0\n")
    client.chmod(stat.S_IRUSR | stat.S_IWUSR)
    engine = Engine(str(client))
    engine.__dict__["client"] = str(client)  # as pick_client would have chosen it
    spec = ctr.ContainerSpec(image="img", argv=("true",), workdir="/", name=ctr.container_name("t"))
    run = ctr.run_container(spec, engine, timeout=10, on_line=lambda _: None)
    kind, detail = res.classify(run.exit_code, None, infra_error=run.infra_error, junit_expected=True)
    assert kind is res.Outcome.INFRA and "could not be started" in detail


def test_run_outcome_judges_failed_cases_over_exit_zero(tmp_path):
    junit = tmp_path / "r.xml"
    junit.write_text('<testsuite><testcase classname="t" name="a"><failure/></testcase></testsuite>')
    done = run_invoke("run.outcome", "--junit", str(junit), "--exit-code", "0", "--json")
    (result,) = json.loads(done.stdout)["results"]
    assert (result["outcome"], done.returncode) == ("failed", 1)


def test_run_outcome_exit_5_passes_unless_strict(tmp_path):
    junit = tmp_path / "r.xml"
    junit.write_text("<testsuite/>")
    plain = run_invoke("run.outcome", "--junit", str(junit), "--exit-code", "5")
    strict = run_invoke("run.outcome", "--junit", str(junit), "--exit-code", "5", "--strict")
    assert (plain.returncode, strict.returncode) == (0, 10), plain.stderr + strict.stderr


def test_no_results_at_all_is_never_a_pass():
    assert res.exit_code([]) == res.EXIT_CODES[res.Outcome.INFRA]


def test_an_empty_results_dir_setting_is_refused(tree):
    done = run_invoke(*host_moe(tree, "--dry-run"), env={**tree["env"], "ROCMCI_RESULTS_DIR": ""})
    assert done.returncode == 2
    assert done.stderr.startswith("rocmci: setting 'results_dir' is empty")


# --- one redactor for every output ----------------------------------------------------------------------


def _fake_agent(folder: Path) -> Path:
    agent = folder / "buildkite-agent"
    agent.write_text(f'#!/bin/sh\nif [ "$1" = annotate ]; then cat > "{folder}/annotation"; fi\n')
    agent.chmod(0o755)
    return agent


def test_a_secret_in_a_failing_test_id_reaches_no_output(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_agent(bin_dir)
    monkeypatch.setenv("BUILDKITE", "true")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    opts = RunOptions(image="i", results_dir=results_dir, timeout=1, network=None, shm_size="1g", memory=None,
                      hf_cache=str(tmp_path), workdir="/w", env={"MY_VALUE": SECRET})  # fmt: skip
    junit = res.JUnitSummary(tests=1, failures=1, failed_cases=[f"t::test_login[{SECRET}]"])
    kind, detail = res.classify(1, junit)
    result = res.Result("moe-tests low-latency", kind, 1, 1.0, detail, junit, [], f"log-{SECRET}")
    redact = Redactor(os.environ, given=opts.env)
    for as_json in (False, True):
        assert report([result], opts, as_json, [f"note {SECRET}"], [], redact) == 1
        printed = capsys.readouterr()
        assert SECRET not in printed.out + printed.err
    for name in ("results.json", "annotation.md"):
        assert SECRET not in (results_dir / name).read_text()
    assert "test_login\\[\\*\\*\\*\\]" in (bin_dir / "annotation").read_text()  # as Markdown text (rocmci.markup)


def test_dry_run_redacts_values_not_words(tree):
    env = [
        "--env", "MYX=host", "--env", f"QUOTED=it's {SECRET}", "--env", "ACCENT=café-sécret-valeur",
    ]  # fmt: skip
    done = run_invoke(
        "run.moe-tests", "--dry-run", "--mode", "low-latency", "--host-root", str(tree["root"]), *env,
        env={**tree["env"], "ROCMCI_RUN_NETWORK": "host"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "--network host" in out  # an --env value never changes another word of the command
    for name in ("MYX", "QUOTED", "ACCENT"):  # in a container, a given value is passed by name from the client's env
        assert f"--env {name} " in out or f"--env {name}\n" in out, out
    for leaked in (SECRET, "sécret", "s\\xe9cret", "it's"):
        assert leaked not in out


def test_a_non_ascii_value_is_masked_in_pytests_escaped_form():
    redact = Redactor(given={"ACCENT": "café-sécret-valeur"})
    assert redact("FAILED t.py::test[caf\\xe9-s\\xe9cret-valeur]") == "FAILED t.py::test[***]"
    assert redact("4 passed") == "4 passed" and Redactor(given={"M": "pass"})("4 passed [pass]") == "4 passed [***]"


def test_packaged_registry_is_found_from_any_folder(tmp_path):
    done = run_invoke("workarounds", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [w["id"] for w in json.loads(done.stdout)] == ["rocprofiler-register-teardown"]
    assert not (REPO / "workarounds.yaml").exists()
