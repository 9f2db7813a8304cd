from __future__ import annotations

from pathlib import Path

import pytest

from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.pipeline import inventory, rules, validate
from rocmci.pipeline.rules import INTERPOLATION, parallel_size

DATA = Path(__file__).resolve().parents[1] / "data" / "pipeline"


def ctx() -> rules.Context:
    return rules.Context(inventory.load_inventory(DATA / "agents.yaml"), ("gfx942", "gfx950"))


def test_more_than_500_steps_is_one_finding():
    step = "- {{label: s{0}, key: s{0}, agents: {{queue: amd_mi300_1}}, command: x, timeout_in_minutes: 5}}\n"
    text = "steps:\n" + "".join(step.format(i) for i in range(501))
    found = validate.validate_pipeline_document(yamldoc.parse(text, "big.yaml"), ctx()).findings
    assert [(f.line, f.rule) for f in found] == [(1, "step-limit")]
    assert "501 steps" in found[0].message


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("steps:\n- label: a\n  command: [x\n", "bad.yaml:4:1"),
        ("steps:\n\t- label: a\n", "bad.yaml:2:1"),
        ("steps: [a, b\n", "bad.yaml:2:1"),
    ],
)
def test_yaml_syntax_errors_are_input_errors_with_a_position(text, where):
    with pytest.raises(InputError) as err:
        yamldoc.parse(text, "bad.yaml")
    assert err.value.one_line().startswith(f"{where}: invalid YAML")
    assert err.value.exit_code == 2


def test_alias_bomb_is_refused_quickly():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    with pytest.raises(InputError, match="aliases expand to more than"):
        yamldoc.parse(bomb, "bomb.yaml")


def test_merge_keys_and_positions():
    doc = yamldoc.parse("base: &b {queue: q}\nstep:\n  <<: *b\n  label: x\n", "m.yaml")
    assert doc.data["step"] == {"label": "x", "queue": "q"}
    assert doc.where(("step", "label")) == "m.yaml:4:3"


def test_binary_and_non_utf8_files_are_refused():
    with pytest.raises(InputError, match="binary file"):
        yamldoc.parse(b"\x00\x01steps", "bin.yaml")
    with pytest.raises(InputError, match="not UTF-8"):
        yamldoc.parse(b"steps: \xff\xfe", "latin.yaml")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("echo $HOME", ["HOME"]),
        ("echo ${HOME}", ["{HOME}"]),
        ("echo $$HOME", []),
        ("echo \\$HOME", []),
        ("echo $$$HOME", ["HOME"]),
        ("cost is 5$", []),
        ("echo $1", []),
    ],
)
def test_interpolation_pattern(text, names):
    assert [m.group(1) for m in INTERPOLATION.finditer(text)] == names
    first = names[0].strip("{}") if names else None
    assert (rules._undefined(text, set()) or ("", None))[1] == first
    assert rules._undefined(text, {"HOME"}) is None  # defined in the pipeline's env: no finding


def test_the_first_undefined_name_skips_defined_ones_and_reads_defaults():
    assert rules._undefined("$HOME ${IMAGE:-rocm/vllm} $X", {"HOME"}) == ("${IMAGE:-rocm/vllm}", "IMAGE")
    assert rules._undefined("${TAG-latest}", set()) == ("${TAG-latest}", "TAG")


def test_dollar_texts_are_the_distinct_strings_with_a_dollar_anywhere_in_the_document():
    doc = {"steps": [{"env": {"A": "$X", "B": "plain"}, "commands": ["echo $X", "$X"]}, {"label": "$X"}], "n": 1}
    assert rules._dollar_texts(doc, set()) == {"$X", "echo $X"}


def test_parallel_size_reads_tp_and_dp_spellings():
    assert parallel_size("python3 x.py -tp=2 -dp=2") == 4
    assert parallel_size("python3 x.py --tensor-parallel-size 4 && python3 y.py -dp 2") == 4
    assert parallel_size("pytest -v") == 0
