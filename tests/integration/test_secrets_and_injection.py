"""Secrets never leave the environment they came from; user strings never reach a shell of ours.

Canary values are planted in secret-looking variables, then every output of every task is searched
for them. Canary files would be created by any shell that evaluated the strings we feed in.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.conftest import REPO, run_invoke
from tests.integration.helpers import moe, run_env

CANARIES = {
    "HF_TOKEN": "hf_canary_" + uuid.uuid4().hex,
    "GITHUB_TOKEN": "gh_canary_" + uuid.uuid4().hex,
    "MY_SECRET": "secret_canary_" + uuid.uuid4().hex,
    "DB_PASSWORD": "password_canary_" + uuid.uuid4().hex,
    "UPLOAD_API_KEY": "key_canary_" + uuid.uuid4().hex,
}


def no_canary(*texts: str) -> None:
    for text in texts:
        for name, value in CANARIES.items():
            assert value not in text, f"the value of {name} leaked"


def test_secrets_stay_out_of_every_output(engine, standin_image, fake_host, tmp_path):
    env = {**run_env(standin_image, tmp_path), **CANARIES}
    outputs = []
    for args in (
        ("settings",),
        ("settings", "--json"),
        ("doctor", "--json"),
        ("image.build", "--dry-run"),
        ("run.dp-example", "--dry-run", "--env", f"UPLOAD_API_KEY={CANARIES['UPLOAD_API_KEY']}"),
        ("run.moe-tests", "--dry-run", "--host-root", str(fake_host)),
        ("pipeline.generate",),
        ("pipeline.validate", "--json"),
        ("workarounds", "--json"),
    ):
        done = run_invoke(*args, env=env)
        outputs += [done.stdout, done.stderr]
    dry = outputs[8]
    assert "--env HF_TOKEN \\" in dry and "--env UPLOAD_API_KEY \\" in dry  # passed by name only

    done = run_invoke(
        *moe(fake_host, "--mode", "low-latency"), "--env", f"GITHUB_TOKEN={CANARIES['GITHUB_TOKEN']}", env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outputs += [done.stdout, done.stderr]
    for path in (tmp_path / "results").rglob("*"):
        if path.is_file():
            outputs.append(path.read_text(errors="replace"))
    no_canary(*outputs)


def test_a_secret_in_the_step_file_blocks_generation_without_echoing_it(tmp_path):
    steps = tmp_path / "steps.yaml"
    steps.write_text(
        "steps:\n- label: leaky\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n"
        f"  env:\n    HF_TOKEN: {CANARIES['HF_TOKEN']}\n  commands: [pytest]\n"
    )
    out = tmp_path / "pipeline.yaml"
    done = run_invoke("pipeline.generate", "--source", str(steps), "--out", str(out))
    assert done.returncode == 1 and not out.exists()
    assert "steps.yaml:6:5: error [secret-in-pipeline] HF_TOKEN is written into the pipeline" in done.stderr
    no_canary(done.stdout, done.stderr)


def test_shell_metacharacters_never_reach_a_shell(engine, standin_image, fake_host, tmp_path):
    canary = tmp_path / "canary"
    payloads = [f"$(touch {canary})", f"`touch {canary}`", f"x; touch {canary}", f"x && touch {canary}"]

    for payload in payloads:
        for args in (
            ("image.build", "--dry-run", "--arch", payload),
            ("image.build", "--dry-run", "--deepep-ref", payload),
            ("image.build", "--dry-run", "--tag", payload),
            ("run.dp-example", "--dry-run", "--model", payload, "--extra", payload, "--env", f"X={payload}"),
        ):
            done = run_invoke(*args)
            assert "Traceback" not in done.stderr

    steps = tmp_path / "steps.yaml"
    steps.write_text(
        "steps:\n"
        + "".join(
            f"- label: {json.dumps('step ' + str(i) + ' ' + p)}\n  mirror_hardwares: [amdproduction]\n"
            f"  agent_pool: mi300_1\n  working_dir: {json.dumps('/tmp; ' + p)}\n  commands: [{json.dumps(p)}]\n"
            for i, p in enumerate(payloads)
        )
    )
    for args in (("pipeline.validate", "--source", str(steps)), ("pipeline.plan", "--source", str(steps)),
                 ("pipeline.generate", "--source", str(steps), "--out", str(tmp_path / "p.yaml"))):  # fmt: skip
        assert run_invoke(*args).returncode in (0, 1)

    payload = payloads[0]
    env = run_env(standin_image, tmp_path)
    done = run_invoke(
        "run.dp-example", "--host-root", str(fake_host), "--model", payload, "--extra", f"'--note={payload}'",
        "--env", f"X={payload}", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    argv = json.loads(done.stdout.split("standin argv: ")[1].splitlines()[0])
    assert f"--model={payload}" in argv and f"--note={payload}" in argv  # arrived as literal text
    assert not canary.exists(), "a shell evaluated user input"
    assert not Path(REPO / "canary").exists()
