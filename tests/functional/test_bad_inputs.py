"""Every bad input in tests/data/bad/cases.yaml gets its expected outcome: the right exit code, one
clear line (file:line where there is a file), no traceback, and no output file changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_invoke

BAD = REPO / "tests" / "data" / "bad"
CASES = yaml.safe_load((BAD / "cases.yaml").read_text())["cases"]
PREVIOUS = "# the previous pipeline\nsteps: []\n"


def fill(text: str, file: Path | None, out: Path | None) -> str:
    text = text.replace("{dir}", str(BAD))
    if file is not None:
        text = text.replace("{file}", str(file))
    if out is not None:
        text = text.replace("{out}", str(out))
    return text


def test_the_corpus_is_large_and_covers_every_entry_point():
    assert len(CASES) >= 60
    kinds = {case["id"].split("-")[0] for case in CASES}
    assert kinds >= {"source", "pipeline", "generate", "inventory", "workarounds", "junit", "arch", "flag", "settings"}
    for case in CASES:
        if "file" in case:
            assert (BAD / case["file"]).is_file(), case["id"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_input(case, tmp_path):
    file = BAD / case["file"] if "file" in case else None
    out = None
    if case.get("out"):
        out = tmp_path / "out" / "pipeline.yaml"
        out.parent.mkdir()
        out.write_text(PREVIOUS)
    cwd = REPO
    if case.get("cwd") == "pyproject":
        cwd = tmp_path / "workspace"
        cwd.mkdir()
        shutil.copy(file, cwd / "pyproject.toml")
    args = [fill(a, file, out) for a in case["run"]]
    env = {k: fill(v, file, out) for k, v in (case.get("env") or {}).items()}
    done = run_invoke(*args, cwd=cwd, env=env)

    assert done.returncode == case["exit"], done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    expect = case["expect"]
    if case["exit"] == 2:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rocmci: "), done.stderr
        assert expect in lines[0]
    elif case["exit"] == 1:
        assert expect in done.stdout + done.stderr
    else:
        assert expect in done.stdout
    if out is not None:
        assert out.read_text() == PREVIOUS
        assert [p.name for p in out.parent.iterdir()] == ["pipeline.yaml"]
