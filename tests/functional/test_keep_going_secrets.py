"""`pipeline.generate --keep-going` holds a step that publishes a secret, and writes no secret either.

Holding keeps a step from running, not from being uploaded: the token in a label, a command or an
agent tag, and a credential-named env literal, must be gone from what is written, and what is written
must still be a pipeline Buildkite accepts (keys without '*')."""

from __future__ import annotations

import yaml

from tests.conftest import run_invoke

TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
LITERAL = "plain-text-credential-4711"
STEP_FILE = f"""\
steps:
- label: "Leaky {TOKEN}"
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  commands:
  - curl -H 'Authorization: token {TOKEN}' https://example.invalid
- label: Named
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  no_plugin: true
  agent_tags:
    token: {TOKEN}
  env:
    HF_TOKEN: {LITERAL}
    KEPT: visible-value
  commands:
  - echo hi
- label: Clean
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  commands:
  - echo clean
"""


def test_held_steps_publish_no_secret_and_the_pipeline_still_validates(tmp_path):
    source = tmp_path / "test-amd.yaml"
    source.write_text(STEP_FILE)
    out = tmp_path / "pipeline.yaml"
    done = run_invoke("pipeline.generate", "--source", str(source), "--keep-going", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert TOKEN not in text and LITERAL not in text
    assert TOKEN not in done.stdout + done.stderr and LITERAL not in done.stdout + done.stderr
    members = yaml.safe_load(text)["steps"][0]["steps"]
    labels = [s.get("label") for s in members if "label" in s]
    assert {"mi300_1: Leaky ***", "mi300_1: Named", "mi300_1: Clean"} <= set(labels)  # held, not dropped
    named = next(s for s in members if s.get("label") == "mi300_1: Named")
    assert named["env"]["KEPT"] == "visible-value" and "HF_TOKEN" not in named["env"]  # only what the rule flags
    check = run_invoke("pipeline.validate", "--pipeline", str(out), cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
