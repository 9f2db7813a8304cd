"""Steps + context -> Buildkite pipeline, with the semantics of vLLM's AMD template (test-template-amd.j2).

Pure: the same source and options always give the same pipeline, key for key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocmci import arch as archmod
from rocmci.pipeline.source import SourceFile, SourceStep

IMAGE_STEP_KEY = "image-build-amd"
BUILD_QUEUE = "amd-cpu"
MAX_TIMEOUT = 180
DEFAULT_WORKDIR = "/vllm-workspace/tests"
RUNNER = "bash .buildkite/scripts/hardware_ci/run-amd-test.sh"
ORIGIN_ENV = "AMD_CI_STEP_SOURCE"  # lets a later validation of the file point back at the step file
# A change to any of these can affect every test: run them all.
RUN_ALL_PATTERNS = (
    re.compile(r"^docker/Dockerfile\.rocm"),
    re.compile(r"^setup\.py$"),
    re.compile(r"^CMakeLists\.txt$"),
    re.compile(r"^csrc/"),
    re.compile(r"^cmake/"),
    re.compile(r"^requirements/rocm.*\.txt$"),
)
AUTOMATIC_RETRY = (
    {"signal_reason": "stack_error", "limit": 1},
    {"signal_reason": "agent_stop", "limit": 1},
    {"signal_reason": "agent_refused", "limit": 1},
    {"exit_status": -1, "limit": 1},
    {"exit_status": 134, "limit": 1},  # GPU hang: SIGABRT from the HIP runtime
)


@dataclass(frozen=True)
class Options:
    mirror_hw: str = "amdproduction"
    changed_files: tuple[str, ...] | None = None  # None: not known, dependencies do not block
    run_all: bool = False
    nightly: bool = False
    archs: tuple[str, ...] = ("gfx942", "gfx950")
    image: str = "rocm/vllm-ci:$BUILDKITE_COMMIT"  # $BUILDKITE_COMMIT is filled in at upload time
    # pool -> queue where the inventory says so (e.g. amd-cpu); otherwise vLLM's amd_<pool>
    queues: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    step: SourceStep
    action: str  # "run", "block" or "skip"
    reason: str


@dataclass
class Generated:
    pipeline: dict[str, Any]
    origins: list[SourceStep | None] = field(default_factory=list)  # per entry of pipeline["steps"]
    decisions: list[Decision] = field(default_factory=list)


def slugify(text: str, limit: int = 90) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "step"


def run_all_trigger(changed: Iterable[str]) -> str | None:
    for path in changed:
        if any(p.search(path) for p in RUN_ALL_PATTERNS):
            return path
    return None


def decide(step: SourceStep, opts: Options, forced: str | None) -> Decision:
    mirrors = step.data.get("mirror_hardwares", [])
    if opts.mirror_hw and opts.mirror_hw not in mirrors:
        return Decision(step, "skip", f"mirror_hardwares lacks {opts.mirror_hw}")
    if opts.nightly:
        return Decision(step, "run", "nightly run")
    if step.data.get("optional"):
        return Decision(step, "block", "optional step (runs unblocked only at night)")
    if opts.run_all:
        return Decision(step, "run", "--run-all")
    if forced:
        return Decision(step, "run", f"{forced} changed: runs everything")
    deps = step.data.get("source_file_dependencies") or []
    if not deps:
        return Decision(step, "run", "no source_file_dependencies: always runs")
    if opts.changed_files is None:
        return Decision(step, "run", "changed files unknown")
    for path in opts.changed_files:
        for dep in deps:
            if path.startswith(dep):
                return Decision(step, "run", f"{path} matches {dep}")
    return Decision(step, "block", "no changed file matches its source_file_dependencies")


def image_step(archs: tuple[str, ...], image: str) -> dict[str, Any]:
    listing = ",".join(archs)  # ',' needs no shell quoting, unlike ';'
    return {
        "label": f":docker: Build ROCm image ({archmod.canonical(archs)})",
        "key": IMAGE_STEP_KEY,
        "agents": {"queue": BUILD_QUEUE},
        "command": f"invoke image.build --arch {listing} --tag {image} --push",
        "env": {"DOCKER_BUILDKIT": "1"},
        "timeout_in_minutes": MAX_TIMEOUT,
        "retry": {"automatic": [dict(r) for r in AUTOMATIC_RETRY]},
    }


def test_step(step: SourceStep, key: str, queue: str, source_name: str, line: int) -> dict[str, Any]:
    data = step.data
    workdir = data.get("working_dir") or DEFAULT_WORKDIR
    commands = " && ".join([f"cd {workdir}", *step.commands])
    gpus = 0 if data.get("no_gpu") else data.get("num_gpus") or 1
    env = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
    env.update(
        {
            "VLLM_TEST_COMMANDS": commands,
            "VLLM_CI_EXPECTED_GPU_COUNT": str(gpus),
            ORIGIN_ENV: f"{source_name}:{line}",
        }
    )
    out: dict[str, Any] = {
        "label": f"{step.pool}: {step.label}",
        "key": key,
        "depends_on": [IMAGE_STEP_KEY],
        "agents": {"queue": queue},
        "command": RUNNER,
        "env": env,
        "timeout_in_minutes": min(data.get("timeout_in_minutes") or MAX_TIMEOUT, MAX_TIMEOUT),
        "soft_fail": True,
        "priority": 100,
        "retry": {"automatic": [dict(r) for r in AUTOMATIC_RETRY]},
    }
    if data.get("parallelism"):
        out["parallelism"] = data["parallelism"]
    return out


def generate(source: SourceFile, opts: Options) -> Generated:
    forced = None if opts.changed_files is None else run_all_trigger(opts.changed_files)
    result = Generated(pipeline={"steps": [image_step(opts.archs, opts.image)]}, origins=[None])
    steps = result.pipeline["steps"]
    used: set[str] = {IMAGE_STEP_KEY}
    for step in source.steps:
        decision = decide(step, opts, forced)
        result.decisions.append(decision)
        if decision.action == "skip":
            continue
        key = slugify(f"{step.pool}-{step.label}")
        base, n = key, 2
        while key in used or f"block-{key}" in used:
            key, n = f"{base}-{n}", n + 1
        used.add(key)
        line = source.doc.pos(("steps", step.index)).line
        queue = opts.queues.get(step.pool, f"amd_{step.pool}")
        generated = test_step(step, key, queue, source.filename, line)
        if decision.action == "block":
            block_key = f"block-{key}"
            used.add(block_key)
            steps.append({"block": f"Run {step.pool}: {step.label}", "key": block_key, "depends_on": []})
            result.origins.append(step)
            generated["depends_on"] = [IMAGE_STEP_KEY, block_key]
        steps.append(generated)
        result.origins.append(step)
    return result
