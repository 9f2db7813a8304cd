"""Secrets never leave the environment they came from; user strings never reach a shell.

The workloads run for real, in a stand-in image of this test's own (tests/data/injection/) that prints
everything it was given: its argv, every environment variable (raw, as a workload's own logging would) and a
SHA-256 of each value. So a test can check that

- a shell payload in every field that reaches the workload arrives there as the same literal text, and
  nothing ran it: each payload would create canary files, on the host and in the results folder the
  container writes to, and neither may exist afterwards;
- a secret arrives intact (its digest matches) and yet its value appears nowhere in what rocmci prints or
  writes: the lines where the workload printed it show `***`.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, run_invoke
from tests.integration.helpers import run_env

INJECTION = REPO / "tests" / "data" / "injection"
VLLM_STANDIN = REPO / "tests" / "data" / "vllm-standin"  # a small vLLM checkout, for image.build --dry-run
CANARIES = {
    "HF_TOKEN": "hf_canary_" + uuid.uuid4().hex,
    "GITHUB_TOKEN": "gh_canary_" + uuid.uuid4().hex,
    "MY_SECRET": "secret_canary_" + uuid.uuid4().hex,
    "DB_PASSWORD": "password_canary_" + uuid.uuid4().hex,
    "UPLOAD_API_KEY": "key_canary_" + uuid.uuid4().hex,
}
MARK = uuid.uuid4().hex[:12]
HOST_CANARY = Path(f"/tmp/pwned-{MARK}")
# The results folder is mounted into the container: a shell there would leave its canary on the host too.
CONTAINER_CANARY = f"/rocmci-results/pwned-{MARK}"
TOUCH = f"touch {HOST_CANARY} {CONTAINER_CANARY}"
PAYLOADS = [
    f"$({TOUCH})",
    f"`{TOUCH}`",
    f"x; {TOUCH}",
    f"x && {TOUCH}",
    f"x | {TOUCH}",
    f"x\n{TOUCH}",
    f"'; {TOUCH}; '",
    f'"; {TOUCH}; "',
]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def no_canary_value(*texts: str) -> None:
    for text in texts:
        for name, value in CANARIES.items():
            assert value not in text, f"the value of {name} leaked"


def nothing_ran(results: Path) -> None:
    assert not HOST_CANARY.exists(), "a shell on the host evaluated user input"
    assert not (results / f"pwned-{MARK}").exists(), "a shell in the container evaluated user input"


def report_of(done) -> dict:
    """The stand-in's JSON line (workload output goes to stderr with --json)."""
    line = next(x for x in (done.stdout + done.stderr).splitlines() if x.startswith("injection report: "))
    return json.loads(line.removeprefix("injection report: "))


def files_text(folder: Path) -> list[str]:
    return [p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()]


@pytest.fixture(scope="module")
def injection_image(engine, python_image):
    tag = f"rocmci-test/injection:{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [engine.client, "build", "--network", "none", "-q", "--build-arg", f"BASE_IMAGE={python_image}",
         "-t", tag, str(INJECTION)],
        env=engine.build_env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    yield tag
    engine.cli("rmi", "-f", tag, check=False)


@pytest.fixture(autouse=True)
def _no_stale_canary():
    HOST_CANARY.unlink(missing_ok=True)
    yield
    HOST_CANARY.unlink(missing_ok=True)


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_payloads_reach_the_dp_example_literally(engine, injection_image, fake_host, tmp_path, payload):
    env = {**run_env(injection_image, tmp_path), "HF_TOKEN": CANARIES["HF_TOKEN"]}
    done = run_invoke(
        "run.dp-example", "--host-root", str(fake_host), "--json", "--model", payload,
        "--extra", shlex.join([payload, f"--note={payload}"]), "--env", f"X={payload}", "--public", "X", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen = report_of(done)
    assert f"--model={payload}" in seen["argv"]
    assert seen["argv"][-2:] == [payload, f"--note={payload}"]  # --extra split as documented, not evaluated
    assert seen["env"]["X"] == payload
    nothing_ran(tmp_path / "results")


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_payloads_reach_the_moe_tests_literally(engine, injection_image, fake_host, tmp_path, payload):
    env = run_env(injection_image, tmp_path)
    done = run_invoke(
        "run.moe-tests", "--host-root", str(fake_host), "--json", "--mode", "high-throughput", "-k", payload,
        "--extra", shlex.join([f"--injection-note={payload}"]), "--env", f"X={payload}", "--public", "X", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen = report_of(done)
    assert payload in seen["keyword"]  # and-ed with the mode's expression, as one -k argument
    assert seen["argv"][seen["argv"].index("-k") + 1] == seen["keyword"]
    assert seen["note"] == payload
    assert seen["env"]["X"] == payload
    nothing_ran(tmp_path / "results")


def test_extra_is_split_like_a_posix_shell_word_list_and_nothing_more(engine, injection_image, fake_host, tmp_path):
    for payload in PAYLOADS:
        try:
            words = shlex.split(payload)
        except ValueError:
            words = None  # unbalanced quotes: a usage error, not a guess
        done = run_invoke(
            "run.dp-example", "--host-root", str(fake_host), "--json", "--extra", payload,
            env=run_env(injection_image, tmp_path),
        )  # fmt: skip
        if words is None:
            assert done.returncode == 2, done.stderr
            assert done.stderr.strip().splitlines()[-1].startswith("rocmci: --extra")
            continue
        assert done.returncode == 0, done.stdout + done.stderr
        assert report_of(done)["argv"][-len(words) :] == words
        nothing_ran(tmp_path / "results")


def test_dry_run_lines_are_safe_to_paste_into_a_shell(engine, injection_image, fake_host, tmp_path):
    """What --dry-run prints is given to bash with the docker client swapped for printf: the words must come
    back exactly, and no payload may run."""
    for payload in PAYLOADS:
        done = run_invoke(
            "run.dp-example", "--host-root", str(fake_host), "--dry-run", "--model", payload, "--env", f"X={payload}",
            "--public", "X", env=run_env(injection_image, tmp_path),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        command = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("#"))
        client = command.split()[0]
        assert client.endswith("docker"), command
        words = subprocess.run(
            ["bash", "-c", "printf '%s\\0' " + command[len(client) :]], capture_output=True, check=True, cwd=tmp_path
        ).stdout.split(b"\0")[:-1]
        assert f"--model={payload}".encode() in words and f"X={payload}".encode() in words
        nothing_ran(tmp_path / "results")


def test_secrets_printed_by_the_workload_are_hidden_everywhere(engine, injection_image, fake_host, tmp_path):
    env = {**run_env(injection_image, tmp_path), "HF_TOKEN": CANARIES["HF_TOKEN"]}
    secret_flags = ("--env", f"MY_SECRET={CANARIES['MY_SECRET']}", "--env", f"DB_PASSWORD={CANARIES['DB_PASSWORD']}")
    outputs = []
    for args in (
        ("run.dp-example", "--extra", f"--token-note={CANARIES['MY_SECRET']}"),
        ("run.moe-tests", "--mode", "high-throughput"),
    ):
        for as_json in ((), ("--json",)):
            done = run_invoke(*args, "--host-root", str(fake_host), *secret_flags, *as_json, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            shown = done.stdout + done.stderr
            for name in ("HF_TOKEN", "MY_SECRET", "DB_PASSWORD"):
                assert f"injection env {name}=***" in shown  # the workload printed it; rocmci hid it
                assert f"injection sha256 {name} {sha(CANARIES[name])}" in shown  # and it arrived intact
            if args[0] == "run.dp-example":
                assert "=--token-note=***" in shown  # a secret in the workload's argv
            outputs += [done.stdout, done.stderr]
    logs = list((tmp_path / "results").glob("*.log"))
    assert logs and all("injection env MY_SECRET=***" in p.read_text() for p in logs)
    no_canary_value(*outputs, *files_text(tmp_path / "results"))


def test_secrets_stay_out_of_every_task_output(engine, injection_image, fake_host, tmp_path):
    env = {**run_env(injection_image, tmp_path), **CANARIES, "ROCMCI_VLLM_SRC": str(VLLM_STANDIN)}
    outputs = []
    for args in (
        ("settings",),
        ("settings", "--json"),
        ("doctor", "--json"),
        ("image.build", "--dry-run"),
        ("run.dp-example", "--dry-run", "--host-root", str(fake_host), "--env",
         f"UPLOAD_API_KEY={CANARIES['UPLOAD_API_KEY']}"),
        ("run.moe-tests", "--dry-run", "--host-root", str(fake_host)),
        # the stand-in checkout has no step file: this repository's own, named (ROCMCI_VLLM_SRC would locate it)
        ("pipeline.generate", "--source", str(REPO / ".buildkite" / "test-amd.yaml")),
        ("pipeline.validate", "--json", "--source", str(REPO / ".buildkite" / "test-amd.yaml")),
        ("workarounds", "--json"),
    ):  # fmt: skip
        done = run_invoke(*args, env=env)
        assert done.returncode == 0, f"{args}: {done.stderr}"
        outputs += [done.stdout, done.stderr]
    dry = outputs[8]
    assert "--env HF_TOKEN \\" in dry and "--env UPLOAD_API_KEY \\" in dry  # passed by name only
    # ... and never by value: redaction would hide a value given as NAME=..., so the form itself is checked.
    assert "HF_TOKEN=" not in dry and "UPLOAD_API_KEY=" not in dry, dry
    no_canary_value(*outputs)


def test_a_secret_in_the_step_file_blocks_generation_without_echoing_it(tmp_path):
    steps = tmp_path / "steps.yaml"
    steps.write_text(
        "steps:\n- label: leaky\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n  no_plugin: true\n"
        f"  env:\n    HF_TOKEN: {CANARIES['HF_TOKEN']}\n  commands: [pytest]\n"
    )
    out = tmp_path / "pipeline.yaml"
    done = run_invoke("pipeline.generate", "--source", str(steps), "--out", str(out))
    assert done.returncode == 1 and not out.exists()
    assert "steps.yaml:7:5: error [secret-in-pipeline] HF_TOKEN is written into the pipeline" in done.stderr
    no_canary_value(done.stdout, done.stderr)


def test_payloads_in_step_files_stay_text_in_the_generated_pipeline(tmp_path):
    """Step commands are shell by design (Buildkite runs them); labels must stay text. A double quote would break
    the YAML ci-infra's template writes (it does not escape it), so that label is an error at its line."""
    import yaml

    def step_file(payloads) -> Path:
        steps = tmp_path / "steps.yaml"
        steps.write_text(
            "steps:\n"
            + "".join(
                f"- label: {json.dumps('step ' + str(i) + ' ' + p)}\n  mirror_hardwares: [amdproduction]\n"
                f"  agent_pool: mi300_1\n  commands: [pytest -v]\n"
                for i, p in enumerate(payloads)
            )
        )
        return steps

    out = tmp_path / "p.yaml"
    fine = [p for p in PAYLOADS if '"' not in p]
    done = run_invoke("pipeline.generate", "--source", str(step_file(fine)), "--out", str(out))
    assert done.returncode == 0, done.stderr
    labels = [s.get("label", "") for g in yaml.safe_load(out.read_text())["steps"] for s in g.get("steps", [g])]
    for i, payload in enumerate(fine):
        # The template writes the label into a double-quoted YAML scalar, where a line break folds to a space.
        assert f"mi300_1: step {i} {payload.replace(chr(10), ' ')}" in labels, labels
    quoted = [p for p in PAYLOADS if '"' in p]
    out.unlink()
    done = run_invoke("pipeline.generate", "--source", str(step_file(quoted)), "--out", str(out))
    assert done.returncode == 1 and not out.exists()
    assert "steps.yaml:2:3: error [template-escape] contains a double quote" in done.stderr
    assert not HOST_CANARY.exists()
