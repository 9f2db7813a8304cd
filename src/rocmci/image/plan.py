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
from rocmci.errors import PreflightError, UsageError
from rocmci.image import base, context
from rocmci.image import vllm_dockerfile as vd
from rocmci.image.evidence import DeepEPCheck
from rocmci.image_names import image_tag

TARGETS = ("base", "ci_base", "test", "final")
# Stages whose build gets the DeepEP arch list: a target reaching neither builds no DeepEP, so the list
# is neither a label nor a reason to refuse (vLLM's `final` stage, say).
DEEPEP_STAGES = (vd.ROCSHMEM_STAGE, vd.DEEPEP_STAGE)
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
    vllm_dirty: bool | None = None  # local changes in the checkout: its own label, never a "-dirty" commit
    tag: str | None = None
    ci_base_image: str | None = None  # an existing ci_base to build `test` on, instead of building one
    network: str | None = None
    push: bool = False
    force: bool = False
    base: BaseFacts | None = None  # what BASE_IMAGE is now (None: not resolved, a dry run without engine)
    extra_args: dict[str, str] = field(default_factory=dict)  # --build-arg NAME=VALUE, checked in requests
    load: bool = False  # a buildx builder other than the docker driver: --load into the local store
    ci_base_digest: str | None = None  # what the given --ci-base is now, so a moved tag is a new input
    # The labels of the given (or reused) ci_base: what the test image holds is what that image holds.
    ci_base_labels: dict[str, str] | None = None
    ci_base_reused: str | None = None  # why the ci_base is not built: vLLM CI's ci_base under the same content hash
    ci_base_meta: dict[str, str] = field(default_factory=dict)  # vllm.ci_base.* / vllm.rocm.* labels, as the bake
    # vLLM CI's published ci_base for CI's arch list, rebuilt for the requested one by image/retarget.py's overlay
    # (rocSHMEM and DeepEP only): planned there (pure), found by the service; `test` is built on its result.
    retarget: BuildStep | None = None
    chain: Chain | None = None  # how a tier reaches the next one's FROM (None: the local image store)
    # Fixes (owner/repo#N) an instruction of the checkout's Dockerfile.rocm_base applies, among those the
    # workaround registry names: recorded on every tier built from the checkout, as evidence for the registry.
    rocm_fixes: tuple[str, ...] = ()
    # Setting extra_labels: on every image built, never part of an input hash (a test run finds its images by it).
    extra_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BaseFacts:
    """BASE_IMAGE as found on the engine, and the base tier the checkout describes (docker/Dockerfile.rocm_base).

    Gathered by the service (engine answers); planning only decides with them.
    """

    image: str  # the setting as given, e.g. rocm/vllm-dev:base
    digest: str | None  # immutable identity: registry digest or local image ID; None when not on the engine
    pinnable: bool  # digest is a registry digest, so image@digest is a reference BuildKit can pull
    content_hash: str | None  # its vllm.rocm_base.content_hash label: which Dockerfile.rocm_base made it
    tier: base.BaseTier | None = None  # None: the checkout has no Dockerfile.rocm_base
    tag_only: bool = False  # a dry run that could not resolve the digest: plan on the tag, and say so
    files_hash: str | None = None  # its vllm.rocm_base.content_files_hash label: the Dockerfile.rocm_base text


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
    stage: str | None = ""  # the --target given to docker; "" means `target`, None means none (the last stage)
    load: bool = False
    deepep_check: DeepEPCheck | None = None  # the image holds DeepEP: its code objects are checked once built
    contexts: dict[str, str] = field(default_factory=dict)  # --build-context NAME=SOURCE (a tier not in the store)
    output: str | None = None  # --output: the tier goes to an OCI layout for the next tier, not to the store

    def argv(self, client: str) -> list[str]:
        argv = [client, "build", "--file", str(self.dockerfile)]
        stage = self.target if self.stage == "" else self.stage
        if stage is not None:
            argv += ["--target", stage]
        argv += ["--tag", self.tag]
        for key, value in self.build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        for name, source in self.contexts.items():
            argv += ["--build-context", f"{name}={source}"]
        if self.network:
            argv += ["--network", self.network]
        if self.output:
            argv += ["--output", self.output]
        elif self.load:
            argv.append("--load")  # a container builder keeps results in its own cache without it
        # Plain progress is parsed to name a failing step and count cached ones.
        argv += ["--progress", "plain", str(self.context)]
        return argv

    def push_argv(self, client: str) -> list[str]:
        return [client, "push", self.tag]


STORE, REGISTRY, CONTEXT = "store", "registry", "context"


@dataclass(frozen=True)
class Chain:
    """How one tier reaches the next tier's FROM, per builder (vLLM's bake does it with `contexts` in one bake).

    store: the docker driver (or the classic builder) reads the local image store, so a tier's tag is enough.
    registry: a docker-container or remote builder cannot read the local store; each tier is pushed to the
        registry the user named (image_cache_registry) and the next tier starts FROM it there.
    context: no registry named: a tier is written as an OCI layout (--output type=oci) and handed to the next
        as a named build context (--build-context NAME=oci-layout://...).
    """

    kind: str
    builder: str = ""  # "name (driver)", for messages
    registry: str = ""  # image_cache_registry, for REGISTRY
    layouts: Path | None = None  # where OCI layouts go, for CONTEXT

    def describe(self) -> str:
        if self.kind == REGISTRY:
            return f"each tier is pushed to {self.registry} and the next starts FROM it there"
        if self.kind == CONTEXT:
            return (f"each tier is written as an OCI layout under {self.layouts} and handed to the next as a named "
                    "build context (--build-context NAME=oci-layout://...); set image_cache_registry to chain "
                    "through a registry instead")  # fmt: skip
        return "each tier is in the local image store, and the next starts FROM its tag"


def chain_for(driver: str | None, name: str, registry: str, layouts: Path, forced: str = "auto") -> Chain:
    """The docker driver (or no buildx: the engine's own builder) reads the store; any other driver does not.

    `forced` (the tier_chain setting): a kind chosen by the user instead; registry needs image_cache_registry.
    """
    shown = f"{name} ({driver})" if driver else "the engine's builder"
    if forced == REGISTRY:
        if not registry:
            raise UsageError("tier_chain is 'registry' but image_cache_registry is empty",
                             hint="set ROCMCI_IMAGE_CACHE_REGISTRY to a registry repository, e.g. "
                             "localhost:5000/rocmci-tiers")  # fmt: skip
        return Chain(REGISTRY, shown, registry=registry)
    if forced in (STORE, CONTEXT):
        return Chain(forced, shown, layouts=layouts if forced == CONTEXT else None)
    if driver in (None, "docker"):
        return Chain(STORE, f"{name} ({driver})" if driver else "the engine's builder")
    if registry:
        return Chain(REGISTRY, f"{name} ({driver})", registry=registry)
    return Chain(CONTEXT, f"{name} ({driver})", layouts=layouts)


def tier_chain(s, builder: tuple[str, str] | None) -> Chain:
    """The chain for settings `s` on `builder` (name, driver; None: no buildx), for image.build and doctor alike."""
    name, driver = builder if builder else ("", None)
    return chain_for(driver, name, s.image_cache_registry, s.path("results_dir") / "tiers", s.tier_chain)


def chained(step: BuildStep, chain: Chain | None, name: str) -> tuple[BuildStep, str, dict[str, str]]:
    """The step as the chain builds it, the reference the next tier starts FROM, and the contexts it needs."""
    from dataclasses import replace

    if chain is None or chain.kind == STORE:
        return step, step.tag, {}
    if chain.kind == REGISTRY:
        ref = f"{chain.registry}:{step.tag.rsplit(':', 1)[1]}"
        return replace(step, tag=ref, push=True), ref, {}  # --load as the builder needs it (request.load)
    assert chain.layouts is not None
    layout = chain.layouts / name
    # Not in the store: no reuse by label and no code-object check here (the last tier, loaded, is checked).
    out = replace(step, output=f"type=oci,dest={layout},tar=false", load=False, deepep_check=None, force=True)
    return out, f"rocmci-tier-{name}", {f"rocmci-tier-{name}": f"oci-layout://{layout}"}


@dataclass(frozen=True)
class BuildPlan:
    steps: tuple[BuildStep, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)  # shown by a dry run
    notices: tuple[str, ...] = field(default_factory=tuple)  # shown by every run: why a tier is (not) built

    @property
    def tag(self) -> str:
        return self.steps[-1].tag


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


def builds_deepep(df: vd.VllmDockerfile, target: str, args: dict[str, str]) -> bool:
    """Whether `--target target` builds rocSHMEM or DeepEP, so that the DeepEP arch list matters to it."""
    return any(s.name in DEEPEP_STAGES for s in df.reachable(target, args))


MUTABLE_HINT = (
    "rocmci keys reuse on content, as vLLM's ci-bake-rocm.sh does (\"Refusing to compute content-addressed "
    "cache keys from a mutable tag\"): pull it first (--pull), or pin it as NAME@sha256:..."
)


def fixes_label(request: BuildRequest) -> dict[str, str]:
    """The ROCm fixes label, or nothing when the checkout applies none (an absent label claims nothing)."""
    return {label.ROCM_FIXES: ",".join(request.rocm_fixes)} if request.rocm_fixes else {}


def _base_identity(facts: BaseFacts | None) -> tuple[str, str, dict[str, str]]:
    """(BASE_IMAGE build arg, its identity for input hashes, labels) when BASE_IMAGE itself is used."""
    if facts is None:
        return "", "base:unresolved", {}
    if facts.digest is None and facts.tag_only:
        return facts.image, f"base:tag:{facts.image}", {}
    if facts.digest is None:
        raise PreflightError(
            f"BASE_IMAGE {facts.image} is not on this engine, so its tag is all rocmci knows: a tag can move, "
            "and an input hash on it could reuse an image built on another base",
            hint=MUTABLE_HINT,
        )
    ref = base.pinned(facts.image, facts.digest, facts.pinnable)
    return ref, f"base:{facts.digest}", {label.BASE_IMAGE_DIGEST: facts.digest}


def base_step(request: BuildRequest, tier: base.BaseTier, tag: str | None = None, tag_only: bool = False) -> BuildStep:
    """Dockerfile.rocm_base built as refresh-base-image.sh builds it: the last stage, BASE_IMAGE digest-pinned.

    `tag_only`: a dry run that could not learn the upstream's digest plans on its tag and says the hash is unknown.
    """
    unresolved = tag_only and (tier.upstream_digest is None or tier.content_hash is None)
    if unresolved:  # shown, never built: the tag and hash say what is missing
        unknown = "unknown-without-the-upstream-digest"
        tier = base.BaseTier(tier.path, tier.upstream, unknown, False, unknown, tier.files_hash, tier.args)
    if tier.upstream_digest is None or tier.content_hash is None:
        raise PreflightError(
            f"the base tier's BASE_IMAGE {tier.upstream} ({base.BASE_DOCKERFILE}) is not on this engine; "
            "its content hash needs the image's digest",
            hint=MUTABLE_HINT,
        )
    ref = base.pinned(tier.upstream, tier.upstream_digest, tier.upstream_pinnable)
    digest_ = tier.content_hash[:16]
    labels = {
        "org.opencontainers.image.revision": request.vllm_commit,
        "vllm.rocm_base.metadata_version": base.METADATA_VERSION,
        base.CONTENT_HASH_LABEL: tier.content_hash,
        base.FILES_HASH_LABEL: tier.files_hash,
        "vllm.rocm_base.dockerfile": str(base.BASE_DOCKERFILE),
        "vllm.rocm_base.git_commit": request.vllm_commit,
        **({} if request.vllm_dirty is None else {label.VLLM_DIRTY: str(request.vllm_dirty).lower()}),
        "vllm.rocm_base.base_image": tier.upstream,
        "vllm.rocm_base.base_image_digest": tier.upstream_digest,
        "vllm.rocm_base.pytorch_rocm_arch": tier.args.get("PYTORCH_ROCM_ARCH", ""),
        **fixes_label(request),
        **request.extra_labels,
        label.TARGET: "base",
        INPUT_HASH_LABEL: digest_,
    }
    return BuildStep(
        target="base",
        tag=tag or f"{request.image_repo}:base-" + (f"files-{tier.files_hash[:12]}" if unresolved
                                                       else tier.content_hash[:12]),
        dockerfile=tier.path,
        context=request.checkout,
        build_args={"BASE_IMAGE": ref, "USE_SCCACHE": base.USE_SCCACHE},
        labels=labels,
        input_hash=digest_,
        network=request.network,
        push=request.push and tag is not None,
        force=request.force,
        stage=None,  # refresh-base-image.sh builds the file's last stage
        load=request.load,
    )


def plan_build(request: BuildRequest, digest: Digest = context.digest) -> BuildPlan:
    if request.target not in TARGETS:
        raise UsageError(f"unknown build target {request.target!r}", hint=f"choose one of {', '.join(TARGETS)}")
    facts = request.base
    if request.target == "base":
        if facts is None or facts.tier is None:
            raise UsageError(f"{request.checkout} holds no {base.BASE_DOCKERFILE}", hint="--target base builds it")
        return BuildPlan((base_step(request, facts.tier, request.tag, facts.tag_only),))
    df = request.dockerfile
    for needed in (request.target, "ci_base") if request.target == "test" else (request.target,):
        if df.stage(needed) is None:
            raise UsageError(f"{df.display} has no stage {needed!r}", hint="is --vllm-src a vLLM checkout?")
    deepep = builds_deepep(df, request.target, {"REMOTE_VLLM": "0"}) or request.target == "test"
    if deepep:
        archmod.require_deepep_support(request.archs)
    notes: list[str] = []
    notices: list[str] = []
    steps: list[BuildStep] = []
    carried: dict[str, str] = {}  # named contexts every later tier needs (a base tier not in the store)
    tier = facts.tier if facts else None
    if tier and tier.content_hash and facts and facts.content_hash and facts.content_hash != tier.content_hash:
        # refresh-base-image.sh's trigger, by content: BASE_IMAGE was built from another Dockerfile.rocm_base.
        first, base_ref, carried = chained(base_step(request, tier), request.chain, "base")
        steps.append(first)
        base_identity, base_labels = f"base:built:{tier.content_hash}", {}
        fixes = fixes_label(request)
        notices.append(
            f"BASE_IMAGE {facts.image} was built from another {base.BASE_DOCKERFILE} ({base.CONTENT_HASH_LABEL} "
            f"{facts.content_hash[:12]}, the checkout's is {tier.content_hash[:12]}): the base tier is built "
            f"first as {first.tag}, then ci_base on it"
        )
    else:
        base_ref, base_identity, base_labels = _base_identity(facts)
        # The checkout's fixes are claimed only for a base known to come from its Dockerfile.rocm_base;
        # on any other base the label is left to inheritance from the base image itself (FROM keeps labels).
        same = bool(tier and tier.content_hash and facts and facts.content_hash == tier.content_hash)
        fixes = fixes_label(request) if same else {}
        if tier and facts and tier.content_hash is None and facts.content_hash:
            # The upstream's digest is part of the content hash: without it, only the file's own hash can tell.
            changed = facts.files_hash is not None and facts.files_hash != tier.files_hash
            notices.append(
                f"{base.BASE_DOCKERFILE} "
                + ("differs from the one BASE_IMAGE " + facts.image + " was built from (" + base.FILES_HASH_LABEL
                   + "), but" if changed else "may differ from BASE_IMAGE " + facts.image + "'s:")
                + f" the base tier's own BASE_IMAGE {tier.upstream} is not on this engine, so its content hash "
                "cannot be computed and the base tier is not rebuilt; --pull reads its digest from the registry "
                "and rebuilds the base tier when it changed"
            )  # fmt: skip
        if tier and facts and facts.content_hash is None and facts.digest:
            notices.append(
                f"BASE_IMAGE {facts.image} carries no {base.CONTENT_HASH_LABEL} label, so whether it matches "
                f"{base.BASE_DOCKERFILE} is unknown; `--target base` builds the base from that file"
            )
    common = {"REMOTE_VLLM": "0", **request.overrides}
    if base_ref:
        common["BASE_IMAGE"] = base_ref
    if deepep:
        common[vd.ARCH_ARG] = archmod.canonical(request.archs)
    if request.vllm_archs is not None:
        common[vd.VLLM_ARCH_ARG] = archmod.canonical(request.vllm_archs)
    common.update(request.extra_args)
    labels = {
        **({label.ARCH: archmod.canonical(request.archs)} if deepep else {}),
        label.VLLM_ARCH: archmod.canonical(request.vllm_archs) if request.vllm_archs else "",
        **request.pins,
        **base_labels,
        **fixes,
        **request.extra_labels,
        label.VLLM_COMMIT: request.vllm_commit,
        "org.opencontainers.image.revision": request.vllm_commit,
        **({} if request.vllm_dirty is None else {label.VLLM_DIRTY: str(request.vllm_dirty).lower()}),
    }

    listing = archmod.canonical(request.archs)
    in_file = f"stage {vd.DEEPEP_STAGE} of {df.display}"
    rocshmem_in_file = f"stage {vd.ROCSHMEM_STAGE} of {df.display}"

    def step(
        target: str, args: dict[str, str], tag: str, extra: str = "", push: bool = False,
        inherited: DeepEPCheck | None = None,
    ) -> BuildStep:
        stages = df.reachable(target, args)
        tree = digest(request.checkout, context.sources(df, stages, {**df.defaults(), **args}))
        digest_ = input_hash(df, stages, args, target, tree, f"{base_identity}\0{extra}")
        # Evidence for every tier that holds DeepEP: built in this step (its stage is reached), or inherited.
        builds = deepep and any(s.name == vd.DEEPEP_STAGE for s in stages)
        check = DeepEPCheck(listing, in_file, rocshmem_stage=rocshmem_in_file) if builds else inherited
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
            load=request.load,
            deepep_check=check,
            contexts=dict(carried),
        )

    final_tag = request.tag or image_tag(request.image_repo, request.target, request.archs, request.vllm_archs)
    if not deepep:
        final_tag = request.tag or f"{request.image_repo}:{request.target.replace('_', '-')}"
    if request.target != "test":
        only = step(request.target, common, final_tag, push=request.push)
        if request.target == "ci_base":
            only = BuildStep(**{**only.__dict__, "labels": {**request.ci_base_meta, **only.labels}})
        steps.append(only)
        return BuildPlan(tuple(steps), tuple(notes), tuple(notices))
    if request.retarget is not None:
        base_ref, ci_identity, inherited = _on_retarget(request, labels, listing, steps, notices)
    elif request.ci_base_image:
        base_ref = request.ci_base_image
        ci_identity = f"given:{request.ci_base_digest or request.ci_base_image}"
        if request.ci_base_reused:
            notes.append(f"test is built on {base_ref}: {request.ci_base_reused}; ci_base is not built")
            fix = "rebuild with --force after removing that image, or pass --ci-base with a ci_base built for it"
        else:
            notes.append(f"test is built on the given ci_base {base_ref}; ci_base is not built")
            fix = f"give a --ci-base whose DeepEP is built for {listing}, or leave --ci-base out"
        how = "reused" if request.ci_base_reused else "given"
        inherited = DeepEPCheck(listing, f"the {how} ci_base {base_ref}", fix)
        # Labelled from what that image holds: the checkout's pins and the requested list would be claims.
        for key, _ in label.HELD:
            labels.pop(key, None)
        labels.update(label.held(request.ci_base_labels or {}))
    else:
        ci_tag = image_tag(request.image_repo, "ci_base", request.archs, request.vllm_archs)
        ci = step("ci_base", common, ci_tag)
        ci = BuildStep(**{**ci.__dict__, "labels": {**request.ci_base_meta, **ci.labels}})
        ci, base_ref, contexts = chained(ci, request.chain, "ci_base")
        carried.update(contexts)
        steps.append(ci)
        ci_tag, ci_identity = ci.tag, f"built:{ci.input_hash}"
        notes.append(f"ci_base {ci_tag} is reused when its {INPUT_HASH_LABEL} label matches {ci.input_hash}")
        inherited = DeepEPCheck(listing, f"{in_file}, in ci_base {ci_tag}",
                                rocshmem_stage=f"{rocshmem_in_file}, in ci_base {ci_tag}")
    test = step("test", {**common, "CI_BASE_IMAGE": base_ref}, final_tag, extra=ci_identity, push=request.push,
                inherited=inherited)  # fmt: skip
    steps.append(BuildStep(**{**test.__dict__, "labels": {**test.labels, label.CI_BASE_IMAGE: base_ref}}))
    return BuildPlan(tuple(steps), tuple(notes), tuple(notices))


def _on_retarget(
    request: BuildRequest, labels: dict[str, str], listing: str, steps: list[BuildStep], notices: list[str]
) -> tuple[str, str, DeepEPCheck]:
    """The retarget step before `test`: what test starts FROM, the identity it is keyed on, the check it inherits.

    Test is keyed on the retarget's input hash (which holds the published ci_base's identity and the arch list),
    and labelled from what the retargeted image holds: the retarget's own labels over the published ones.
    """
    from dataclasses import replace

    assert request.retarget is not None
    rt = replace(request.retarget, labels={**request.retarget.labels, **request.extra_labels}, load=request.load)
    rt, base_ref, _ = chained(rt, request.chain, "retarget")  # the service plans it only on store/registry chains
    steps.append(rt)
    notices.append(f"test is built on {rt.tag}: {request.ci_base_reused}; ci_base is not built")
    for key, _ in label.HELD:
        labels.pop(key, None)
    labels.update(label.held({**(request.ci_base_labels or {}), **rt.labels}))
    fix = f"rebuild the retarget with --force, or look at {rt.dockerfile.name}'s rocSHMEM and DeepEP lines"
    return base_ref, f"retarget:{rt.input_hash}", DeepEPCheck(listing, f"rocmci's retarget overlay, in {rt.tag}", fix)
