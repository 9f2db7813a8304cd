"""A run's log is named from its step's label, which the step file gives: whatever the label holds, the name is a
plain file name in the results folder that open() accepts, two labels keep two logs, two runs keep two logs."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmci.runs.execute import LOG_NAME_MAX, log_file_name

STAMP = "20261202-201500"
HOSTILE = [
    "mi300_1: Kernels\x00MoE",  # a NUL: open() raises ValueError ("embedded null byte")
    "a" * 300,  # over NAME_MAX (255): ENAMETOOLONG
    "line\nbreak",
    "../../etc/passwd",
    "\u202eevil",  # a bidi override
    ".hidden",
    "",
    "caf\u00e9 \ud800",  # a lone surrogate (a label read from a file with surrogateescape)
]


@pytest.mark.parametrize("label", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_label_gives_a_plain_name_that_can_be_opened(tmp_path, label):
    name = log_file_name(label, STAMP, 4242)
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", name), name
    assert name.endswith(f"-{STAMP}-4242.log") and len(name) <= LOG_NAME_MAX + len(STAMP) + 20
    with open(tmp_path / name, "w", encoding="utf-8") as log:
        log.write("x")
    assert [p.name for p in tmp_path.iterdir()] == [name]  # in the folder itself, never above it


def test_a_plain_label_keeps_its_readable_name():
    assert log_file_name("moe tests/1", STAMP, 7) == f"moe-testsof1-{STAMP}-7.log"


def test_two_runs_of_one_step_in_one_second_keep_two_logs():
    assert log_file_name("step", STAMP, 100) != log_file_name("step", STAMP, 101)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(max_size=400), st.text(max_size=400))
def test_two_labels_keep_two_logs(a, b):
    if a != b:
        assert log_file_name(a, STAMP, 1) != log_file_name(b, STAMP, 1) or (
            a.replace(" ", "-").replace("/", "of") == b.replace(" ", "-").replace("/", "of")
        )
    assert os.sep not in log_file_name(a, STAMP, 1) and "\x00" not in log_file_name(a, STAMP, 1)


def test_the_run_areas_progress_lines_pass_the_output_gate(capsys):
    """run.bisect's and the runs' progress lines carry commit subjects, labels and paths from outside."""
    from rocmci.runs import service

    service._eprint("rocmci: bisect: \x1b]0;owned\x07 https://user:hunter22@example.com/x \u202edone")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err and "hunter22" not in err
    assert err.count("\n") == 1 and "bisect" in err
