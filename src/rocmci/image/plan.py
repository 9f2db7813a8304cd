"""Pure planning: settings and flags -> BuildPlan. No Docker here, so every decision is unit-testable."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from rocmci import arch as archmod
from rocmci.errors import UsageError

TARGETS = ("final", "rocshmem", "deepep", "vllm-build", "vllm-source")
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class BuildRequest:
    """What the user asked for, already resolved from settings and flags."""

    dockerfile: Path
    context: Path
    archs: tuple[str, ...]
    build_args: dict[str, str]  # pins as resolved (DEEPEP_BRANCH, ROCSHMEM_BRANCH, BASE_IMAGE, ...)
    image_repo: str
    tag: str | None = None
    target: str = "final"
    vllm_archs: tuple[str, ...] | None = None
    vllm_src: Path | None = None
    vllm_src_revision: str | None = None  # identifies a local checkout in the input hash
    network: str | None = None
    push: bool = False
    force: bool = False


@dataclass(frozen=True)
class BuildPlan:
    dockerfile: Path
    context: Path
    tag: str
    target: str
    build_args: dict[str, str]
    input_hash: str
    push: bool
    force: bool
    network: str | None
    labels_expected: dict[str, str] = field(default_factory=dict)

    def argv(self, client: str) -> list[str]:
        argv = [client, "build", "--file", str(self.dockerfile), "--target", self.target, "--tag", self.tag]
        for key, value in self.build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        if self.network:
            argv += ["--network", self.network]
        # Plain progress is parsed to name a failing step; the terminal view is drawn from it.
        argv += ["--progress", "plain", str(self.context)]
        return argv

    def push_argv(self, client: str) -> list[str]:
        return [client, "push", self.tag]


def image_tag(image_repo: str, deepep_ref: str, archs: tuple[str, ...], vllm_archs: tuple[str, ...] | None) -> str:
    """A tag that says what is inside, e.g. rocmci/vllm-rocm:deepep-5d90af8b-gfx942-gfx950."""
    ref = _TAG_UNSAFE.sub("-", deepep_ref)[:12]
    tag = f"deepep-{ref}-{archmod.slug(archs)}"
    if vllm_archs and vllm_archs != archs:
        tag += f"-vllm-{archmod.slug(vllm_archs)}"
    return f"{image_repo}:{tag[:128]}"


def input_hash(dockerfile_text: str, build_args: dict[str, str], target: str, extra: str = "") -> str:
    """Hash of everything that decides the image; equal hashes mean a rebuild would change nothing."""
    h = hashlib.sha256()
    h.update(dockerfile_text.encode())
    for key in sorted(build_args):
        if key != "ROCMCI_INPUT_HASH":
            h.update(f"\0{key}={build_args[key]}".encode())
    h.update(f"\0target={target}\0{extra}".encode())
    return h.hexdigest()[:16]


def plan_build(request: BuildRequest, dockerfile_text: str) -> BuildPlan:
    archmod.require_deepep_support(request.archs)
    if request.target not in TARGETS:
        raise UsageError(f"unknown build target {request.target!r}", hint=f"choose one of {', '.join(TARGETS)}")
    args = dict(request.build_args)
    args["DEEPEP_ROCM_ARCH"] = archmod.canonical(request.archs)
    if request.vllm_archs is not None:
        missing = [a for a in request.archs if a not in request.vllm_archs]
        if missing:
            raise UsageError(
                f"vLLM arch list {archmod.canonical(request.vllm_archs)!r} lacks "
                f"{', '.join(missing)}, which DeepEP is built for",
                hint="vLLM must cover every DeepEP arch; add them or drop --vllm-arch",
            )
        args["VLLM_PYTORCH_ROCM_ARCH"] = archmod.canonical(request.vllm_archs)
    if request.vllm_src is not None:
        args["VLLM_SOURCE"] = "local"
    digest = input_hash(dockerfile_text, args, request.target, request.vllm_src_revision or "")
    args["ROCMCI_INPUT_HASH"] = digest
    tag = request.tag or image_tag(
        request.image_repo, args.get("DEEPEP_BRANCH", "unknown"), request.archs, request.vllm_archs
    )
    return BuildPlan(
        dockerfile=request.dockerfile,
        context=request.vllm_src or request.context,
        tag=tag,
        target=request.target,
        build_args=args,
        input_hash=digest,
        push=request.push,
        force=request.force,
        network=request.network,
        labels_expected={"rocmci.arch": args["DEEPEP_ROCM_ARCH"], "rocmci.input-hash": digest},
    )
