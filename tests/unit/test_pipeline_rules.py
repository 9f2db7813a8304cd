from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.pipeline import amdsteps, generate, inventory, rules, source, validate
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


# ------------------------------------------------------------------ severity: what the real CI would do

SHARED_FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "vllm"
REAL_STEP_FILES = sorted(SHARED_FIXTURES.glob("test-amd*.yaml"))
# `# label(str): the name of the test.` in the header of vLLM's step files documents the shared format
HEADER_KEY = re.compile(r"^# ([a-z_]+)\((?:str|bool|int|list)\):", re.M)


@pytest.mark.skipif(not REAL_STEP_FILES, reason="needs ../shared/fixtures beside the repository")
def test_every_key_of_vllms_real_step_files_is_known():
    """The keys the AMD template reads plus the shared format's: every key any real file uses or documents."""
    used: set[str] = set()
    for path in REAL_STEP_FILES:
        text = path.read_text(encoding="utf-8")
        used |= set(HEADER_KEY.findall(text))
        used |= {str(k) for step in yamldoc.parse(text, path.name).data["steps"] for k in step}
    assert {"gpu", "grade", "num_devices", "device", "torch_nightly"} <= used  # the eras are in the fixtures
    assert used - set(source.READ_KEYS) - source.SHARED_KEYS == set()


@pytest.mark.parametrize(
    ("key", "value", "slip_of"),
    [
        ("agent_poll", "mi300_1", "agent_pool"),
        ("mirror_hardware", ["amdproduction"], "mirror_hardwares"),
        ("num_gpu", 2, "num_gpus"),
        ("Num_GPUs", 2, "num_gpus"),
        ("no_gpus", True, "no_gpu"),
        ("timeout_in_minute", 30, "timeout_in_minutes"),
        # same spelling distance, another meaning: never a suggestion
        ("gpu", "h100", None),
        ("no_gpu_", "h100", None),
        ("num_devices", 4, None),
        ("flaky_reruns", 2, None),
    ],
)
def test_a_key_is_a_slip_only_of_a_key_of_the_same_meaning(key, value, slip_of):
    assert source.near_key(key, value) == slip_of


def _source(text: str) -> list:
    doc = yamldoc.parse(text, "s.yaml")
    src = source.from_document(doc)
    generated = generate.generate(src, generate.Options())
    return validate.validate_generated(src, generated, ctx()).findings


def test_shared_format_keys_are_silent_and_a_step_no_mirror_renders_is_not_judged():
    text = (
        "steps:\n"
        "- {label: a, mirror_hardwares: [amdproduction], agent_pool: mi300_1, gpu: h100, grade: Blocking,\n"
        "   num_devices: 2, device: b200, retry: {automatic: true}, commands: [pytest]}\n"
        "- {label: nvidia, gpu: b200, num_gpus: two, commands: [[x]]}\n"
        "- {label: experimental, mirror_hardwares: [amdexperimental], num_gpus: two, commands: [pytest]}\n"
    )
    assert [f.text() for f in _source(text)] == []
    # the same mistakes on a step the template renders are errors: wrong GPUs, never scheduled
    found = _source(text.replace("[amdexperimental]", "[amdproduction]"))
    assert {(f.line, f.severity, f.rule) for f in found} == {
        (5, "error", "source-schema"),
        (5, "error", "unknown-queue"),  # rendered all the same, on the queue amd_
        (5, "error", "gpu-count"),  # VLLM_CI_EXPECTED_GPU_COUNT "two"
    }
    assert any("'num_gpus' must be an integer" in f.message for f in found)
    assert any("step has no 'agent_pool'; the step is rendered on the queue 'amd_'" in f.message for f in found)


@pytest.mark.parametrize(
    ("pool", "slips"),
    [
        ("mi30_2", ["mi300_2"]),
        ("m300_2", ["mi300_2"]),
        ("MI300_2", ["mi300_2"]),
        ("mi300_3", ["mi300_2", "mi300_1"]),  # a GPU count no pool has: the nearest counts first
        ("mi3002", ["mi300_2"]),
        ("mi030_2", ["mi300_2"]),  # two characters swapped
        ("mi300_2", []),  # known
        ("mi400_8", []),  # a new family: a new pool, not a slip
        ("mi300_16", []),  # a power of two: maybe a new pool
        ("mi355_dpx", []),
        ("gpu-farm", []),
    ],
)
def test_a_pool_slip_is_told_from_a_new_pool(pool, slips):
    assert rules.near_pools(pool, sorted(ctx().inventory.pools)) == slips


def test_pool_messages_name_the_setting_not_a_path_inside_the_package():
    c = rules.Context(inventory.load_inventory(DATA / "agents.yaml"), ("gfx942",), "the packaged inventory")
    text = "steps:\n- {label: a, key: a, agents: {queue: amd_mi30_2}, command: x, timeout_in_minutes: 5}\n"
    (found,) = validate.validate_pipeline_document(yamldoc.parse(text, "p.yaml"), c).findings
    assert found.severity == "error" and "did you mean mi300_2?" in found.message
    assert "packaged with rocmci (setting 'inventory'" in found.message and "agents.yaml (" not in found.message
    far = validate.validate_pipeline_document(yamldoc.parse(text.replace("mi30_2", "mi400_8"), "p.yaml"), c).findings
    assert [(f.severity, "a new pool?" in f.message) for f in far] == [("warning", True)]


def test_a_merge_sign_as_a_value_is_text():
    assert yamldoc.parse("steps:\n- label: <<\n", "m.yaml").data == {"steps": [{"label": "<<"}]}


def test_findings_point_at_the_command_and_the_node_command_at_fault():
    text = (
        "steps:\n"
        "- label: two nodes\n"
        "  mirror_hardwares: [amdproduction]\n"
        "  agent_pool: mi300_2\n"
        "  num_gpus: 2\n"
        "  num_nodes: 2\n"
        "  commands:\n"
        "  - - pytest a\n"
        "    - echo $HOME\n"
        "  - - pytest b -tp 4\n"
    )
    found = _source(text)
    assert sorted((f.line, f.col, f.rule) for f in found) == [(9, 7, "interpolation"), (10, 7, "gpu-count")]


# Rust's `{:?}` of each text, as rustc prints it (checked with rustc 1.95: `println!("{:?}", text)`).
RUST_DEBUG = {
    "it's": '"it\'s"',
    'a"b': '"a\\"b"',
    "both ' and \"": '"both \' and \\""',
    "tab\there\nnl": '"tab\\there\\nnl"',
    "\x00\x1b[2J\x7f\x85\x9f": '"\\0\\u{1b}[2J\\u{7f}\\u{85}\\u{9f}"',
    "\xa0 \u200b é 日本 😀": '"\\u{a0} \\u{200b} é 日本 😀"',
    "back\\slash": '"back\\\\slash"',
}


@pytest.mark.parametrize("text", sorted(RUST_DEBUG))
def test_a_list_prints_as_minijinja_cli_2_3_1_prints_it(text):
    """minijinja 2.3's Display of a list writes each item with Rust's Debug (`["a", none, true]`); the
    Python binding installed here is a newer engine (2.24+) that prints Python-style, so it is not the oracle."""
    debug = RUST_DEBUG[text]
    assert amdsteps.rust_text([text, [text], True, None, 1, {"k": text}]) == (
        f'[{debug}, [{debug}], true, none, 1, {{"k": {debug}}}]'
    )
    minijinja = pytest.importorskip("minijinja")
    newer = minijinja.Environment().render_str("{{ [true, none] }}")
    assert newer == "[True, None]"  # why citemplate prints the step file's lists itself (_printed_as_2_3)


def test_floats_in_a_list_print_as_rust_debug_prints_them():
    # rustc 1.95, `println!("{:?}", x)` for each
    floats = [1.0, 1e20, 1.5e-5, 0.5, 1e16, 123456789012345.6, 1e-4, -0.0, 2.5]
    assert amdsteps.rust_text(floats) == "[1.0, 1e20, 1.5e-5, 0.5, 1e16, 123456789012345.6, 0.0001, -0.0, 2.5]"
