"""The output gate (issue 32, class 1): one secret and terminal escapes put through every exit of a run.

A real `rocmci run.moe-tests` runs against a recording docker client (`ROCMCI_DOCKER`) and a recording
`buildkite-agent`, no engine needed: the "container" prints the secrets and escapes, and writes a JUnit file
whose test ids and failure message hold them. The exits, each checked:

- print: rocmci's stdout and stderr;
- log and file: every file in the results folder (run logs, results.json, annotation.md, and the JUnit file,
  which rocmci keeps only as its redacted copy);
- annotation and upload: what the Buildkite agent was handed (stdin, uploaded bytes);
- argv: every argument of every docker call (`ps` shows them to every user of the host);
- env: the docker client's environment holds each --env value under its own name only.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from tests.functional.checkouts import ROCMCI  # the console script of the interpreter running the tests
from tests.functional.test_host_runs import _agent

SECRET = "pw-canary-7f3a9c2e"  # under a secret name
PLAIN = "plain-canary-51d0"  # under a plain name: may be a secret all the same
TOKEN = "hf_Zq8canaryTokenValue0123456789abcd"  # HF_TOKEN of rocmci's environment
ESCAPES = ("\x1b", "\u202e", "\x07", "\u2028")  # a terminal escape, a bidi override, a bell, a line separator
NOISE = "red\x1b[31m\u202e\x07\u2028end"
XML_NOISE = "red\u202e\u2028end"  # what XML 1.0 can hold of NOISE: ESC and BEL are not XML characters

# The docker client: records each call; `run` plays the container (its output, and a JUnit file with a failure).
DOCKER = f"""#!/usr/bin/env python3
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["DOCKER_RECORD"], "a") as fh:
    fh.write(json.dumps({{"argv": argv, "env": dict(os.environ)}}) + "\\n")
if argv[:1] == ["run"]:
    results = next(v.split(":")[0] for v in argv if v.endswith(":/rocmci-results"))
    junit = next(a.split("=", 1)[1] for a in argv if a.startswith("--junitxml="))
    path = os.path.join(results, os.path.basename(junit))
    noise, xml_noise = {NOISE!r}, {XML_NOISE!r}
    values = [os.environ.get(n, "") for n in ("DB_PASSWORD", "MY_VALUE", "HF_TOKEN")]
    with open(path, "w") as fh:
        fh.write('<testsuite tests="2" failures="1" errors="0" skipped="0">'
                 f'<testcase classname="t" name="test_a[{{values[0]}}-{{xml_noise}}]">'
                 f'<failure message="boom {{values[1]}} {{values[2]}} {{xml_noise}}">x</failure></testcase>'
                 '<testcase classname="t" name="test_b"/></testsuite>')
    print("seen:", *values, noise, flush=True)
    sys.exit(1)
sys.exit(0)
"""


@pytest.fixture
def gate(tmp_path) -> dict:
    root = tmp_path / "host"
    (root / "dev" / "dri").mkdir(parents=True)
    (root / "dev" / "kfd").write_text("")
    docker = tmp_path / "docker"
    docker.write_text(DOCKER)
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    agent_env, agent_record = _agent(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env |= agent_env | {"ROCMCI_DOCKER": str(docker), "ROCMCI_RESULTS_DIR": str(tmp_path / "results"),
                        "DOCKER_RECORD": str(tmp_path / "docker.jsonl"), "HF_TOKEN": TOKEN}  # fmt: skip
    done = subprocess.run(
        [*ROCMCI, "run.moe-tests", "--host-root", str(root), "--skip-preflight", "--image", "img:1",
         "--mode", "low-latency", "--env", f"DB_PASSWORD={SECRET}", "--env", f"MY_VALUE={PLAIN}"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    calls = [json.loads(line) for line in (tmp_path / "docker.jsonl").read_text().splitlines()]
    posted = [json.loads(line) for line in agent_record.read_text().splitlines()]
    return {"done": done, "calls": calls, "posted": posted, "results": tmp_path / "results"}


def test_the_run_reached_every_exit(gate):
    """Not a vacuous pass: the container ran, failed, and each exit got the failing test's lines."""
    done = gate["done"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert [c["argv"][0] for c in gate["calls"]].count("run") == 1
    assert any(c["argv"][0] == "annotate" for c in gate["posted"])
    written = {p.name: p.read_text() for p in gate["results"].rglob("*") if p.is_file()}
    assert [n for n in written if n.endswith(".log")] and "results.json" in written and "annotation.md" in written
    assert "test_a\\[" in written["annotation.md"]  # the failing test's id, as Markdown text
    assert "seen:" in next(t for n, t in written.items() if n.endswith(".log"))


def rocmci_exits(gate) -> dict[str, str]:
    """What rocmci printed, wrote and posted."""
    done = gate["done"]
    exits = {"stdout": done.stdout, "stderr": done.stderr}
    exits |= {f"file {p.name}": p.read_text(errors="replace") for p in gate["results"].rglob("*") if p.is_file()}
    exits |= {f"posted {' '.join(c['argv'])}": (c.get("stdin") or "") + (c.get("sent") or "") for c in gate["posted"]}
    return exits


@pytest.mark.parametrize("secret", [SECRET, PLAIN, TOKEN], ids=["secret-name", "plain-name", "environment"])
def test_no_secret_reaches_an_exit_raw(gate, secret):
    for name, text in rocmci_exits(gate).items():
        assert secret not in text, f"the secret reached {name}"
    for call in gate["calls"]:
        assert not [a for a in call["argv"] if secret in a], f"the secret is on docker's argv: {call['argv'][:2]}"


def test_no_terminal_escape_reaches_an_exit_raw(gate):
    """The JUnit file is XML, a medium of its own: a test id keeps its characters there (XML escapes its
    markup; test analytics match ids as written), and ESC and BEL cannot be in it at all."""
    exits = {n: t for n, t in rocmci_exits(gate).items() if "junit-" not in n}
    for name, text in exits.items():
        for char in ESCAPES:
            assert char not in text, f"{char!r} reached {name}"
    assert "red\\e[31m\\u202e\\x07\\u2028end" in gate["done"].stdout  # shown as text, not dropped


def test_each_value_reaches_the_container_by_its_own_name_only(gate):
    (run,) = [c for c in gate["calls"] if c["argv"][0] == "run"]
    argv, env = run["argv"], run["env"]
    for name in ("DB_PASSWORD", "MY_VALUE", "HF_TOKEN"):
        assert argv[argv.index(name) - 1] == "--env", name  # by name: docker reads the value from its env
    assert (env["DB_PASSWORD"], env["MY_VALUE"], env["HF_TOKEN"]) == (SECRET, PLAIN, TOKEN)
    for value in (SECRET, PLAIN, TOKEN):
        holders = sorted(k for k, v in env.items() if value in v)
        assert holders == [{SECRET: "DB_PASSWORD", PLAIN: "MY_VALUE", TOKEN: "HF_TOKEN"}[value]], holders


def test_the_kept_junit_file_is_the_workloads_with_its_secrets_masked(gate):
    (junit,) = gate["results"].glob("junit-*.xml")
    text = junit.read_text()
    assert 'name="test_a[***-' in text and 'failures="1"' in text  # the evidence stays, the values go
