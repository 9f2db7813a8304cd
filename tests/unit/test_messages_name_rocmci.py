"""Messages name the command that works where the user is: `rocmci …` (issue 34, item 2).

In a vLLM checkout `invoke image.check` fails ("Can't find any collection named 'tasks'!"); `rocmci` works
there and in this repository. Every string rocmci can print (string literals, f-string parts, task help,
packaged data) is scanned for a command spelled `invoke TASK` or `inv TASK`.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.conftest import REPO

SRC = REPO / "src" / "rocmci"
# `invoke image.check`, `invoke --list`, `inv settings`: invoke or inv followed by a task or a flag.
COMMAND = re.compile(r"(?<![\w-])inv(?:oke)? +(?:--?[a-z]|[a-z][\w-]*(?:\.[\w-]+)?\b(?! (?:would|is|has)\b))")
TASKS = {"version", "settings", "doctor", "workarounds"}  # top-level task names that are also plain words


def _docstring_nodes(tree: ast.AST) -> set[int]:
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                # a task's docstring is its help text: users read it; other docstrings are for engineers
                is_task = isinstance(node, ast.FunctionDef) and any(
                    "task" in ast.unparse(d) for d in node.decorator_list
                )
                if not is_task:
                    docs.add(id(first.value))
    return docs


def says_invoke(text: str) -> list[str]:
    """The `invoke TASK` commands a text tells the user to type."""
    found = []
    for m in COMMAND.finditer(text):
        word = m.group(0).split()[-1]
        if "." in word or word.startswith("-") or word in TASKS or "`" in text[max(0, m.start() - 1) : m.start()]:
            found.append(m.group(0))
    return found


def user_facing_strings() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal under src/rocmci that is not an engineer's docstring."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                out.append((str(path.relative_to(REPO)), node.lineno, node.value))
    for path in sorted(p for p in (SRC / "data").rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            out.append((str(path.relative_to(REPO)), number, line))
    return out


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("build it with `invoke image.build`", True),
        ("run `invoke settings` to list them", True),
        ("see invoke --list", True),
        ("`inv workarounds`", True),
        ("build it with `rocmci image.build`", False),
        ("invoke would give every flag a short flag", False),
        ("rocmci: -e is invoke's --echo, an option rocmci does not have", False),
    ],
)
def test_the_scan_tells_a_command_from_a_mention(text, hit):
    assert bool(says_invoke(text)) is hit


def test_no_message_tells_the_user_to_type_invoke():
    strings = user_facing_strings()
    assert len(strings) > 1000  # the scan read the package
    offenders = [f"{f}:{n}: {says_invoke(t)}" for f, n, t in strings if says_invoke(t)]
    assert offenders == [], "messages must name `rocmci TASK` (it works in a vLLM checkout and here):\n" + "\n".join(
        offenders
    )
