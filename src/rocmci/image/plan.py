"""Pure planning: a BuildRequest and vLLM's Dockerfile -> the docker build command(s), tags, labels and hashes.

The plan follows vLLM's CI tiers (.buildkite/scripts/rocm/build-ci-base.sh, build-test-image.sh and
docker/docker-bake-rocm.hcl): `ci_base` is built (or reused when its input hash matches, or taken as
given), then `test` is built on top of it through CI_BASE_IMAGE. Nothing here runs Docker, so
`--dry-run` prints exactly what the executor would run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rocmci import arch as archmod
from rocmci import labels as label
from rocmci.errors import UsageError
from rocmci.image import context
from rocmci.image import vllm_dockerfile as vd

TARGETS = ("ci_base", "test", "final")
HASH_VERSION = "rocmci-image-2"
INPUT_HASH_LABEL = label.INPUT_HASH


@dataclass(frozen=True)
class BuildRequest:
    """What the user asked for, resolved from settings and flags (pins as read from vLLM's file)."""

    checkout: Path
    dockerfile: vd.VllmDockerfile
    archs: tuple[str, ...]
    vllm_archs: tuple[str, ...] | None
    pins: dict[str, str]  # label name -> value: the pins as read (or overridden), for labels
    overrides: dict[str, str]  # ARG -> value for pins not taken from vLLM's file (passed as --build-arg)
    image_repo: str
    vllm_commit: str
    target: str = "test"
    tag: str | None = None
    ci_base_image: str | None = None  # an existing ci_base to build `test` on, instead of building one
    network: str | None = None
    push: bool = False
    force: bool = False


@dataclass(frozen=True)
class BuildStep:
    target: str
    tag: str
    dockerfile: Path
    context: Path
    build_args: dict[str, str]
    labels: dict[str, str]
    input_hash: str
    network: str | None
    push: bool
    force: bool

    def argv(self, client: str) -> list[str]:
        argv = [client, "build", "--file", str(self.dockerfile), "--target", self.target, "--tag", self.tag]
        for key, value in self.build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        if self.network:
            argv += ["--network", self.network]
        # Plain progress is parsed to name a failing step and count cached ones.
        argv += ["--progress", "plain", str(self.context)]
        return argv

    def push_argv(self, client: str) -> list[str]:
        return [client, "push", self.tag]


@dataclass(frozen=True)
class BuildPlan:
    steps: tuple[BuildStep, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def tag(self) -> str:
        return self.steps[-1].tag


def image_tag(image_repo: str, target: str, archs: tuple[str, ...], vllm_archs: tuple[str, ...] | None) -> str:
    """A tag that says what is inside, e.g. rocmci/vllm-rocm:test-gfx942-gfx950 (labels hold the rest)."""
    tag = f"{target.replace('_', '-')}-{archmod.slug(archs)}"
    if vllm_archs and vllm_archs != archs:
        tag += f"-vllm-{archmod.slug(vllm_archs)}"
    return f"{image_repo}:{tag[:128]}"


def input_hash(
    df: vd.VllmDockerfile, stages: list[vd.Stage], build_args: dict[str, str], target: str, tree: str, extra: str = ""
) -> str:
    """Everything that decides a stage's image: the instructions built, the args, the files copied."""
    h = hashlib.sha256(f"{HASH_VERSION}\0target={target}\0".encode())
    for decl in df.global_args:
        h.update(f"global:{decl.name}={decl.default}\0".encode())
    for stage in stages:
        h.update(f"stage:{stage.name}:{stage.base}\0".encode())
        for ins in stage.instructions:
            h.update(f"{ins.original}\0".encode())
    for key in sorted(build_args):
        h.update(f"arg:{key}={build_args[key]}\0".encode())
    h.update(f"tree:{tree}\0{extra}".encode())
    return h.hexdigest()[:16]


Digest = Callable[[Path, tuple[str, ...]], str]


def plan_build(request: BuildRequest, digest: Digest = context.digest) -> BuildPlan:
    if request.target not in TARGETS:
        raise UsageError(f"unknown build target {request.target!r}", hint=f"choose one of {', '.join(TARGETS)}")
    archmod.require_deepep_support(request.archs)
    df = request.dockerfile
    for needed in (request.target, "ci_base") if request.target == "test" else (request.target,):
        if df.stage(needed) is None:
            raise UsageError(f"{df.display} has no stage {needed!r}", hint="is --vllm-src a vLLM checkout?")
    common = {vd.ARCH_ARG: archmod.canonical(request.archs), "REMOTE_VLLM": "0", **request.overrides}
    if request.vllm_archs is not None:
        common[vd.VLLM_ARCH_ARG] = archmod.canonical(request.vllm_archs)
    labels = {
        label.ARCH: archmod.canonical(request.archs),
        label.VLLM_ARCH: archmod.canonical(request.vllm_archs) if request.vllm_archs else "",
        **request.pins,
        label.VLLM_COMMIT: request.vllm_commit,
        "org.opencontainers.image.revision": request.vllm_commit,
    }

    def step(target: str, args: dict[str, str], tag: str, extra: str = "", push: bool = False) -> BuildStep:
        stages = df.reachable(target, args)
        tree = digest(request.checkout, context.sources(df, stages, {**df.defaults(), **args}))
        digest_ = input_hash(df, stages, args, target, tree, extra)
        return BuildStep(
            target=target,
            tag=tag,
            dockerfile=df.path,
            context=request.checkout,
            build_args=dict(args),
            labels={**labels, label.TARGET: target, INPUT_HASH_LABEL: digest_},
            input_hash=digest_,
            network=request.network,
            push=push,
            force=request.force,
        )

    final_tag = request.tag or image_tag(request.image_repo, request.target, request.archs, request.vllm_archs)
    if request.target != "test":
        return BuildPlan((step(request.target, common, final_tag, push=request.push),))
    notes: list[str] = []
    steps: list[BuildStep] = []
    if request.ci_base_image:
        base_ref, base_identity = request.ci_base_image, f"given:{request.ci_base_image}"
        notes.append(f"test is built on the given ci_base {base_ref}; ci_base is not built")
    else:
        base_tag = image_tag(request.image_repo, "ci_base", request.archs, request.vllm_archs)
        base = step("ci_base", common, base_tag)
        steps.append(base)
        base_ref, base_identity = base_tag, f"built:{base.input_hash}"
        notes.append(f"ci_base {base_tag} is reused when its {INPUT_HASH_LABEL} label matches {base.input_hash}")
    test = step("test", {**common, "CI_BASE_IMAGE": base_ref}, final_tag, extra=base_identity, push=request.push)
    steps.append(
        BuildStep(**{**test.__dict__, "labels": {**test.labels, label.CI_BASE_IMAGE: base_ref}})
    )
    return BuildPlan(tuple(steps), tuple(notes))
