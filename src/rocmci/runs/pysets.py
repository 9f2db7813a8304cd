"""Evidence read from what runs, not from how it is written down.

`assignments`: where vLLM's test module, the conftest.py files pytest loads for it and the test
helpers they import set an environment variable, found by parsing them as Python. Counted: an
assignment to `os.environ[...]` (or `environ[...]`), `os.environ.setdefault/update`, `os.putenv`,
`<anything>.setenv(...)` (pytest's monkeypatch) and `patch.dict(os.environ, {...})`, with the name
given as text or as a module-level constant. Comments, strings and reads never count.

(Whether a Dockerfile applies a fix is read by rocmci/fixes.py, shared with image builds.)

The work is linear in the size of what is read: the ast module parses in one pass, and no regular
expression runs over file text.
"""

from __future__ import annotations

import ast
from pathlib import Path

MAX_FILES = 64  # the module, its conftest files and the helpers they import: a few in vLLM's tests
MAX_BYTES = 16 * 2**20


class Unreadable(Exception):
    """The test module itself cannot be read or parsed: no evidence either way."""


def _source(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return None
    if len(data) > MAX_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


def _parse(path: Path) -> tuple[ast.Module, str] | None:
    text = _source(path)
    if text is None:
        return None
    try:
        return ast.parse(text, filename=str(path)), text
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "text" bindings, so setenv(NAME, ...) is read as the text it names."""
    out: dict[str, str] = {}
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                out[target.id] = value.value
    return out


def _text(node: ast.AST | None, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    return None


def _is_environ(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    if isinstance(node, ast.Name):
        return node.id == "environ"
    return isinstance(node, ast.Constant) and node.value == "os.environ"  # patch.dict("os.environ", ...)


def _dict_sets(node: ast.AST | None, name: str, consts: dict[str, str]) -> bool:
    return isinstance(node, ast.Dict) and any(_text(k, consts) == name for k in node.keys)


def _sets(node: ast.AST, name: str, consts: dict[str, str]) -> bool:
    """This node assigns the variable `name` in the process environment."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(
            isinstance(t, ast.Subscript) and _is_environ(t.value) and _text(t.slice, consts) == name for t in targets
        )
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    attr, owner, args = node.func.attr, node.func.value, node.args
    first = args[0] if args else None
    if attr in ("setenv", "putenv"):
        return _text(first, consts) == name
    if attr in ("setdefault", "__setitem__") and _is_environ(owner):
        return _text(first, consts) == name
    if attr == "update" and _is_environ(owner):
        return any(k.arg == name for k in node.keywords) or _dict_sets(first, name, consts)
    if attr == "dict" and _is_environ(first):  # unittest.mock.patch.dict(os.environ, {...}, NAME=...)
        return any(k.arg == name for k in node.keywords) or _dict_sets(args[1] if len(args) > 1 else None, name,
                                                                        consts)  # fmt: skip
    return False


def _module_file(root: Path, parts: list[str]) -> Path | None:
    base = root.joinpath(*parts) if parts else root
    for candidate in (base.with_suffix(".py") if parts else None, base / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _imports(tree: ast.Module, path: Path, root: Path) -> list[Path]:
    """Files of the checkout this module imports (absolute from the checkout root, or relative)."""
    out: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _module_file(root, alias.name.split("."))
                if found:
                    out.append(found)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
            else:
                base = root
            parts = node.module.split(".") if node.module else []
            found = _module_file(base, parts)
            if found:
                out.append(found)
            for alias in node.names:  # `from tests.kernels import utils`: a module, not a name
                sub = _module_file(base, [*parts, alias.name])
                if sub:
                    out.append(sub)
    return out


def _conftests(root: Path, module: Path) -> list[Path]:
    """The conftest.py files pytest loads for a module: its folder's and every parent's up to the checkout."""
    out = []
    folder = module.parent
    while True:
        candidate = folder / "conftest.py"
        if candidate.is_file():
            out.append(candidate)
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    return out


def assignments(root: Path, rel: str, name: str) -> list[tuple[str, str]]:
    """(file:line, code) of each place that sets `name`, in the module and what pytest loads with it.

    Only files below the module's top folder (tests/) are followed: vLLM's own package reads its
    environment, and the test side is where a workaround lives. Raises Unreadable for the module itself.
    """
    root = root.resolve()
    module = (root / rel).resolve()
    parsed = _parse(module)
    if parsed is None:
        raise Unreadable("not found" if _source(module) is None else "not valid Python")
    scope = root / _top_folder(rel)
    queue: list[Path] = [module, *_conftests(root, module)]
    seen: set[Path] = set()
    found: list[tuple[str, str]] = []
    while queue and len(seen) < MAX_FILES:
        path = queue.pop(0)
        if path in seen or not (path == module or scope in path.parents):
            continue
        seen.add(path)
        result = parsed if path == module else _parse(path)
        if result is None:
            continue
        tree, text = result
        consts = _constants(tree)
        lines: list[str] | None = None
        for node in ast.walk(tree):
            if _sets(node, name, consts):
                lines = text.splitlines() if lines is None else lines
                shown = lines[node.lineno - 1].strip()
                found.append((f"{path}:{node.lineno}", shown if len(shown) <= 160 else shown[:157] + "..."))
        queue += _imports(tree, path, root)
    return sorted(found, key=lambda item: (0 if item[0].startswith(f"{module}:") else 1, item[0]))


def _top_folder(rel: str) -> str:
    """The top folder of a checkout-relative path: tests/kernels/moe/x.py -> tests."""
    return rel.replace("\\", "/").split("/", 1)[0]
