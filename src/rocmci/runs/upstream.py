"""What the DeepEP workloads take from upstream: the step file's DeepEP steps, and what the checkout's
vLLM accepts (its all2all backends, the data-parallel example's flags), read by parsing, never guessed.

The step file's steps are found by what they run (a pytest of test_deepep_moe.py; the DP example with
a DeepEP backend), not by label, so a renamed or moved step is still found. When a file has none, the
seed commands of runs/workloads.py are used and the run says so.
"""

from __future__ import annotations

import ast
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmci.runs import workloads as wl

PARALLEL_CONFIG = "vllm/config/parallel.py"  # where vLLM declares All2AllBackend


@dataclass(frozen=True)
class Found:
    """A command of a step that runs a DeepEP workload, split into words (environment prefix apart)."""

    step_label: str
    origin: str
    working_dir: str
    env: dict[str, str]
    words: tuple[str, ...]


def _words(command: str) -> tuple[dict[str, str], tuple[str, ...]] | None:
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    env = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, tuple(words)


def _commands(step) -> list[str]:
    """The step's commands as the step file lists them (one entry per command)."""
    return [str(c) for c in step.commands if isinstance(c, str)]


def find_moe(src) -> Found | None:
    """The first step whose command runs pytest on the DeepEP MoE test module."""
    for step in src.steps:
        for command in _commands(step):
            parsed = _words(command)
            if parsed and "pytest" in parsed[1][:3] and any(w.endswith(Path(wl.MOE_TEST_FILE).name) for w in parsed[1]):
                return _found(step, src, *parsed)
    return None


def find_dp_example(src) -> Found | None:
    """The first step whose command runs the DP example with a DeepEP all2all backend."""
    for step in src.steps:
        for command in _commands(step):
            parsed = _words(command)
            if not parsed:
                continue
            words = parsed[1]
            runs_example = any(w.endswith((wl.DP_EXAMPLE, wl.DP_EXAMPLE_MOVED)) for w in words)
            if runs_example and any(w.startswith("--all2all-backend=deepep") for w in words):
                return _found(step, src, *parsed)
    return None


def _found(step, src, env: dict[str, str], words: tuple[str, ...]) -> Found:
    from rocmci.pipeline import amdsteps

    workdir = amdsteps.rust_text(step.data.get("working_dir") or amdsteps.DEFAULT_WORKDIR)
    return Found(step.label, step.where.rsplit(":", 1)[0], workdir.rstrip("/") or "/", env, words)


def pytest_target(found: Found) -> tuple[str, tuple[str, ...]]:
    """(the test module relative to the workspace, the step's pytest options) of a MoE step."""
    start = found.words.index("pytest")
    options = list(found.words[start + 1 :])
    module = next(w for w in options if w.endswith(Path(wl.MOE_TEST_FILE).name))
    base = found.working_dir
    full = module if module.startswith("/") else f"{base}/{module}"
    relative = full[len(wl.WORKSPACE) + 1 :] if full.startswith(wl.WORKSPACE + "/") else full
    kept: list[str] = []
    skip_next = False
    for word in options:
        if skip_next:
            skip_next = False
        elif word in wl.KEYWORD_OPTIONS:  # the modes select with -k themselves; a second -k would replace theirs
            skip_next = True
        elif word != module and not word.startswith(("-k", "--keyword=", *wl.JUNIT_OPTIONS)):
            kept.append(word)
    return relative, tuple(kept)


def example_options(words: Sequence[str]) -> dict[str, str]:
    """--model=..., -tp=..., ... of a DP example command, by option name (for defaults)."""
    out = {}
    for word in words:
        if word.startswith("-") and "=" in word:
            name, value = word.split("=", 1)
            out[name] = value
    return out


# --- what the checkout's vLLM accepts ----------------------------------------------------------------


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def backends(vllm_src: Path | None) -> tuple[str, ...] | None:
    """All2AllBackend's Literal values in the checkout's vllm/config/parallel.py; None when not readable."""
    if vllm_src is None:
        return None
    tree = _parse(vllm_src / PARALLEL_CONFIG)
    if tree is None:
        return None
    for node in ast.walk(tree):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        if isinstance(target, ast.Name) and target.id == "All2AllBackend" and node.value is not None:
            values = [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            return tuple(values) or None
    return None


def example_flags(text: str) -> frozenset[str]:
    """The option strings the example's argument parser declares (add_argument("-dp", "--dp-size", ...))."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            out.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return frozenset(out)


def parallel_flags(declared: frozenset[str]) -> tuple[str, str]:
    """(tp flag, dp flag) the example takes: -tp/-dp today; --tp-size/--dp-size in older vLLM examples."""
    tp = "-tp" if "-tp" in declared or not declared else "--tp-size" if "--tp-size" in declared else "-tp"
    dp = "-dp" if "-dp" in declared or not declared else "--dp-size" if "--dp-size" in declared else "-dp"
    return tp, dp
