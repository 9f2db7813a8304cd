"""Every task's flags: help text, one parser, one default; conventional short flags; parse-time bounds."""

from __future__ import annotations

import inspect

import pytest

from rocmci import settings as settingsmod
from rocmci.cli import flags
from rocmci.cli.tasks import ns
from rocmci.errors import UsageError


def _tasks(col=ns, prefix=""):
    for name, t in sorted(col.tasks.items()):
        yield prefix + name, t
    for name, sub in sorted(col.collections.items()):
        yield from _tasks(sub, prefix + name + ".")


TASKS = dict(_tasks())


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_flag_has_help_one_parser_and_no_default_in_the_task(name):
    task = TASKS[name]
    params = list(inspect.signature(task.body).parameters.values())[1:]
    for arg in task.get_arguments():
        attr = arg.attr_name or arg.name
        assert attr in flags.FLAGS, f"{name} --{arg.name} is not in cli/flags.py"
        assert arg.help, f"{name} --{arg.name} has no help"
    for p in params:
        flag = flags.FLAGS[p.name]
        # The task declares "not given" only: the default lives in cli/flags.py or in the settings registry.
        assert p.default is (False if flag.switch else None), f"{name} repeats a default for --{p.name}"
        # One parser: a switch (invoke's), a setting (settings.convert) or exactly one function here.
        kinds = [flag.switch, flag.setting is not None, flag.parse is not None]
        assert sum(kinds) <= 1, f"--{p.name} has several parsers"
        if flag.setting is not None:
            assert flag.setting in settingsmod.BY_NAME and flag.default is None, f"--{p.name}: default is the setting's"


def test_every_flag_in_the_table_is_used_and_shorts_are_conventional():
    used = {p for t in TASKS.values() for p in list(inspect.signature(t.body).parameters)[1:]}
    assert used == set(flags.FLAGS)
    assert flags.SHORT == {"tag": "t", "env": "e", "k": "k", "dry_run": "n"}
    for name, task in TASKS.items():
        for arg in task.get_arguments():
            shorts = {n for n in arg.names if len(n) == 1}
            assert "h" not in shorts, f"{name}: -h is invoke's help"
            attr = arg.attr_name or arg.name
            assert shorts <= {flags.SHORT.get(attr, arg.name if len(arg.name) == 1 else None)}, (name, arg.names)


def test_same_flag_same_meaning_dry_run_and_json():
    for name, task in TASKS.items():
        names = {n for a in task.get_arguments() for n in a.names}
        assert not names & {"dry", "d", "y", "r"} or "dry-run" not in names, name
    runs_output = [n for n in TASKS if n not in ("version",)]
    assert all("json" in {a.name for a in TASKS[n].get_arguments()} or n.startswith(("image.build", "image.retarget",
               "pipeline.generate")) for n in runs_output)  # fmt: skip


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"shards": "100000000"}, "--shards must be between 1 and 32"),
        ({"shards": "0"}, "--shards must be between 1"),
        ({"tp": "2.9"}, "--tp must be a whole number"),
        ({"exit_code": "256"}, "--exit-code must be between -255 and 255"),
        ({"exit_code": "-99999"}, "--exit-code must be between -255 and 255"),
        ({"timeout": "0"}, "--timeout must be between 1"),
        ({"image": "--privileged"}, "starts with '-'"),
        ({"tag": "a b"}, "is not an image reference"),
        ({"from_": "x;y"}, "is not an image reference"),
        ({"gpus": "abc"}, "must be GPU indices"),
        ({"gpus": "0,0"}, "names a GPU twice"),
        ({"env": ["NOPE"]}, "must be NAME=value"),
        ({"backend": "deepep_high_throughput_"}, "did you mean 'deepep_high_throughput'"),
        ({"mode": "low-latncy"}, "did you mean 'low-latency'"),
        ({"format": "ymal"}, "did you mean 'yaml'"),
        ({"workload": "moe-test"}, "did you mean 'moe-tests'"),
        ({"target": "ci-base"}, "did you mean 'ci_base'"),
        ({"diff_base": "--upload-pack=x"}, "is not a git ref"),
        ({"extra": "'unbalanced"}, "balance the quotes"),
    ],
)
def test_values_are_checked_when_parsed(given, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        flags.parse(given)


def test_parsed_values_are_typed_and_defaulted_once():
    v = flags.parse({"gpus": "0,1", "env": ["A=1", "B=x=y"], "public": ["A"], "tp": None, "extra": "-x 'a b'",
                     "dry_run": True, "mode": None})  # fmt: skip
    assert v.gpus == (0, 1) and v.env.as_dict() == {"A": "1", "B": "x=y"} and v.public == {"A"}
    assert v.tp == 1 and v.extra == ("-x", "a b") and v.dry_run is True and v.mode == "both"


def test_every_flag_that_takes_a_value_has_a_placeholder_for_help():
    """`-h` shows `--tp N`, `--env NAME=VALUE`: never invoke's STRING, never a bare flag that wants a value."""
    valued = [name for name, flag in flags.FLAGS.items() if not flag.switch]
    assert [n for n in valued if n not in flags.PLACEHOLDERS] == []
    assert set(flags.PLACEHOLDERS) <= set(valued)
    for name in ("tp", "dp", "shards", "examples", "max_model_len", "exit_code"):
        assert flags.placeholder(name) == "N"
    assert flags.placeholder("env") == "NAME=VALUE"


@pytest.mark.parametrize("bad", ["", " ", "x" * 101, "ready\x1b[2J", "a\nb"])
def test_label_names_are_printable_and_bounded(bad):
    with pytest.raises(UsageError, match="is not a label name"):
        flags.parse({"label": [bad]})
    assert flags.parse({"label": ["ready-run-all-tests"]}).label == ("ready-run-all-tests",)


def test_each_parse_starts_from_the_declared_flags():
    """invoke copies every task's flags before a parse (cli/edge.py makes the copy shallow): a parse never
    changes the collection's own flags, so a second parse in one process starts from the declared ones."""
    from invoke.parser import Parser

    contexts = ns.to_contexts()
    parser = Parser(contexts=contexts)
    first = parser.parse_argv(["pipeline.plan", "--label", "a", "--label", "b", "--nightly"])
    second = parser.parse_argv(["pipeline.plan", "--label", "c"])
    assert (first[0].args["label"].value, first[0].args["nightly"].value) == (["a", "b"], True)
    assert (second[0].args["label"].value, second[0].args["nightly"].value) == (["c"], False)
    (declared,) = [c for c in contexts if c.name == "pipeline.plan"]
    assert (declared.args["label"].value, declared.args["nightly"].value) == ([], False)
