"""Redaction promises of issue 35 that no fast test guarded: URL credentials, secrets inside test ids, and
`--env` values in dry runs (`NAME=***` whatever characters the value holds). docs/guards.md maps each test
here to the mutation it was watched to kill.

Real components throughout: pytest's own escaping of a test id (`_pytest.compat.ascii_escaped`), real JUnit
XML through `runs.results.redact_junit`, and `--dry-run`'s lines from a real `prepare` on a fake KFD host.
"""

from __future__ import annotations

import re
import shlex

import pytest
from _pytest.compat import ascii_escaped
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmci.runs import execute as runs
from rocmci.runs import results as res
from rocmci.secrets import Redactor, secret_kind
from tests.unit.test_runs import host, moe, options  # noqa: F401 - host is a fixture

# --- URL credentials -----------------------------------------------------------------------------------------

SCHEMES = ("https", "http", "git+https", "ssh", "ftp", "s3")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("password", ["abc", "hunter22", "p:a:ss", "%21x%40y"])
def test_a_url_password_is_masked_keeping_the_urls_shape(scheme, password):
    url = f"git clone {scheme}://oauth2:{password}@git.example.com/ROCm/DeepEP.git"
    assert secret_kind(url, whole=False) == "a password in a URL"
    assert Redactor()(url) == f"git clone {scheme}://***@git.example.com/ROCm/DeepEP.git"


_USER = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-~", min_size=1, max_size=12)
_PASSWORD = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-~!%&*()+=,;:", min_size=3,
                    max_size=24)  # fmt: skip


@settings(derandomize=True, max_examples=300, deadline=None)
@given(scheme=st.sampled_from(SCHEMES), user=_USER, password=_PASSWORD)
def test_any_url_password_of_3_characters_or_more_never_shows(scheme, user, password):
    text = f"fetching {scheme}://{user}:{password}@host.example/repo at"
    assert Redactor()(text) == f"fetching {scheme}://***@host.example/repo at"


def test_a_url_without_a_password_is_left_alone():
    for text in ("https://github.com/vllm-project/vllm.git", "ssh://git@github.com/ROCm/DeepEP.git",
                 "https://user:$PASSWORD@example.com/x"):  # fmt: skip
        assert Redactor()(text) == text


# --- secrets inside test ids ---------------------------------------------------------------------------------

NON_ASCII_SECRET = "pässwörd-Ω-7731"


@pytest.mark.parametrize("name", ["HF_TOKEN", "MY_VALUE"])  # a secret name, and a plain one given with --env
def test_a_non_ascii_secret_is_masked_in_the_form_pytest_writes_into_a_test_id(name):
    shown = ascii_escaped(NON_ASCII_SECRET)  # what pytest puts in the id of a test parametrized with it
    assert shown != NON_ASCII_SECRET and "\\xe4" in shown
    redact = Redactor({name: NON_ASCII_SECRET}) if name == "HF_TOKEN" else Redactor(given={name: NON_ASCII_SECRET})
    test_id = f"tests/test_x.py::test_login[{shown}]"
    assert redact(test_id) == "tests/test_x.py::test_login[***]"
    assert redact(f"FAILED {NON_ASCII_SECRET} as typed") == "FAILED *** as typed"


def test_a_secret_in_a_junit_test_id_is_masked_in_every_attribute_and_text():
    shown = ascii_escaped(NON_ASCII_SECRET)
    xml = (
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2" failures="1">'
        f'<testcase classname="tests.test_x" name="test_login[{shown}]"><failure message="bad {shown}">'
        f"assert login('{shown}') == 1 &amp; {NON_ASCII_SECRET}</failure></testcase>"
        '<testcase classname="tests.test_x" name="test_ok[plain]"/></testsuite></testsuites>'
    ).encode()
    clean = res.redact_junit(xml, Redactor(given={"MY_VALUE": NON_ASCII_SECRET})).decode()
    assert NON_ASCII_SECRET not in clean and shown not in clean
    assert 'name="test_login[***]"' in clean and 'message="bad ***"' in clean
    assert "assert login('***') == 1 &amp; ***" in clean and 'name="test_ok[plain]"' in clean


# --- --env values in dry runs --------------------------------------------------------------------------------

HOSTILE = {
    "quote": 'it\'s "quoted"',
    "space": "two words here",
    "dollar": "$HOME and `id` and $(id)",
    "newline": "line one\nline two",
    "backslash": "a\\b\\\\c",
    "equals": "x=y=z",
    "non_ascii": "wörd-Ω",
    "tab": "a\tb",
    "short": "ab",
    "dash": "--network",
}


def _dry_run(root, no_container: bool, env: dict[str, str], network=None) -> str:
    opts = options(root, no_container=no_container, dry_run=True, env=env, network=network)
    text = "\n".join(runs.dry_run_lines(runs.prepare(moe(), opts, None), None, opts, environ={}))
    return re.sub(r"-[0-9a-f]{8,10}\b", "-HEX", text)  # the run's own random container and cache names


@pytest.mark.parametrize("no_container", [False, True], ids=["container", "host"])
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_dry_run_shows_every_env_value_as_name_equals_stars(host, no_container, kind):  # noqa: F811
    value = HOSTILE[kind]
    name = f"MY_{kind.upper()}"
    text = _dry_run(host, no_container, {name: value})
    words = shlex.split(_commands(text))
    assert _given(words, no_container) == [name], text
    assert not [w for w in words if w.startswith(f"{name}=") and w != f"{name}=***"], text
    if len(value) >= 4:
        assert value not in text


@pytest.mark.parametrize("no_container", [False, True], ids=["container", "host"])
def test_a_short_env_value_leaves_the_rest_of_the_command_alone(host, no_container):  # noqa: F811
    """`--env MYX=host` masks MYX's value, not `localhost` or `host` elsewhere (README: Results on the build page)."""
    plain = _dry_run(host, no_container, {}, network="host")
    masked = _dry_run(host, no_container, {"MYX": "host", "MYY": "pytest", "MYZ": "1"}, network="host")
    assert ("--network host" in masked) != no_container and " -m pytest " in masked
    assert "ROCPROFILER_REGISTER_ENABLED=0 " in _commands(masked)  # the workload's own env shows its values
    assert _given(shlex.split(_commands(masked)), no_container) == ["MYX", "MYY", "MYZ"]
    assert _strip_given(masked) == shlex.split(_commands(plain))
    assert [line for line in masked.splitlines() if line.startswith("#")] == [
        line for line in plain.splitlines() if line.startswith("#")
    ]


@settings(derandomize=True, max_examples=60, deadline=None)
@given(value=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20))
def test_any_env_value_is_name_equals_stars_in_a_host_dry_run(tmp_path_factory, value):
    from tests.unit.test_gpus import make_node

    root = tmp_path_factory.mktemp("host")
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    make_node(nodes, 0, 0)
    for i in range(2):
        make_node(nodes, i + 1, 90402, render=128 + i)
    text = _dry_run(root, True, {"MY_VALUE": value})
    words = shlex.split(_commands(text))
    assert "MY_VALUE=***" in words
    assert not [w for w in words if w.startswith("MY_VALUE=") and w != "MY_VALUE=***"]


def _commands(text: str) -> str:
    """The dry run's shell lines (comments dropped), joined for shlex."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#")).replace("\\\n", " ")


def _given(words: list[str], no_container: bool) -> list[str]:
    """The names of the given `--env` values as the command shows them: `NAME=***` on the host, and `--env NAME`
    (the value passed from the docker client's environment, never on its argv) for a container."""
    if no_container:
        return [w.removesuffix("=***") for w in words if w.startswith("MY") and w.endswith("=***")]
    return [b for a, b in zip(words, words[1:], strict=False) if a == "--env" and b.startswith("MY") and "=" not in b]


def _strip_given(text: str) -> list[str]:
    """The command's words without the given assignments (and the `--env` before each, in container mode)."""
    words = shlex.split(_commands(text))
    out: list[str] = []
    for word in words:
        if word.startswith(("MYX", "MYY", "MYZ")) and word[3:4] in ("", "="):
            if out and out[-1] == "--env":
                out.pop()
            continue
        out.append(word)
    return out


# --- the bounds of what is masked (survivors of the secrets mutation run) --------------------------------------

LOWERS, DIGITS = "abcdefghijklmnopqrstuvwxyz", "0123456789"


@pytest.mark.parametrize(
    ("token", "random_looking"),
    [
        ("ABC" + LOWERS[:19] + DIGITS, True),  # exactly 3 upper case letters
        ("AB" + LOWERS[:20] + DIGITS, False),
        ("abc" + "ABCDEFGHIJKLMNOPQRS" + DIGITS, True),  # exactly 3 lower case letters
        ("ab" + "ABCDEFGHIJKLMNOPQRST" + DIGITS, False),
        ("012" + LOWERS[:15] + "ABCDEFGHIJKLMN", True),  # exactly 3 digits
        ("01" + LOWERS[:15] + "ABCDEFGHIJKLMNO", False),
        ("ABCabc123defgh45" * 2, True),  # 16 characters twice each: exactly 4.0 bits per character
        ("ABCabc123defgh4" * 2 + "ab", False),  # a little less
    ],
)
def test_a_long_token_is_secret_from_3_of_each_character_class_and_4_bits_per_character(token, random_looking):
    assert len(token) == 32
    assert (secret_kind(token) == "a long random-looking string") is random_looking
    assert (Redactor()(f"x {token} y") == "x *** y") is random_looking


def test_the_longest_secret_is_masked_first_so_no_part_of_it_shows():
    """A secret that holds another one: masked shortest first (or in text order) its ends would show."""
    redact = Redactor(given={"A": "zzzz-secret", "B": "aaaa-zzzz-secret-long"})
    assert redact("got aaaa-zzzz-secret-long and zzzz-secret") == "got *** and ***"


def test_a_plain_given_value_of_8_characters_is_masked_inside_words_and_7_only_as_a_word():
    assert Redactor(given={"MODE": "abcdefgh"})("xxabcdefghyy abcdefgh") == "xx***yy ***"
    assert Redactor(given={"MODE": "abcdefg"})("xxabcdefgyy abcdefg") == "xxabcdefgyy ***"
