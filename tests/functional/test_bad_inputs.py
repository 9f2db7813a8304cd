"""Every bad input in tests/data/bad/cases.yaml gets its expected outcome: the right exit code, one
clear line (file:line where there is a file), no traceback, and no output file changed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_invoke

BAD = REPO / "tests" / "data" / "bad"
CASES = yaml.safe_load((BAD / "cases.yaml").read_text())["cases"]
PREVIOUS = "# the previous pipeline\nsteps: []\n"
DIGITS = "9" * 5000  # past Python's 4,300-digit int() limit: what a number from outside must never reach
GIB = 2**30
BLANKS = " " * 100_000  # a run a backtracking pattern can split many ways


def make(kind: str, folder: Path) -> Path:
    """OS-level inputs that cannot live in git: made fresh for each case."""
    path = folder / f"made-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path)
    else:  # pragma: no cover - a typo in cases.yaml
        raise ValueError(kind)
    return path


def fill(text: str, file: Path | None, out: Path | None, made: Path | None = None) -> str:
    text = text.replace("{dir}", str(BAD)).replace("{digits}", DIGITS).replace("{blanks}", BLANKS)
    if made is not None:
        text = text.replace("{made}", str(made))
    if file is not None:
        text = text.replace("{file}", str(file))
    if out is not None:
        text = text.replace("{out}", str(out))
    return text


def test_the_corpus_is_large_and_covers_every_entry_point():
    assert len(CASES) >= 60
    kinds = {case["id"].split("-")[0] for case in CASES}
    assert kinds >= {"source", "pipeline", "generate", "inventory", "workarounds", "junit", "arch", "flag", "settings"}
    assert kinds >= {"typed", "os", "secret", "loss"}  # issue 13: bad input, round 2
    for case in CASES:
        if "file" in case:
            assert (BAD / case["file"]).is_file(), case["id"]


def _marks(case):
    return [pytest.mark.xfail(reason=case["xfail"], strict=True)] if "xfail" in case else []


@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c), id=c["id"]) for c in CASES])
def test_bad_input(case, tmp_path):
    file = BAD / case["file"] if "file" in case else None
    out = None
    previous = PREVIOUS
    if case.get("out") == "source":  # --out names the step file itself: it must survive
        out = tmp_path / "out" / "pipeline.yaml"
        out.parent.mkdir()
        shutil.copy(file, out)
        previous = out.read_text()
    elif case.get("out"):
        out = tmp_path / "out" / "pipeline.yaml"
        out.parent.mkdir()
        out.write_text(PREVIOUS)
    made = make(case["make"], tmp_path) if "make" in case else None
    cwd = REPO
    if case.get("cwd") == "pyproject":
        cwd = tmp_path / "workspace"
        cwd.mkdir()
        shutil.copy(file, cwd / "pyproject.toml")
    elif case.get("cwd") == "made-pyproject":  # a workspace whose pyproject.toml is not a regular file
        cwd = tmp_path / "workspace"
        (cwd / "pyproject.toml").mkdir(parents=True)
    args = [fill(a, file, out, made) for a in case["run"]]
    env = {k: fill(v, file, out, made) for k, v in (case.get("env") or {}).items()}
    # Issue 22: every pipeline.* command on any bad input stays within 1 GB of address space.
    limit = GIB if args[0].startswith("pipeline.") else None
    done = run_invoke(*args, cwd=cwd, env=env, timeout=60, address_space=limit)

    assert done.returncode == case["exit"], done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    expect = case["expect"]
    if case["exit"] == 2:
        lines = done.stderr.strip().splitlines()
        if case.get("after_findings"):  # the findings come first (they are why a file is written), then the error
            assert [line for line in lines if line.startswith("rocmci: ")] == lines[-1:], done.stderr
            lines = lines[-1:]
        assert len(lines) == 1 and lines[0].startswith("rocmci: "), done.stderr
        assert expect in lines[0] and case.get("expect_also", "") in lines[0], lines[0]
    elif case["exit"] == 1:
        assert expect in done.stdout + done.stderr
    else:
        assert expect in done.stdout
    if out is not None:
        assert out.read_text() == previous
        assert [p.name for p in out.parent.iterdir()] == ["pipeline.yaml"]
