"""pipeline/source (issue 35): the step file's findings, each one exact line at its `file:line:col`, read from
real step files written to disk and loaded as `rocmci pipeline.validate` loads them: the mirror no step lists,
slips of the keys the template reads (and which slip is the nearest), control characters, and how a value of
the wrong type is named. docs/guards.md lists the mutants these were written from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.pipeline import source


def _findings(tmp_path: Path, text: str, mirror: str = "amdexperimental", having: str = "") -> list[str]:
    """The findings' lines for this step file, only those holding `having` when it is given."""
    path = tmp_path / "test-amd.yaml"
    path.write_text(text)
    lines = [f.text() for f in source.load_source(path, "test-amd.yaml").findings_for(mirror)]
    return [line for line in lines if having in line]


CONTROL_TAIL = "ci-infra's render is YAML no parser accepts, so the upload fails; remove it"


STEP = "  - label: a\n    commands: [echo]\n"


def test_a_mirror_no_step_lists_is_one_warning_with_the_nearest_mirror(tmp_path):
    text = f"# vLLM's AMD steps\nsteps:\n{STEP}    mirror_hardwares: [amdexperimental, amdproduction]\n"
    assert _findings(tmp_path, text, "amdproductio") == [
        "test-amd.yaml:2:1: warning [no-step-for-mirror] no step lists mirror_hw 'amdproductio': the template "
        "renders only the image build steps; did you mean 'amdproduction'?"
    ]
    assert _findings(tmp_path, text, "zzz") == [
        "test-amd.yaml:2:1: warning [no-step-for-mirror] no step lists mirror_hw 'zzz': the template renders "
        "only the image build steps; the steps list: amdexperimental, amdproduction"
    ]
    bare = "steps:\n  - label: a\n    commands: [echo]\n  - plain text\n  - mirror_hardwares: amdx\n"
    assert _findings(tmp_path, bare, "zzz")[-1].endswith("; the steps list: no mirror")


@pytest.mark.parametrize(
    ("key", "nearest"),
    [
        ("lable", "label"),  # a swap: distance 1
        ("Label", "label"),  # case only: distance 0
        ("comands", "commands"),
        ("comand", "command"),  # nearer command (1) than commands (2)
        ("timeout_in_minute", "timeout_in_minutes"),
        ("timeout_minutes", None),  # 3 edits: too far
        ("num_gpu", "num_gpus"),
        ("num_gpuss", "num_gpus"),
        ("wrking_dr", "working_dir"),  # 2 edits on a key of 8 characters or more
        ("agnt_pol", "agent_pool"),  # 2 edits on a key of 10 characters
        ("envv", "env"),
        ("ennv", "env"),
        ("optinal", "optional"),
        ("dnd", "dind"),
        ("dd", None),  # 2 edits on a key of fewer than 8 characters: too far
        ("comads", "commands"),  # 2 edits on a key of exactly 8 characters
    ],
)
def test_a_slip_is_named_by_the_nearest_key_the_template_reads(key, nearest):
    values = {"label": "x", "command": "x", "commands": ["x"], "timeout_in_minutes": 5, "num_gpus": 2}
    values |= {"working_dir": "/x", "agent_pool": "x", "env": {"A": "1"}, "optional": True, "dind": True}
    values |= {"dd": True, "timeout_minutes": 5}  # a value the far key would take
    value = values.get(nearest or key, "x")
    assert source.near_key(key, value) == nearest


def test_the_edit_distance_counts_a_swap_as_one_and_stops_past_its_limit():
    assert source._distance("ab", "ba") == 1
    assert source._distance("abc", "acb") == 1
    assert source._distance("abcd", "badc") == 2
    assert source._distance("label", "label") == 0
    assert source._distance("abcdef", "a") == 3  # far apart in length: limit + 1 at once
    assert source._distance("abcd", "wxyz") == 3  # limit + 1, not 4
    assert source._distance("abcd", "wxyz", 5) == 4
    assert source._distance("kitten", "sitting", 3) == 3
    assert source._distance("", "ab") == 2
    assert source._distance("ca", "abc", 3) == 3  # no swap credit without an adjacent pair
    assert source._distance("aaa", "a", 3) == 2  # a swap needs two characters of each word


def test_a_slip_of_a_key_the_step_also_has_says_which_one_is_used(tmp_path):
    text = "steps:\n  - label: a\n    lable: b\n    commands: [echo]\n    comands: [echo no]\n"
    text += "    mirror_hardwares: [amdexperimental]\n"
    found = _findings(tmp_path, text, having="unknown step key")
    assert found == [
        "test-amd.yaml:3:5: error [source-schema] unknown step key 'lable'; did you mean 'label'? The template "
        "ignores 'lable', so its 'label' is used and this one is not",
        "test-amd.yaml:5:5: error [source-schema] unknown step key 'comands'; did you mean 'commands'? The "
        "template ignores 'comands', so its 'commands' is used and this one is not",
    ]
    alone = "steps:\n  - label: a\n    comands: [echo]\n    mirror_hardwares: [amdexperimental]\n"
    assert any(
        f.endswith("The template ignores 'comands', so the step runs no command") for f in _findings(tmp_path, alone)
    )


def test_a_control_character_is_one_error_per_key_at_the_text_that_holds_it(tmp_path):
    text = (
        'steps:\n  - label: a\n    not_read: "\\u0003"\n    commands:\n      - "ok"\n      - "x\\u0007y"\n'
        '      - "z\\u0001"\n    env:\n      "A\\u0002": "1"\n    mirror_hardwares: [amdexperimental]\n'
    )
    found = _findings(tmp_path, text, having="control-character")
    assert found == [
        "test-amd.yaml:6:9: error [control-character] control character U+0007 in 'commands': " + CONTROL_TAIL,
        "test-amd.yaml:9:7: error [control-character] control character U+0002 in 'env': " + CONTROL_TAIL,
    ]


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("working_dir", "~", "nothing"),
        ("working_dir", "true", "boolean true"),
        ("working_dir", "False", "boolean false"),
        ("num_gpus", "'" + "x" * 50 + "'", "string " + repr("x" * 40)),
        ("working_dir", "{a: 1}", "a mapping"),
        ("working_dir", "[1]", "a list"),
        ("working_dir", "3", "int 3"),
        ("working_dir", "1.5", "float 1.5"),
    ],
)
def test_a_value_of_the_wrong_type_is_named_by_its_kind(tmp_path, key, value, named):
    text = f"steps:\n  - label: a\n    agent_pool: x\n    commands: [echo]\n    {key}: {value}\n"
    text += "    mirror_hardwares: [amdexperimental]\n"
    found = _findings(tmp_path, text, having=f"'{key}' must be")
    assert len(found) == 1 and f"got {named}" in found[0], found


def test_a_control_character_in_an_env_value_is_found_at_that_value(tmp_path):
    text = (
        'steps:\n  - label: a\n    env:\n      A: "1"\n      B: "x\\u0004"\n    mirror_hardwares: [amdexperimental]\n'
    )
    found = _findings(tmp_path, text, having="control-character")
    assert found == [
        "test-amd.yaml:5:7: error [control-character] control character U+0004 in 'env': " + CONTROL_TAIL,
    ]


def test_a_step_that_is_not_a_mapping_and_an_unknown_key_are_warnings_at_their_lines(tmp_path):
    long_key = "k" * 70  # named by its first 60 characters: a finding is one line
    text = f"steps:\n{STEP}    mirror_hardwares: [amdexperimental]\n    {long_key}: 1\n  - plain text\n  - 3\n"
    assert _findings(tmp_path, text, having="warning") == [
        f"test-amd.yaml:5:5: warning [source-schema] unknown step key '{'k' * 60}': neither the AMD template nor "
        "vLLM's step-file format reads it",
        "test-amd.yaml:6:5: warning [source-schema] step 2 must be a mapping, got string 'plain text'; the template "
        "skips it",
        "test-amd.yaml:7:5: warning [source-schema] step 3 must be a mapping, got int 3; the template skips it",
    ]
