"""`image.retarget`: rebuild only rocSHMEM and DeepEP for another arch list on top of an existing vLLM image.

The overlay is rocmci's own Dockerfile.retarget, shipped in the package (rocmci/data/docker, see packaged.py);
every pin and DeepEP flag it uses is read from vLLM's Dockerfile and passed as a build arg. Planning is pure;
the executor builds, then runs the verifier (retarget/verify_deepep.py, copied in) inside the result.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from rocmci import arch as archmod
from rocmci import labels as label
from rocmci import packaged, verify
from rocmci.errors import BuildError, InputError
from rocmci.image.cibase import HASH_LABEL as CI_BASE_HASH_LABEL
from rocmci.image.plan import INPUT_HASH_LABEL, BuildStep

OVERLAY_DIR = packaged.DOCKER
OVERLAY = packaged.OVERLAY
VERIFY = "/opt/rocmci/verify_deepep.py"


def overlay_text() -> str:
    """The overlay's text (part of its input hash), or one line saying the installed package lacks it."""
    try:
        return OVERLAY.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"rocmci's retarget overlay cannot be read ({exc.strerror or exc})",
            where=str(OVERLAY),
            hint="the rocmci package is incomplete: reinstall it (pip install --force-reinstall rocmci)",
        ) from None


@dataclass(frozen=True)
class RetargetRequest:
    from_image: str
    from_identity: str  # the image ID when known, so a rebuilt source image is a new input
    archs: tuple[str, ...]
    pins: dict[str, str]  # DEEPEP_REPO, DEEPEP_BRANCH, DEEPEP_NIC, ROCSHMEM_REPO, ROCSHMEM_BRANCH
    setup_flags: tuple[str, ...]
    sources: dict[str, str]  # build arg -> where it was read (vLLM's file:line), for --dry-run
    image_repo: str
    tag: str | None = None
    network: str | None = None
    force: bool = False
    workdir: str = "/"  # the --from image's WORKDIR, restored at the end of the overlay
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RetargetPlan:
    step: BuildStep
    sources: dict[str, str]
    notes: tuple[str, ...] = ()

    def verify_argv(self, client: str) -> list[str]:
        return verify_argv(client, self.step)


def verify_argv(client: str, step: BuildStep) -> list[str]:
    """The verifier the overlay copied in, run inside a retarget step's result against the list it was built for."""
    expect = step.build_args["DEEPEP_ROCM_ARCH"]
    return [client, "run", "--rm", "--network", "none", step.tag, "python3", VERIFY, "--expect", expect]


def plan_retarget(request: RetargetRequest, overlay_text: str) -> RetargetPlan:
    archmod.require_deepep_support(request.archs)
    listing = archmod.canonical(request.archs)
    args = {
        "FROM_IMAGE": request.from_image,
        "DEEPEP_ROCM_ARCH": listing,
        **request.pins,
        "DEEPEP_SETUP_FLAGS": " ".join(request.setup_flags),
        "FROM_WORKDIR": request.workdir,
    }
    h = hashlib.sha256(f"rocmci-retarget-2\0{overlay_text}\0{request.from_identity}\0".encode())
    for key in sorted(args):
        h.update(f"{key}={args[key]}\0".encode())
    digest = h.hexdigest()[:16]
    tag = request.tag or f"{request.image_repo}:retarget-{archmod.slug(request.archs)}"
    labels = {
        label.ARCH: listing,
        label.RETARGET_FROM: request.from_image,
        label.DEEPEP_REPO: request.pins.get("DEEPEP_REPO", ""),
        label.DEEPEP_REF: request.pins.get("DEEPEP_BRANCH", ""),
        label.DEEPEP_NIC: request.pins.get("DEEPEP_NIC", ""),
        label.DEEPEP_FLAGS: args["DEEPEP_SETUP_FLAGS"],
        label.ROCSHMEM_REPO: request.pins.get("ROCSHMEM_REPO", ""),
        label.ROCSHMEM_REF: request.pins.get("ROCSHMEM_BRANCH", ""),
        label.TARGET: "retarget",
        INPUT_HASH_LABEL: digest,
        # What the image inherits from a CI image, made true: vLLM's own DeepEP label names the list it now
        # holds, and it is no longer the ci_base of any content hash (so no lookup takes it for CI's).
        label.VLLM_DEEPEP_ARCH: listing,
        CI_BASE_HASH_LABEL: "",
    }
    step = BuildStep(
        target="retarget",
        tag=tag,
        dockerfile=OVERLAY,
        context=OVERLAY_DIR,
        build_args=args,
        labels=labels,
        input_hash=digest,
        network=request.network,
        push=False,
        force=request.force,
    )
    return RetargetPlan(step, request.sources, request.notes)


def check_verification(stdout: str, returncode: int, tag: str) -> dict:
    """The verifier's JSON line, or a BuildError that says what is wrong with the image."""
    result = verify.answer(stdout)
    if result is None:
        raise BuildError(
            f"verifying {tag} gave no result (exit {returncode})", hint="run the verifier by hand: " + VERIFY
        )
    if returncode != 0 or not result.get("ok"):
        raise BuildError(
            f"{tag} was built but DeepEP does not check out: {result.get('error')}",
            hint="the image is left for inspection; see its labels with `rocmci image.inspect`",
        )
    return result
