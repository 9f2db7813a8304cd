"""pipeline/source (issue 35), the checks of one step: empty parts, the numbers' bounds, credentials, the values
ci-infra's template stops on, wrong types and missing keys, and what a whole file holds (duplicate keys, top-level
keys, clashing labels). Each test writes a real step file, loads it as `rocmci pipeline.validate` does and compares
every finding line, so a changed severity, position or message fails here. docs/guards.md names the mutants.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.errors import InputError
from rocmci.pipeline import source

MIRROR = "    mirror_hardwares: [amdexperimental]\n"
SCHEMA = "error [source-schema]"
ONE_GPU = "the step gets 1 GPU (no_gpu: true for none)"
STOP_TAIL = "so bootstrap-amd.sh uploads no pipeline at all (rocmci generates the step without it)"
PUBLISHED = "remove it and give it to the agents as a secret"
# A Hugging Face token's shape (hf_ and 34 letters and digits): made up here, valid nowhere.
TOKEN = "hf_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7cX0bV9nM"


def _load(tmp_path: Path, text: str) -> source.SourceFile:
    path = tmp_path / "test-amd.yaml"
    path.write_text(text)
    return source.load_source(path, "test-amd.yaml")


def _lines(tmp_path: Path, text: str, mirror: str = "amdexperimental") -> list[str]:
    return [f.text() for f in _load(tmp_path, text).findings_for(mirror)]


def _step(*lines: str, mirror: str = MIRROR) -> str:
    return "  - label: a\n    agent_pool: p\n" + "".join(f"    {line}\n" for line in lines) + mirror


def test_empty_labels_command_lists_nodes_and_commands_are_errors_where_they_are(tmp_path):
    text = "steps:\n  - label: ' '\n    agent_pool: p\n    commands: []\n" + MIRROR
    text += "  - label: b\n    agent_pool: p\n    commands: ['a', ' ']\n" + MIRROR
    text += "  - label: c\n    agent_pool: p\n    num_nodes: 2\n    commands: [['a', ''], []]\n" + MIRROR
    text += "  - label: d\n    agent_pool: p\n    command: '  '\n" + MIRROR
    assert _lines(tmp_path, text) == [
        f"test-amd.yaml:2:5: {SCHEMA} 'label' is empty",
        f"test-amd.yaml:4:5: {SCHEMA} 'commands' is empty: nothing to run",
        f"test-amd.yaml:8:21: {SCHEMA} command 2 is empty",
        f"test-amd.yaml:13:22: {SCHEMA} node 1's command 2 is empty",
        f"test-amd.yaml:13:27: {SCHEMA} node 2 runs no command",
        f"test-amd.yaml:17:5: {SCHEMA} 'command' is empty: nothing to run",
    ]


def test_texts_that_hold_words_and_values_of_other_types_are_not_empty_parts(tmp_path):
    text = "steps:\n" + _step("commands: ['a', [' x']]", "num_nodes: 2") + _step("label: 3", "command: x")
    text = text.replace("  - label: a\n    agent_pool: p\n    label: 3\n", "  - label: 3\n    agent_pool: p\n")
    assert not [line for line in _lines(tmp_path, text) if "empty" in line or "runs no command" in line]
    assert source._empty_parts(None, ("steps", 0), {"label": 3, "commands": "x", "command": 5}) == []


def test_a_list_of_commands_without_two_nodes_is_one_error_at_the_first_list(tmp_path):
    text = "steps:\n" + _step("commands: ['a', ['x'], ['y']]")
    text += _step("commands: [['x'], ['y']]", "num_nodes: 1").replace("label: a", "label: b")
    text += _step("commands: [['x'], ['y']]", "num_nodes: '2'").replace("label: a", "label: c")
    text += _step("commands: [['x'], ['y']]", "num_nodes: 2").replace("label: a", "label: d")
    pasted = "is a list (one node's commands) but the step has no num_nodes of 2 or more: the template pastes the "
    pasted += "list's text as one command"
    found = [line for line in _lines(tmp_path, text) if "is a list" in line]
    assert found == [
        f"test-amd.yaml:4:21: {SCHEMA} command 2 {pasted}",
        f"test-amd.yaml:8:16: {SCHEMA} command 1 {pasted}",
        f"test-amd.yaml:13:16: {SCHEMA} command 1 {pasted}",  # a quoted '2' is text, not two nodes
    ]


def test_numbers_below_one_and_above_their_maximum_are_named_with_what_the_step_gets(tmp_path):
    zero = _step("commands: [x]", "num_gpus: 0", "num_nodes: 0", "timeout_in_minutes: 0", "parallelism: 0")
    out = _step("commands: [x]", "num_gpus: -1", "num_nodes: 65", "timeout_in_minutes: 10081", "parallelism: 101")
    most = _step("commands: [x]", "num_gpus: 64", "num_nodes: 1", "timeout_in_minutes: 10080", "parallelism: 100")
    low = _step("commands: [x]", "num_nodes: -2", "timeout_in_minutes: -3", "parallelism: -4", "num_gpus: 65")
    text = "steps:\n" + zero + out.replace("label: a", "label: b") + most.replace("label: a", "label: c")
    text += low.replace("label: a", "label: d")
    assert _lines(tmp_path, text) == [
        f"test-amd.yaml:5:5: {SCHEMA} 'num_gpus' must be at least 1, got 0; {ONE_GPU}",
        "test-amd.yaml:6:5: warning [source-schema] 'num_nodes' 0 is read as unset: the step gets 1 node",
        "test-amd.yaml:7:5: warning [source-schema] 'timeout_in_minutes' 0 is read as unset: the step gets the "
        "180-minute default",
        "test-amd.yaml:8:5: warning [source-schema] 'parallelism' 0 is read as unset: the step gets no sharding",
        f"test-amd.yaml:13:5: {SCHEMA} 'num_gpus' must be at least 1, got -1",
        f"test-amd.yaml:14:5: {SCHEMA} 'num_nodes' must be at most 64, got 65",
        f"test-amd.yaml:15:5: {SCHEMA} 'timeout_in_minutes' must be at most 10080, got 10081",
        f"test-amd.yaml:16:5: {SCHEMA} 'parallelism' must be at most 100, got 101",
        f"test-amd.yaml:32:5: {SCHEMA} 'num_gpus' must be at most 64, got 65",  # in the order of MAXIMA
        f"test-amd.yaml:29:5: {SCHEMA} 'num_nodes' must be at least 1, got -2",
        f"test-amd.yaml:30:5: {SCHEMA} 'timeout_in_minutes' must be at least 1, got -3",
        f"test-amd.yaml:31:5: {SCHEMA} 'parallelism' must be at least 1, got -4",
    ]


def test_a_number_of_another_type_is_not_bounded(tmp_path):
    assert source._bounds(None, ("steps", 0), {"num_gpus": True, "num_nodes": "0", "parallelism": 2.5}) == []


def test_a_credential_is_an_error_by_its_name_in_env_and_by_its_shape_anywhere(tmp_path):
    env = ["no_plugin: true", "commands: [x]", "env:", "  HF_TOKEN: literal", "  GH_TOKEN: $GH", "  API_KEY: 12345"]
    env += ["  MY_SECRET: true", "  EMPTY_TOKEN: ''", f"  PLAIN: {TOKEN}", f"  HF_TOKEN2: {TOKEN}"]
    text = "steps:\n" + _step(*env)
    text += _step(f"commands: ['echo {TOKEN}', 'short', 'hf_abc']").replace("label: a", "label: b")
    named = "is written into the step file in plain text, so it is published with the repository; " + PUBLISHED
    shaped = "this looks like a Hugging Face token, written into the step file in plain text (published with the "
    shaped += "repository); " + PUBLISHED
    assert _lines(tmp_path, text) == [
        f"test-amd.yaml:7:7: error [secret-in-pipeline] HF_TOKEN {named}",
        f"test-amd.yaml:9:7: error [secret-in-pipeline] API_KEY {named}",
        f"test-amd.yaml:13:7: error [secret-in-pipeline] HF_TOKEN2 {named}",  # once on its line, by its name
        f"test-amd.yaml:12:7: error [secret-in-pipeline] {shaped}",  # by shape, after the names
        f"test-amd.yaml:17:16: error [secret-in-pipeline] {shaped}",
    ]


def test_a_credential_is_found_in_a_key_and_on_steps_of_any_mirror(tmp_path):
    text = "steps:\n" + _step("commands: [x]", "agent_tags:", f"  {TOKEN}: 1", mirror="    mirror_hardwares: [other]\n")
    found = _lines(tmp_path, text)
    assert [line.split(" error ")[0] for line in found if "secret-in-pipeline" in line] == ["test-amd.yaml:6:7:"]


def test_credentials_are_looked_for_without_the_quick_look_too(tmp_path):
    doc = _load(tmp_path, "steps:\n" + _step(f"commands: ['{TOKEN}']")).doc
    step = doc.data["steps"][0]
    assert [f.line for f in source._secrets(doc, ("steps", 0), step)] == [4]
    assert [f.line for f in source._secrets(doc, ("steps", 0), step, "no credential here")] == []


@pytest.mark.parametrize(
    ("step", "stops"),
    [
        ({"mirror_hardwares": 3}, {"mirror_hardwares": "'in' cannot test a number"}),
        ({"mirror_hardwares": True}, {"mirror_hardwares": "'in' cannot test a number"}),
        ({"mirror_hardwares": 0}, {}),  # empty: the step is not rendered
        ({"mirror_hardwares": "amd"}, {}),
        ({"mirror_hardwares": {"amd": 1}}, {}),
        ({"source_file_dependencies": 7}, {"source_file_dependencies": "a number is not iterable"}),
        ({"source_file_dependencies": 0}, {}),
        ({"source_file_dependencies": ["a", 3]}, {"source_file_dependencies": "'length' of an item that is not text"}),
        ({"source_file_dependencies": ["a", ["b"], {}]}, {}),
        ({"no_plugin": True, "env": ["a"]}, {"env": "'items' of a value that is not a mapping"}),
        ({"no_plugin": True, "env": "A=1"}, {"env": "'items' of a value that is not a mapping"}),
        ({"no_plugin": False, "env": ["a"]}, {}),
        ({"no_plugin": True, "env": {"A": "1"}}, {}),
        ({"no_plugin": True, "env": []}, {}),
        ({"dind": False, "agent_tags": ["a"]}, {"agent_tags": "'items' of a value that is not a mapping"}),
        ({"dind": 0, "agent_tags": ["a"]}, {"agent_tags": "'items' of a value that is not a mapping"}),
        ({"dind": None, "agent_tags": ["a"]}, {}),
        ({"dind": False, "agent_tags": {"a": 1}}, {}),
        ({"dind": False, "agent_tags": []}, {}),
        ({"commands": 5}, {"commands": "'join' or 'length' of a value that is not a list"}),
        ({"commands": 5, "command": ""}, {"commands": "'join' or 'length' of a value that is not a list"}),
        ({"commands": 5, "command": "x"}, {}),
        (
            {"commands": 5, "command": "x", "num_nodes": 2},
            {"commands": "'join' or 'length' of a value that is not a list"},
        ),
        ({"commands": None}, {}),
        ({"commands": "x"}, {}),
    ],
)
def test_the_values_the_template_stops_on(step, stops):
    assert source.template_stops(step) == stops


def test_a_stop_is_one_error_whether_its_value_has_the_right_type_or_not(tmp_path):
    steps = [
        _step("commands: 5", "mirror_hardwares: 3", mirror=""),
        _step("commands: [x]", "source_file_dependencies: [a, 3]"),
        _step("commands: [x]", "dind: false", "agent_tags: [a]"),
    ]
    text = "steps:\n" + "".join(s.replace("label: a", f"label: s{i}") for i, s in enumerate(steps))
    commands = "a list of strings (or, with num_nodes, a list of per-node lists of strings)"
    assert _lines(tmp_path, text, "3") == [  # `'3' in 3` stops the render: rocmci judges that step for every mirror
        f"test-amd.yaml:4:5: {SCHEMA} 'commands' must be {commands}, got int 5; ci-infra's template stops on it "
        f"('join' or 'length' of a value that is not a list), {STOP_TAIL}",
        f"test-amd.yaml:5:5: {SCHEMA} 'mirror_hardwares' must be a list of strings, got int 3; ci-infra's template "
        f"stops on it ('in' cannot test a number), {STOP_TAIL}",
    ]
    assert _lines(tmp_path, text)[2:] == [
        f"test-amd.yaml:9:5: {SCHEMA} 'source_file_dependencies' must be a list of strings, got a list; ci-infra's "
        f"template stops on it ('length' of an item that is not text), {STOP_TAIL}",
        f"test-amd.yaml:15:5: {SCHEMA} 'agent_tags' here: ci-infra's template stops on it ('items' of a value that "
        f"is not a mapping), {STOP_TAIL}",
    ]


def test_wrong_types_are_warnings_only_where_the_template_still_gets_them_right(tmp_path):
    first = "steps:\n  - label: 3\n    agent_pool: p\n    commands: [x]\n    mirror_hardwares: amdexperimental\n"
    first += "    timeout_in_minutes: '30'\n    parallelism: '4'\n    optional: ~\n    num_gpus: '2'\n"
    second = "  - label: b\n    agent_pool: ~\n    commands: ~\n    parallelism: '04'\n    timeout_in_minutes: 1.5\n"
    second += "    label2: x\n" + MIRROR
    third = "  - label: [c]\n    agent_pool: p\n    commands: [x]\n    parallelism: '٣'\n"
    third += "    mirror_hardwares: [amdexperimental, 3]\n"
    commands = "a list of strings (or, with num_nodes, a list of per-node lists of strings)"
    assert _lines(tmp_path, first + second + third) == [
        "test-amd.yaml:15:5: error [source-schema] unknown step key 'label2'; did you mean 'label'? The template "
        "ignores 'label2', so its 'label' is used and this one is not",
        "test-amd.yaml:2:5: warning [source-schema] 'label' must be a string, got int 3; the template prints it as "
        "text",
        "test-amd.yaml:5:5: warning [source-schema] 'mirror_hardwares' must be a list of strings, got string "
        "'amdexperimental'; the template tests the mirror as a substring of it",
        "test-amd.yaml:6:5: warning [source-schema] 'timeout_in_minutes' must be an integer, got string '30'; the "
        "template gives the step the 180-minute cap",
        "test-amd.yaml:7:5: warning [source-schema] 'parallelism' must be an integer, got string '4'; the agent reads "
        "the pasted text as that number",
        "test-amd.yaml:8:5: warning [source-schema] 'optional' must be true or false, got nothing; the template reads "
        "an empty value as unset",
        f"test-amd.yaml:9:5: {SCHEMA} 'num_gpus' must be an integer, got string '2'",
        f"test-amd.yaml:11:5: {SCHEMA} 'agent_pool' must be a string, got nothing",
        f"test-amd.yaml:12:5: {SCHEMA} 'commands' must be {commands}, got nothing",
        f"test-amd.yaml:13:5: {SCHEMA} 'parallelism' must be an integer, got string '04'",
        f"test-amd.yaml:14:5: {SCHEMA} 'timeout_in_minutes' must be an integer, got float 1.5",
        f"test-amd.yaml:17:5: {SCHEMA} 'label' must be a string, got a list",
        f"test-amd.yaml:20:5: {SCHEMA} 'parallelism' must be an integer, got string '٣'",  # a digit, not ASCII
        f"test-amd.yaml:21:5: {SCHEMA} 'mirror_hardwares' must be a list of strings, got a list",
    ]


def test_missing_keys_both_command_forms_and_env_without_no_plugin_are_named(tmp_path):
    text = "steps:\n  - commands: [x]\n    command: y\n    env: {A: '1'}\n" + MIRROR
    text += "  - label: b\n    agent_pool: p\n" + MIRROR
    text += "  - label: c\n    agent_pool: p\n    command: x\n    no_plugin: true\n    env: {A: '1'}\n" + MIRROR
    assert _lines(tmp_path, text) == [
        f"test-amd.yaml:2:5: {SCHEMA} step has no 'label'; the step has no name and its block key is 'block-<pool>-'",
        f"test-amd.yaml:2:5: {SCHEMA} step has no 'agent_pool'; the step is rendered on the queue 'amd_' that no "
        "agent serves: it is never scheduled",
        f"test-amd.yaml:3:5: {SCHEMA} give 'commands' or 'command', not both: the template runs 'command' and drops "
        "'commands'",
        "test-amd.yaml:4:5: warning [source-schema] the template passes a step's env only with no_plugin: true; these "
        "variables never reach the job (put them in front of the command instead)",
        f"test-amd.yaml:6:5: {SCHEMA} step has no 'commands'",
    ]


def test_findings_of_a_step_count_only_for_the_mirrors_that_render_it(tmp_path):
    other = "    mirror_hardwares: [amdproduction]\n"
    text = "steps:\n" + _step("commands: [x]", "num_gpus: 0", "lable: x", "gpu: h100", f"cmd: '{TOKEN}'", mirror=other)
    text += _step("commands: [x]").replace("label: a", "label: b")
    everywhere = [
        "test-amd.yaml:6:5: error [source-schema] unknown step key 'lable'; did you mean 'label'? The template "
        "ignores 'lable', so its 'label' is used and this one is not",
        "test-amd.yaml:8:5: warning [source-schema] unknown step key 'cmd': neither the AMD template nor vLLM's "
        "step-file format reads it",
        "test-amd.yaml:8:5: error [secret-in-pipeline] this looks like a Hugging Face token, written into the step "
        f"file in plain text (published with the repository); {PUBLISHED}",
    ]
    assert _lines(tmp_path, text) == everywhere
    assert _lines(tmp_path, text, "amdproduction") == [
        *everywhere,
        f"test-amd.yaml:5:5: {SCHEMA} 'num_gpus' must be at least 1, got 0; {ONE_GPU}",
    ]


NO_STEPS = "a step file is a mapping with a 'steps' list. start the file with 'steps:'"


def test_a_file_that_is_not_a_step_list_is_one_input_error_at_its_place(tmp_path):
    for text in ("", "x: 1\n", "- a\n"):
        with pytest.raises(InputError) as raised:
            _load(tmp_path, text)
        assert str(raised.value) == f"test-amd.yaml:1:1: {NO_STEPS}"
    with pytest.raises(InputError) as raised:
        _load(tmp_path, "# steps\nsteps: 3\n")
    assert str(raised.value) == "test-amd.yaml:2:1: 'steps' must be a list"


def test_top_level_keys_duplicate_keys_and_clashing_labels_are_found(tmp_path):
    text = "other: 1\nsteps:\n - label: a\n   label: b\n   agent_pool: p\n   commands: [x]\n" + MIRROR[1:]
    text += " - label: b\n   agent_pool: p\n   command: y\n" + MIRROR[1:]
    text += " - label: b\n   agent_pool: q\n   command: y\n" + MIRROR[1:]
    text += " - label: b\n   agent_pool: p\n   command: z\n   mirror_hardwares: [amdproduction]\n"
    assert _lines(tmp_path, text) == [
        "test-amd.yaml:4:4: error [duplicate-key] duplicate key 'label' (first at line 3)",
        "test-amd.yaml:1:1: warning [source-schema] unknown top-level key 'other': the template reads only steps",
        "test-amd.yaml:8:4: error [unique-key] another step on p has the label 'b' (test-amd.yaml:3:4); generated "
        "keys would clash: rename one",
    ]
    assert not [line for line in _lines(tmp_path, text, "amdproduction") if "unique-key" in line]


def test_each_mapping_is_a_generated_step_with_its_place_label_pool_and_commands(tmp_path):
    text = "steps:\n" + _step("commands: 5", "command: x") + "  - plain\n" + _step("commands: ~")
    text += _step("command: y") + _step("commands: [p, q]", "command: z") + "  - label: e\n"
    src = _load(tmp_path, text)
    seen = [(s.index, s.where, s.label, s.pool, s.commands) for s in src.steps]
    assert seen == [
        (0, "test-amd.yaml:2:5", "a", "p", ["x"]),  # `commands: 5` is skipped as the generator skips it
        (2, "test-amd.yaml:8:5", "a", "p", []),
        (3, "test-amd.yaml:12:5", "a", "p", ["y"]),
        (4, "test-amd.yaml:16:5", "a", "p", ["p", "q"]),
        (5, "test-amd.yaml:21:5", "e", "", []),
    ]
    assert src.filename == "test-amd.yaml" and len(src.raw_steps) == 6


def test_a_step_whose_commands_are_not_a_list_is_passed_over_by_the_readers_of_steps(tmp_path):
    """`commands: ~` or `commands: 5` is an error at its line; `rocmci run.moe-tests` still finds the MoE step."""
    from rocmci.runs import upstream

    moe = "commands: ['pytest -v -s kernels/moe/test_deepep_moe.py']"
    text = "steps:\n" + _step("commands: 5") + _step("commands: ~") + _step(moe).replace("label: a", "label: moe")
    found = upstream.find_moe(_load(tmp_path, text))
    assert found is not None and found.step_label == "moe" and found.origin == "test-amd.yaml:10"


def test_a_missing_step_file_is_named_with_the_flag_it_came_from(tmp_path):
    with pytest.raises(InputError) as raised:
        source.load_source(tmp_path / "nope.yaml", "nope.yaml", what="--source")
    assert str(raised.value) == "nope.yaml: no such file (from --source)"


def test_a_file_made_without_step_findings_has_none_and_the_mirror_warning_is_at_the_steps_key(tmp_path):
    doc = _load(tmp_path, "# AMD\nx-anchor: 1\nsteps:\n" + _step("commands: [x]")).doc
    made = source.SourceFile(doc, [], [])
    assert made.step_findings == []
    assert [f.text() for f in made.findings_for("zzz")] == [
        "test-amd.yaml:3:1: warning [no-step-for-mirror] no step lists mirror_hw 'zzz': the template renders only "
        "the image build steps; the steps list: amdexperimental"
    ]


def test_a_slip_as_near_to_two_keys_of_its_type_is_named_by_the_first_the_template_reads():
    assert source.near_key("num_gods", 2) == "num_gpus"  # 2 edits from num_gpus and from num_nodes
    assert source.near_key("num_godes", 2) == "num_nodes"  # 1 from num_nodes, 3 from num_gpus


def test_an_empty_command_is_an_error_as_an_empty_required_key_is(tmp_path):
    text = "steps:\n" + _step("command: ~") + "  - agent_pool: p\n    commands: ~\n    label:\n" + MIRROR
    assert [line for line in _lines(tmp_path, text) if "got nothing" in line] == [
        f"test-amd.yaml:4:5: {SCHEMA} 'command' must be a string, got nothing",
        f"test-amd.yaml:7:5: {SCHEMA} 'commands' must be a list of strings (or, with num_nodes, a list of per-node "
        "lists of strings), got nothing",
        f"test-amd.yaml:8:5: {SCHEMA} 'label' must be a string, got nothing",
    ]


def test_a_random_looking_word_is_no_credential_in_a_step_even_beside_one(tmp_path):
    # Shapes only: a whole text that merely looks random (a cache key, a content hash) is no finding,
    # also when a real credential shape elsewhere in the step makes every text of it looked at.
    random_looking = "Zq8Xw3Vn5Rt7Yp2Lk9Hs4Jd6Fg1Bm0Cx"
    text = "steps:\n" + _step(f"commands: ['{TOKEN}', '{random_looking}']", f"working_dir: {random_looking}")
    assert [line.split(": error")[0] for line in _lines(tmp_path, text)] == ["test-amd.yaml:4:16"]


def test_a_number_of_another_type_leaves_the_later_numbers_bounded(tmp_path):
    text = "steps:\n" + _step("commands: [x]", "num_gpus: '2'", "parallelism: 101")
    assert [line for line in _lines(tmp_path, text) if "at most" in line] == [
        f"test-amd.yaml:6:5: {SCHEMA} 'parallelism' must be at most 100, got 101"
    ]


def test_an_empty_label_is_found_at_the_label_wherever_it_stands_in_the_step(tmp_path):
    text = "steps:\n  - agent_pool: p\n    commands: [x]\n    label: ''\n" + MIRROR
    assert _lines(tmp_path, text) == [f"test-amd.yaml:4:5: {SCHEMA} 'label' is empty"]


def test_steps_that_are_no_list_and_a_later_top_level_key_are_found_at_their_own_lines(tmp_path):
    with pytest.raises(InputError) as raised:
        _load(tmp_path, "other: 1\nsteps: 3\n")
    assert str(raised.value) == "test-amd.yaml:2:1: 'steps' must be a list"
    with pytest.raises(InputError) as raised:
        _load(tmp_path, "# vLLM's steps\nx: 1\n")
    assert str(raised.value) == f"test-amd.yaml:2:1: {NO_STEPS}"  # where the file's content starts
    assert _lines(tmp_path, "steps: []\nother: 1\n") == [
        "test-amd.yaml:2:1: warning [source-schema] unknown top-level key 'other': the template reads only steps"
    ]


def test_a_clashing_label_is_found_at_the_label_wherever_it_stands_in_the_step(tmp_path):
    step = "  - agent_pool: p\n    command: x\n    label: a\n" + MIRROR
    assert [line.split(": error")[0] for line in _lines(tmp_path, "steps:\n" + step + step)] == ["test-amd.yaml:8:5"]
