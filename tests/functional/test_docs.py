"""Every command example in README.md and docs/*.md runs, so the docs cannot go stale (issue 34, item 1).

The convention the docs follow:
- an example that can run on this machine is a line `$ rocmci …` in a ```console block; it is run from a
  vLLM-like checkout (vLLM's real files from ../shared/fixtures/vllm, no rocmci file in it) and must exit 0,
  or N when the line ends with `# exit N`; the output lines after it are not compared;
- a block holding a rocmci, rocmci-validate, invoke or nox command that cannot run here (an AMD GPU,
  Buildkite, the network, a long build) is directly preceded by `<!-- not run: <reason> -->`.
A command in any other fenced block fails the test, as does a console command that exits otherwise.

The commands run two at a time (this machine has 2 CPUs), once per session; each example is its own test.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.conftest import REPO
from tests.functional.checkouts import make_checkout, rocmci

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(\S.*?)\s*-->\s*$")
# A command line: optional `$ `, optional VAR=value words, then one of the project's commands.
COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(rocmci|rocmci-validate|invoke|inv|nox)(?:\s|$)")
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")


class Example(NamedTuple):
    where: str  # file:line
    argv: tuple[str, ...]  # after `rocmci`
    code: int


class Block(NamedTuple):
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    lines: tuple[str, ...]
    not_run: str | None  # the reason, when the line before the fence says so


def blocks(path: Path, text: str | None = None) -> list[Block]:
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2).lower(), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)), len(lines))
        before = NOT_RUN.match(lines[start - 1]) if start else None
        found.append(Block(path, start + 1, info, tuple(lines[start + 1 : end]), before.group(1) if before else None))
        i = end + 1
    return found


def examples(block: Block) -> list[Example]:
    """The `$ rocmci …` lines of a console block."""
    out = []
    for offset, line in enumerate(block.lines, 1):
        if not line.startswith("$ "):
            continue
        where = f"{block.path.name}:{block.line + offset}"
        m = EXIT.search(line)
        command = line[2 : m.start()] if m else line[2:]
        words = shlex.split(command, comments=True)
        assert words and words[0] == "rocmci", f"{where}: a console example runs `rocmci …`, not {command!r}"
        out.append(Example(where, tuple(words[1:]), int(m.group(1)) if m else 0))
    return out


def unmarked_commands(block: Block) -> list[str]:
    """Command lines in a block that is neither console nor marked `<!-- not run: reason -->`."""
    if block.info == "console" or block.not_run:
        return []
    return [f"{block.path.name}:{block.line + n}: {line.strip()}" for n, line in enumerate(block.lines, 1)
            if COMMAND.match(line)]  # fmt: skip


ALL_BLOCKS = [b for path in DOCS for b in blocks(path)]
EXAMPLES = [e for b in ALL_BLOCKS if b.info == "console" for e in examples(b)]


# ------------------------------------------------------------------------------ the scanner itself


def test_the_scanner_tells_console_marked_and_unmarked_blocks_apart(tmp_path):
    text = (
        "```console\n$ rocmci settings\nsome output\n$ rocmci image.check  # exit 1\n```\n\n"
        "<!-- not run: needs an AMD GPU -->\n```sh\nrocmci run.moe-tests\n```\n\n"
        "```sh\nROCMCI_ARCH=gfx942 rocmci pipeline.validate\n```\n"
        "```text\n$ invoke pipeline.diff --template t.j2\n```\n"
        "<!-- not run: -->\n```sh\nnox -s tests\n```\n"  # a mark without a reason is no mark
        "```yaml\n- id: rocmci-validate-test-amd\n```\n"
    )
    found = blocks(tmp_path / "x.md", text)
    assert [b.info for b in found] == ["console", "sh", "sh", "text", "sh", "yaml"]
    assert examples(found[0]) == [Example("x.md:2", ("settings",), 0), Example("x.md:4", ("image.check",), 1)]
    assert found[1].not_run == "needs an AMD GPU" and unmarked_commands(found[1]) == []
    assert [c for b in found for c in unmarked_commands(b)] == [
        "x.md:13: ROCMCI_ARCH=gfx942 rocmci pipeline.validate",
        "x.md:16: $ invoke pipeline.diff --template t.j2",
        "x.md:20: nox -s tests",
    ]


def test_the_docs_were_read():
    assert {p.name for p in DOCS} >= {"README.md", "pipeline.md", "runs.md", "image.md", "settings.md"}
    assert len(EXAMPLES) >= 20
    assert any(e.where.startswith("README.md:") for e in EXAMPLES)


def test_every_command_outside_a_console_block_says_why_it_is_not_run():
    unmarked = [c for b in ALL_BLOCKS for c in unmarked_commands(b)]
    assert unmarked == [], (
        "a command in a fenced block must be a ```console `$ rocmci …` example (run by this test) or be directly "
        "preceded by <!-- not run: reason -->:\n" + "\n".join(unmarked)
    )


# ------------------------------------------------------------------------------ the examples, run


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, vllm_fixtures):
    """Every example run once from its own copy of the checkout, two at a time: {where: CompletedProcess}."""
    base = make_checkout(tmp_path_factory.mktemp("docs-vllm"), vllm_fixtures)

    def run(i_example):
        i, example = i_example
        checkout = base.parent / f"{base.name}-{i}"
        shutil.copytree(base, checkout, symlinks=True)
        return example.where, rocmci(*example.argv, cwd=checkout, timeout=240)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, enumerate(EXAMPLES)))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_the_example_runs(example, outcomes):
    done = outcomes[example.where]
    shown = shlex.join(["rocmci", *example.argv])
    assert done.returncode == example.code, (
        f"{example.where}: `{shown}` exited {done.returncode}, the docs say {example.code}\n"
        f"stderr: {done.stderr[-2000:]}"
    )
    if example.code == 0:
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
    else:  # a refusal or a findings report, never a traceback
        assert "Traceback (most recent call last)" not in done.stderr + done.stdout


if __name__ == "__main__":  # list what the test would run: python -m tests.functional.test_docs
    for e in EXAMPLES:
        print(e.where, e.code, shlex.join(["rocmci", *e.argv]), file=sys.stdout)
