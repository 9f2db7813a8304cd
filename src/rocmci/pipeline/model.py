"""A Buildkite pipeline as the validator sees it: every step with its path and where it came from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rocmci.findings import Finding
from rocmci.yamldoc import Path_

STEP_KINDS = ("block", "input", "wait", "waiter", "trigger", "group")
KEY_FIELDS = ("key", "id", "identifier")


class StepRef(NamedTuple):
    path: Path_  # path of the step inside the pipeline document
    data: Any
    origin: str | None = None  # source step file:line when the step was generated
    behind_block: bool = False

    @property
    def kind(self) -> str:
        if isinstance(self.data, str):
            return self.data if self.data in STEP_KINDS else "unknown"
        if not isinstance(self.data, dict):
            return "unknown"
        for kind in STEP_KINDS:
            if kind in self.data:
                return "wait" if kind == "waiter" else kind
        if self.data.get("type") in STEP_KINDS:
            return self.data["type"]
        return "command" if self.data else "empty"

    @property
    def key(self) -> str | None:
        if isinstance(self.data, dict):
            for name in KEY_FIELDS:
                if isinstance(self.data.get(name), str):
                    return self.data[name]
        return None

    def depends_on(self) -> list[tuple[Path_, str]]:
        """(path, key) of every dependency named by this step."""
        if not isinstance(self.data, dict):
            return []
        raw = self.data.get("depends_on")
        base = (*self.path, "depends_on")
        if isinstance(raw, str):
            return [(base, raw)]
        out = []
        if isinstance(raw, list):
            for i, item in enumerate(raw):
                if isinstance(item, str):
                    out.append(((*base, i), item))
                elif isinstance(item, dict) and isinstance(item.get("step"), str):
                    out.append(((*base, i, "step"), item["step"]))
        return out


# Report a finding at a path of the pipeline: rule, severity, message.
Reporter = Callable[[Path_, str, str, str], Finding]


def written_commands(step: StepRef) -> list[tuple[Path_, str]]:
    """(path, text) of everything a step of a pipeline file runs: its commands and the runner's env."""
    data = step.data
    if not isinstance(data, dict):
        return []
    out: list[tuple[Path_, str]] = []
    for name in ("command", "commands"):
        value = data.get(name)
        if isinstance(value, str):
            out.append(((*step.path, name), value))
        elif isinstance(value, list):
            out += [((*step.path, name, i), v) for i, v in enumerate(value) if isinstance(v, str)]
    env = data.get("env")
    if isinstance(env, dict):
        for name, value in env.items():
            if isinstance(value, str) and (name == "VLLM_TEST_COMMANDS" or str(name).startswith("VLLM_NODE_COMMAND_")):
                if name != "VLLM_NODE_COMMAND_COUNT":
                    out.append(((*step.path, "env", name), value))
    return out


class Pipeline:
    """A pipeline's data, its steps and how a finding is placed."""

    __slots__ = ("data", "steps", "report", "commands")

    def __init__(
        self,
        data: dict[str, Any],
        steps: list[StepRef],
        report: Reporter,
        commands: Callable[[StepRef], list[tuple[Path_, str]]] = written_commands,
    ) -> None:
        self.data = data  # mapping form; a list-form file is wrapped as {"steps": [...]}
        self.steps = steps
        self.report = report
        # What each step runs, one entry per command; a generated pipeline answers with the step file's own
        # commands, so findings point at the command's line rather than at the joined VLLM_TEST_COMMANDS.
        self.commands = commands

    @property
    def env(self) -> dict[str, Any]:
        env = self.data.get("env")
        return env if isinstance(env, dict) else {}

    @property
    def default_agents(self) -> Any:
        return self.data.get("agents")


def walk_steps(data: dict[str, Any], origin_of: Callable[[Path_, Any], str | None]) -> list[StepRef]:
    """Every step, group members included, in document order."""
    refs: list[StepRef] = []

    def visit(items: Any, base: Path_) -> None:
        if not isinstance(items, list):
            return
        for i, step in enumerate(items):
            ref = StepRef((*base, i), step, origin_of((*base, i), step))
            refs.append(ref)
            if ref.kind == "group" and isinstance(step, dict):
                visit(step.get("steps"), (*base, i, "steps"))

    visit(data.get("steps"), ("steps",))
    block_keys = {r.key for r in refs if r.kind == "block" and r.key}
    return [StepRef(r.path, r.data, r.origin, any(k in block_keys for _, k in r.depends_on())) for r in refs]
