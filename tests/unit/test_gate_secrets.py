"""Issue 32, class 1: secrets through doors the redactor did not guard.

Each door gets a canary: a GitHub-token-shaped value (caught by its shape) and a plain value under a
secret-named variable of the environment (caught only through the environment). A door is closed when no
canary reaches stdout or stderr, and what rocmci refuses it refuses in one line of bounded length."""

from __future__ import annotations

import json

import pytest

from rocmci import workaround_registry as wr
from rocmci.cli import flags
from rocmci.errors import InputError, UsageError
from rocmci.settings import resolve
from rocmci.yamldoc import parse
from tests.unit.gate_cli import outside_any_workspace_fixture, rocmci_fixture  # noqa: F401 - fixtures

TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
PLAIN = "unshaped-env-secret-4711"  # only the environment says it is a secret: MY_API_TOKEN holds it
URLS = [
    f"https://oauth2:{PLAIN}@gitlab.example.com/deepep.git",  # user:password
    f"https://{PLAIN}@github.com/deepseek-ai/DeepEP.git",  # a token alone as the userinfo
    f"https://{TOKEN}@github.com/deepseek-ai/DeepEP.git",
]


@pytest.fixture(autouse=True)
def _secret_in_environment(monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", PLAIN)


def _no_canary(*texts: str) -> None:
    for text in texts:
        assert TOKEN not in text and PLAIN not in text, text
        assert TOKEN[:20] not in text and PLAIN[:12] not in text, text  # not a cut piece of one either


@pytest.mark.parametrize("url", URLS)
def test_the_settings_table_and_json_mask_a_url_credential(rocmci, monkeypatch, url):
    monkeypatch.setenv("ROCMCI_DEEPEP_REPO", url)
    for argv in (("settings",), ("settings", "--json")):
        code, out, err = rocmci(*argv)
        assert code == 0, err
        _no_canary(out, err)
        assert "github.com/deepseek-ai/DeepEP.git" in out or "gitlab.example.com/deepep.git" in out


# Every flag whose refusal quotes the refused value, with a value holding both canaries.
BAD_FLAGS = [
    {"env": [f"{TOKEN}"]},  # no '=': the item may be the value itself
    {"env": [f"{PLAIN}"]},
    {"env": [f"{TOKEN}-x={PLAIN}"]},
    {"extra": f"--api-key {TOKEN} '{PLAIN}"},  # unbalanced quote
    {"build_arg": [f"{PLAIN}"]},
    {"build_arg": [f"{TOKEN}!={PLAIN}"]},
    {"image": f"{TOKEN};{PLAIN}"},
    {"image": f"-{PLAIN}"},
    {"tag": f"Registry/{TOKEN}"},
    {"label": [f"{TOKEN}\n{PLAIN}"]},
    {"label": [PLAIN * 10]},
    {"gpus": f"{PLAIN},{TOKEN}"},
    {"diff_base": f"-{TOKEN}{PLAIN}"},
    {"diff_base": f"{PLAIN};x"},
]


@pytest.mark.parametrize("given", BAD_FLAGS, ids=[next(iter(g)) + str(i) for i, g in enumerate(BAD_FLAGS)])
def test_a_refusal_quotes_no_secret_and_stays_short(given):
    with pytest.raises(UsageError) as caught:
        flags.parse(given)
    _no_canary(caught.value.one_line())
    assert len(caught.value.one_line()) < 300


@pytest.mark.parametrize("argv", [
    ("pipeline.plan", "--label", f"{TOKEN}\n"),
    ("pipeline.plan", "--diff-base", f"-{PLAIN}"),
    ("pipeline.generate", "--branch", f"{PLAIN};rm"),
    ("pipeline.generate", "--branch", f"{TOKEN}\x07"),
    ("run.step", "--step", PLAIN, "--image", f"x;{PLAIN}", "-n"),
    ("run.moe-tests", "--gpus", PLAIN, "-n"),
    ("image.build", "--build-arg", f"{TOKEN}", "-n"),
])  # fmt: skip
def test_the_one_line_of_a_refused_command_holds_no_secret(rocmci, argv):
    code, out, err = rocmci(*argv)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("rocmci: "), err
    _no_canary(out, err)


@pytest.mark.parametrize("where", ["env", "pyproject"])
@pytest.mark.parametrize("value", [f"{PLAIN};x", f"{TOKEN}\x1b", "-" + TOKEN + "x" * 100_000])
def test_a_setting_refused_from_env_or_pyproject_holds_no_secret(outside_any_workspace, monkeypatch, where, value):
    if where == "env":
        monkeypatch.setenv("ROCMCI_DEEPEP_REF", value)
    else:
        quoted = json.dumps(value)  # a JSON string is a TOML basic string: \u001b, \"
        (outside_any_workspace / "pyproject.toml").write_text(f"[tool.rocmci]\ndeepep_ref = {quoted}\n")
    with pytest.raises(UsageError) as caught:
        resolve()
    _no_canary(caught.value.one_line())
    assert len(caught.value.one_line()) < 400


@pytest.mark.parametrize("value", [
    f"https://{TOKEN}@github.com/x/y.git", f"https://oauth2:{PLAIN}x@example.com/r.git", TOKEN,
])  # fmt: skip
def test_a_build_arg_with_a_credential_is_refused_without_its_value(value):
    with pytest.raises(UsageError) as caught:
        flags.parse({"build_arg": [f"DEEPEP_REPO={value}"]})
    assert "--build-arg DEEPEP_REPO:" in caught.value.one_line() and "docker history" in caught.value.one_line()
    _no_canary(caught.value.one_line())


def test_a_build_arg_under_a_secret_name_is_refused_and_a_plain_one_kept():
    with pytest.raises(UsageError, match="its name says it holds a secret"):
        flags.parse({"build_arg": ["HF_TOKEN=whatever"]})
    kept = ("DEEPEP_REPO", "https://github.com/deepseek-ai/DeepEP.git")
    assert flags.parse({"build_arg": ["max_jobs=8", "=".join(kept), "GIT_USER=ssh://git@host/r"]}).build_arg == (
        ("max_jobs", "8"),
        kept,
        ("GIT_USER", "ssh://git@host/r"),
    )


REGISTRY = """\
workarounds:
- id: ok
  sets:
    ROCPROFILER_REGISTER_ENABLED: "0"
- id: leaky
  sets:
    A: "1"
    {name}: "{value}"
"""


@pytest.mark.parametrize(("name", "value"), [("HF_TOKEN", "hf-plain-value"), ("EXTRA_HEADER", TOKEN)])
def test_a_workaround_that_sets_a_secret_is_refused_at_its_line(name, value):
    doc = parse(REGISTRY.format(name=name, value=value), "workarounds.yaml")
    with pytest.raises(InputError) as caught:
        wr.from_document(doc)
    line = caught.value.one_line()
    assert line.startswith("workarounds.yaml:8:") and name in line and value not in line
    assert caught.value.exit_code == 2


def test_a_token_in_an_image_label_is_masked_in_tables_and_json():
    """image.inspect prints labels with report.table and report.to_json: both are the gate."""
    from rocmci.report import table, to_json

    labels = {"org.opencontainers.image.source": f"https://{TOKEN}@github.com/x/y", "plain": PLAIN}
    _no_canary(table(("label", "value"), list(labels.items())).replace(PLAIN, ""), to_json(labels).replace(PLAIN, ""))
    assert "https://***@github.com/x/y" in to_json(labels)
