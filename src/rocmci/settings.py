"""One registry of workspace settings and one precedence chain.

built-in default (or the Dockerfile's ARG default) < pyproject [tool.rocmci] < ROCMCI_<NAME> env < flag.
Every resolved value remembers where it came from, so `invoke settings` can show it.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmci.errors import InputError, UsageError

ENV_PREFIX = "ROCMCI_"


@dataclass(frozen=True)
class Setting:
    name: str
    help: str
    kind: type = str
    default: Any = None
    dockerfile_arg: str | None = None  # default lives in the Dockerfile, never here

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()


REGISTRY: tuple[Setting, ...] = (
    Setting("dockerfile", "Dockerfile of the ROCm image, relative to the workspace", default="docker/Dockerfile.rocm"),
    Setting("arch", "GPU archs for rocSHMEM and DeepEP (DEEPEP_ROCM_ARCH)", dockerfile_arg="DEEPEP_ROCM_ARCH"),
    Setting("base_image", "base image of the ROCm build", dockerfile_arg="BASE_IMAGE"),
    Setting("deepep_repo", "DeepEP git repository", dockerfile_arg="DEEPEP_REPO"),
    Setting("deepep_ref", "DeepEP commit", dockerfile_arg="DEEPEP_BRANCH"),
    Setting("deepep_nic", "NIC DeepEP is built for (cx7, thor2, io)", dockerfile_arg="DEEPEP_NIC"),
    Setting("rocshmem_repo", "rocm-systems repository holding rocSHMEM", dockerfile_arg="ROCSHMEM_REPO"),
    Setting("rocshmem_ref", "rocm-systems commit for rocSHMEM", dockerfile_arg="ROCSHMEM_BRANCH"),
    Setting("vllm_repo", "vLLM git repository", dockerfile_arg="VLLM_REPO"),
    Setting("vllm_ref", "vLLM commit", dockerfile_arg="VLLM_BRANCH"),
    Setting("image_repo", "repository part of the image tags rocmci makes", default="rocmci/vllm-rocm"),
    Setting("image", "image to run workloads in (empty: the tag `image.build` makes)", default=""),
    Setting(
        "ci_image",
        "tag the generated pipeline builds and pushes; vLLM's run-amd-test.sh runs tests in it",
        default="rocm/vllm-ci:$BUILDKITE_COMMIT",
    ),
    Setting("source", "vLLM-style step file the pipeline is generated from", default=".buildkite/test-amd.yaml"),
    Setting("inventory", "agent pool inventory", default=".buildkite/agents.yaml"),
    Setting("workarounds", "registry of known workarounds", default="workarounds.yaml"),
    Setting("mirror_hw", "mirror_hardwares value a step must list to be generated", default="amdproduction"),
    Setting("docker", "docker client to use ('auto' picks one that can build with BuildKit)", default="auto"),
    Setting("build_network", "network for image builds ('' for the engine default, 'none' offline)", default=""),
    Setting("run_network", "network of workload containers (vLLM's AMD CI uses host)", default="host"),
    Setting("hf_cache", "host Hugging Face cache mounted into workload containers", default="~/.cache/huggingface"),
    Setting("shm_size", "shared memory size of workload containers", default="16g"),
    Setting("run_memory", "memory limit of workload containers, e.g. 256g ('' for none)", default=""),
    Setting("run_timeout", "seconds a workload may run before it is stopped", kind=int, default=3600),
    Setting("results_dir", "where logs, JUnit XML and reports are written", default="results"),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in REGISTRY}


@dataclass(frozen=True)
class Resolved:
    value: Any
    source: str


@dataclass
class Settings:
    workspace: Path
    values: dict[str, Resolved] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name].value
        except KeyError:
            raise AttributeError(name) from None

    def origin(self, name: str) -> str:
        return self.values[name].source

    def require(self, name: str) -> Any:
        """The value, or a usage error saying how to give it when nothing set it."""
        value = getattr(self, name)
        if value is None:
            setting = BY_NAME[name]
            raise UsageError(
                f"setting {name!r} has no value ({self.origin(name)})",
                hint=f"pass --{name.replace('_', '-')}, set {setting.env_var}, "
                f"or declare ARG {setting.dockerfile_arg}=... in the Dockerfile",
            )
        return value

    def path(self, name: str) -> Path:
        return (self.workspace / os.path.expanduser(str(getattr(self, name)))).resolve()

    def rows(self) -> list[tuple[str, str, str]]:
        return [(s.name, str(self.values[s.name].value), self.values[s.name].source) for s in REGISTRY]


def suggest(name: str, known: list[str] | None = None) -> str:
    choices = known if known is not None else list(BY_NAME)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else "run `invoke settings` to list them"


def _unknown(name: str, where: str) -> UsageError:
    return UsageError(f"unknown setting {name!r} in {where}", hint=suggest(name))


def convert(setting: Setting, raw: Any, where: str) -> Any:
    if setting.kind is int:
        if isinstance(raw, bool):
            raise UsageError(f"setting {setting.name!r} from {where} must be an integer, got {raw!r}")
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise UsageError(f"setting {setting.name!r} from {where} must be an integer, got {raw!r}") from None
    if setting.kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise UsageError(f"setting {setting.name!r} from {where} must be true or false, got {raw!r}")
    if not isinstance(raw, str):
        raise UsageError(f"setting {setting.name!r} from {where} must be a string, got {type(raw).__name__} {raw!r}")
    return raw


def find_workspace(start: Path | None = None) -> Path:
    """The nearest folder upwards whose pyproject.toml has [tool.rocmci]; else the start folder."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "[tool.rocmci]" in candidate.read_text(encoding="utf-8", errors="replace"):
            return folder
    return here


def read_pyproject(workspace: Path) -> dict[str, Any]:
    path = workspace / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"invalid TOML: {exc}", where=str(path)) from None
    section = data.get("tool", {}).get("rocmci", {})
    if not isinstance(section, dict):
        raise InputError("[tool.rocmci] must be a table", where=str(path))
    return section


def resolve(
    workspace: Path | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    pyproject: Mapping[str, Any] | None = None,
) -> Settings:
    """Resolve every setting. `flags` holds only the flags the user gave (None means not given)."""
    workspace = workspace or find_workspace()
    env = os.environ if env is None else env
    pyproject = read_pyproject(workspace) if pyproject is None else pyproject
    flags = {k: v for k, v in (flags or {}).items() if v is not None}

    for name in pyproject:
        if name not in BY_NAME:
            raise _unknown(name, "pyproject.toml [tool.rocmci]")
    for var in env:
        if var.startswith(ENV_PREFIX) and var[len(ENV_PREFIX) :].lower() not in BY_NAME:
            known_vars = [st.env_var for st in REGISTRY]
            raise UsageError(f"unknown setting in environment variable {var}", hint=suggest(var, known_vars))
    for name in flags:
        if name not in BY_NAME:
            raise _unknown(name, "flags")

    settings = Settings(workspace=workspace)

    def layered(setting: Setting, base: Resolved) -> Resolved:
        result = base
        if setting.name in pyproject:
            where = "pyproject.toml [tool.rocmci]"
            result = Resolved(convert(setting, pyproject[setting.name], where), where)
        if setting.env_var in env:
            where = f"env {setting.env_var}"
            result = Resolved(convert(setting, env[setting.env_var], where), where)
        if setting.name in flags:
            where = f"flag --{setting.name.replace('_', '-')}"
            result = Resolved(convert(setting, flags[setting.name], where), where)
        return result

    for setting in REGISTRY:
        if setting.dockerfile_arg is None:
            settings.values[setting.name] = layered(setting, Resolved(setting.default, "default"))

    dockerfile = settings.path("dockerfile")
    rel = os.path.relpath(dockerfile, workspace)
    args = None
    for setting in REGISTRY:
        if setting.dockerfile_arg is None:
            continue
        base = Resolved(None, f"unset: {rel} not found")
        overridden = setting.name in flags or setting.env_var in env or setting.name in pyproject
        if not overridden and dockerfile.is_file():
            if args is None:
                from rocmci.image.dockerfile import arg_defaults

                args = arg_defaults(dockerfile)
            decl = args.get(setting.dockerfile_arg)
            if decl is None:
                base = Resolved(None, f"unset: no ARG {setting.dockerfile_arg}=... in {rel}")
            else:
                base = Resolved(decl.default, f"{rel}:{decl.line} (ARG {decl.name})")
        settings.values[setting.name] = layered(setting, base)
    return settings
