"""Secrets by name and by value: the pipeline rule and the redactor."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmci import secrets, yamldoc
from rocmci.pipeline import rules, validate
from rocmci.pipeline.inventory import Inventory, Pool
from rocmci.secrets import Redactor, is_secret, secret_kind

HF = "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
RANDOM = "Zq8v3Lx0Tn5Rk2Wm9Yb4Hc7Pd1Jf6GsX"  # 32 characters, mixed classes


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "GH_PAT",
        "NPM_AUTH",
        "PRIVATE_KEY_PEM",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "DB_PASS",
        "API_KEY",
        "APIKEY",
        "SSH_PASSPHRASE",
        "SESSION_COOKIE",
        "PAT",
        "KEY",
        "AUTH_HEADER",
        "DOCKER_PASSWORD",
    ],
)
def test_secret_names(name):
    assert is_secret(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "PWD",
        "GIT_AUTHOR_NAME",
        "HIP_VISIBLE_DEVICES",
        "KEYBOARD",
        "MONKEY",
        "VLLM_TEST_COMMANDS",
        "PYTORCH_ROCM_ARCH",
        "BYPASS",
        "ROCPROFILER_REGISTER_ENABLED",
        "HF_HOME",
    ],
)
def test_ordinary_names(name):
    assert not is_secret(name)


CREDENTIALS = [
    ("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc", "a bearer token"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZDEyMw=='", "a bearer token"),
    (HF, "a Hugging Face token"),
    (f"HF_TOKEN={HF} pytest -v", "a Hugging Face token"),
    (GHP, "a GitHub token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "a GitHub token"),
    (AWS, "an AWS access key id"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----", "a private key"),
    ("-----BEGIN RSA PRIVATE KEY-----", "a private key"),
    ("https://user:hunter22@example.com/repo.git", "a password in a URL"),
    ("git clone https://x0tokenvalue@example.com/repo.git", "a token in a URL"),
    ("xoxb-" + "1234567890-abcdefghij", "a Slack token"),
    ("npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "an npm token"),
    ("git clone https://oauth2:glpat-" + "aB3dE5fG7hJ9kL1mN3pQ@example", "a GitLab token"),
    ("OPENAI_API_KEY=sk-" + "proj-aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY", "an API key"),
    (RANDOM, "a long random-looking string"),
]


@pytest.mark.parametrize(("value", "kind"), CREDENTIALS)
def test_credential_shaped_values(value, kind):
    assert secret_kind(value) == kind
    assert value not in Redactor({})(f"log: {value} end")  # the redactor masks every shape too


def test_every_credential_shape_has_an_example():
    """The prefilter skips a shape whose anchor misses its matches: every shape is tried above."""
    assert {kind for kind, _, _ in secrets._SHAPES} <= {kind for _, kind in CREDENTIALS}


@pytest.mark.parametrize(("kind", "shape"), [(kind, shape) for kind, _, shape in secrets._SHAPES])
def test_every_match_of_a_shape_holds_an_anchor(kind, shape):
    """Text around a match of any shape (generated from the shape itself) always holds that shape's anchor;
    else a credential of that shape would never be looked for."""

    @settings(max_examples=150, derandomize=True, database=None, deadline=None)
    @given(st.from_regex(re.compile(shape), fullmatch=False))
    def check(text):
        assert re.search(shape, text)
        assert kind in [k for k, _ in secrets._shapes_in(text)], f"{kind}: {text!r} matches the shape, not its anchor"

    check()


@pytest.mark.parametrize(
    "value",
    [
        "spawn",
        "",
        "Bearer $HF_TOKEN",
        "https://user:$PASSWORD@example.com",
        "e84464ec5d90af8ba9ea97740f63d3e9f0acb0c6",  # a commit: hex, no upper case
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        "Qwen/Qwen1.5-MoE-A2.7B",
        "tests/kernels/moe/test_deepep_moe.py::test_low_latency_deep_ep_moe",
        "hf_transfer",
        "basic tests/basic_correctness/test_basic_correctness.py",
        "/root/.cache/huggingface",
    ],
)
def test_ordinary_values(value):
    assert secret_kind(value) is None


def test_a_random_token_inside_a_command_is_not_flagged_but_a_credential_shape_is():
    assert secret_kind(f"echo {RANDOM}", whole=False) is None
    assert secret_kind(f"echo {GHP}", whole=False) == "a GitHub token"


def test_redactor_masks_given_values_known_secrets_and_shapes():
    redact = Redactor(
        {"HF_TOKEN": "hf-secret-value", "HOME": "/root", "INNOCENT": GHP, "GH_PAT": "abc"},
        given={"NPM_AUTH": "npm-auth-value", "NCCL_DEBUG": "INFO", "SHORT": "1"},
        public={"NCCL_DEBUG"},
    )
    line = (
        "docker run -e HF_TOKEN -e NPM_AUTH=npm-auth-value -e NCCL_DEBUG=INFO -e SHORT=1 -v /root:/root "
        f"img pytest --extra {HF} {GHP} Bearer abcdefghijklmnopqrstuvwxyz hf-secret-value"
    )
    out = redact(line)
    for secret in ("npm-auth-value", HF, GHP, "abcdefghijklmnopqrstuvwxyz", "hf-secret-value"):
        assert secret not in out
    assert "NCCL_DEBUG=INFO" in out and "SHORT=1" in out and "/root:/root" in out
    assert "GH_PAT" not in out and out.count("***") == 5


def test_redactor_masks_every_line_of_a_multi_line_secret():
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    redact = Redactor({"PRIVATE_KEY_PEM": pem})
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" not in redact("line 2: MIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    assert redact("no secrets here: INFO spawn") == "no secrets here: INFO spawn"


def test_redactor_keeps_the_old_positional_form():
    assert Redactor({"HF_TOKEN": "hf-secret-value"})("x hf-secret-value y") == "x *** y"


CTX = rules.Context(
    inventory=Inventory("agents.yaml", {"mi325_1": Pool("mi325_1", "amd_mi325_1", "gfx942", 1, True)}),
    archs=("gfx942",),
)


def _findings(env_yaml: str) -> list[str]:
    text = (
        "steps:\n- label: t\n  key: t\n  agents: {queue: amd_mi325_1}\n  timeout_in_minutes: 10\n"
        f"  command: run\n  env:\n{env_yaml}"
    )
    report = validate.validate_pipeline_document(yamldoc.parse(text, "p.yaml"), CTX)
    return [f.text() for f in report.findings if f.rule == "secret-in-pipeline"]


def test_the_rule_finds_secrets_by_value_with_a_position_and_never_prints_them():
    found = _findings(
        f"    AUTH_HEADER_VALUE: 'Bearer abcdefghijklmnopqrstuvwxyz'\n    NOTE: {HF}\n"
        f"    VLLM_TEST_COMMANDS: 'git clone https://x:{GHP}@github.com/a/b && pytest'\n"
        f"    CACHE_ID: {RANDOM}\n    HF_TOKEN: $HF_TOKEN\n    MODEL: deepseek-ai/DeepSeek-V2-Lite-Chat\n"
    )
    assert len(found) == 4, found
    assert any("p.yaml:9:5" in f and "NOTE looks like a Hugging Face token" in f for f in found), found
    assert any("VLLM_TEST_COMMANDS looks like" in f for f in found), found
    assert any("CACHE_ID looks like a long random-looking string" in f for f in found), found
    for f in found:
        assert HF not in f and GHP not in f and RANDOM not in f and "abcdefghijklmnop" not in f


def test_the_rule_still_finds_secrets_by_name():
    found = _findings("    GH_PAT: plain\n    NPM_AUTH: x\n    HF_TOKEN: $HF_TOKEN\n")
    assert [f.split(" error ")[0] for f in found] == ["p.yaml:8:5:", "p.yaml:9:5:"], found
    assert "GH_PAT is written into the pipeline in plain text" in found[0]


def test_a_variable_name_glued_to_a_commit_hash_is_not_masked_but_a_token_is():
    from rocmci.secrets import Redactor

    commit = "BUILDKITE_COMMIT=13726c80fe5758443b4e1508611ccf504a06085c"
    assert Redactor({})(commit) == commit
    assert Redactor({})("TOKEN=aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7d") == "TOKEN=***"


# --- issue 22: time-linear shapes. Inputs of 10^6 characters built to make a backtracking pattern restart at every
# position; each test asserts the answer and runs under a generous hang guard (no timing threshold: speed is the
# benchmarks' business). `\b[a-z][a-z0-9+.-]*://` took hours on the first of these.

MILLION = 10**6


@pytest.fixture
def hang_guard():
    import signal

    def hung(signum, frame):
        raise AssertionError("no answer within 20 s: a pattern backtracks on a 10^6-character input")

    old = signal.signal(signal.SIGALRM, hung)  # the regex engine checks for signals, so the alarm interrupts it
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


HOSTILE_TEXTS = {  # name: (text, what secret_kind says of it as part of a command)
    "dotted scheme": ("a." * (MILLION // 2) + " ://", None),
    "url user run": ("x://" + "a:" * (MILLION // 2), None),
    "hf prefixes": (" hf_" * (MILLION // 4), None),
    "basic run": ("Basic " + "A" * MILLION + ".", None),  # a token must not end glued to '.'
    "key header": ("-----BEGIN " + "A " * (MILLION // 2), None),
    "token run": ("aB3" * (MILLION // 3), None),  # long, but repetitive: not random-looking
    "github runs": (" github_pat_" + "_" * MILLION, "a GitHub token"),
    "bearer words": ("Bearer " * (MILLION // 7), None),
    "name parts": ("A_" * (MILLION // 2), None),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXTS))
def test_shapes_answer_on_a_million_characters(name, hang_guard):
    text, kind = HOSTILE_TEXTS[name]
    assert secret_kind(text, whole=False) == kind
    masked = Redactor({})(text)
    assert masked == text if kind is None else "***" in masked and len(masked) < len(text)
    assert not is_secret(text)


def test_a_url_password_after_a_million_characters_is_found_and_masked(hang_guard):
    text = "a." * (MILLION // 2) + " https://oauth2:s3cr3t-value@github.com/ROCm/DeepEP.git"
    assert secret_kind(text, whole=False) == "a password in a URL"
    masked = Redactor({})(text)
    assert masked.endswith(" https://***@github.com/ROCm/DeepEP.git") and "s3cr3t" not in masked


# --- a short --env value under a plain name masks only itself, never part of another word ----------------


def test_a_short_plain_env_value_is_masked_only_as_a_whole_word():
    redact = Redactor({}, given={"STANDIN_MODE": "pass", "TARGET": "host"})
    assert redact("4 passed, 0 skipped in 3.1s") == "4 passed, 0 skipped in 3.1s"  # was "4 ***ed"
    assert redact("--network host on localhost") == "--network *** on localhost"
    assert redact("STANDIN_MODE=pass") == "STANDIN_MODE=***"
    assert redact("test_moe[pass]") == "test_moe[***]"


def test_a_long_plain_env_value_is_masked_even_inside_another_word():
    # Eight characters and more: a match inside a word is far likelier the value itself than chance.
    assert Redactor({}, given={"MODE": "abort-once"})("xabort-oncey") == "x***y"


def test_a_secret_env_value_never_shows_however_short_or_glued():
    redact = Redactor({"GH_PAT": "s3cr"}, given={"HF_TOKEN": "hunt", "PLAIN": GHP})
    assert redact("ahuntb x-s3cr-y") == "a***b x-***-y"  # secret names: masked inside words too
    assert GHP not in redact(f"id{GHP}x")  # a credential shape under a plain name: the same


def test_a_value_both_given_plainly_and_known_secret_is_masked_everywhere():
    redact = Redactor({"NPM_AUTH": "pass"}, given={"STANDIN_MODE": "pass"})
    assert redact("4 passed") == "4 ***ed"  # the environment says it is a secret: that wins
