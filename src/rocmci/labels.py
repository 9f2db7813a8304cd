"""Image and container label keys rocmci writes and reads: one spelling, shared by image, runs and doctor.

A built image carries what it was built from, so `image.inspect`, preflight (arch list) and the
workaround registry (ROCm fixes) read facts from the image instead of guessing.
"""

from __future__ import annotations

PREFIX = "rocmci."

# Containers and probe images rocmci starts: found and removed by this label.
MANAGED = "rocmci.managed"
WORKLOAD = "rocmci.workload"
JOB = "rocmci.job"  # the Buildkite job a run.step container belongs to: removed with it, whoever started it

# Image labels, written by image/plan.py (build) and image/retarget.py (retarget).
TARGET = "rocmci.target"
ARCH = "rocmci.arch"  # DEEPEP_ROCM_ARCH, canonical ';' list
VLLM_ARCH = "rocmci.vllm.arch"
VLLM_COMMIT = "rocmci.vllm.commit"
VLLM_DIRTY = "rocmci.vllm.dirty"  # "true": the checkout had local changes at build time (the commit is HEAD)
BASE_IMAGE = "rocmci.base-image"
BASE_IMAGE_DIGEST = "rocmci.base-image.digest"  # registry digest or image ID BASE_IMAGE had at build time
CI_BASE_IMAGE = "rocmci.ci-base-image"
DEEPEP_REPO = "rocmci.deepep.repo"
DEEPEP_REF = "rocmci.deepep.ref"
DEEPEP_NIC = "rocmci.deepep.nic"
DEEPEP_FLAGS = "rocmci.deepep.flags"
ROCSHMEM_REPO = "rocmci.rocshmem.repo"
ROCSHMEM_REF = "rocmci.rocshmem.ref"
RETARGET_FROM = "rocmci.retarget.from"
INPUT_HASH = "rocmci.input-hash"
ROCM_FIXES = "rocmci.rocm.fixes"  # evidence for workarounds: fixes the base image carries

# Labels vLLM's own CI writes (read, never written, by rocmci): ci-bake-rocm.sh on its CI images,
# refresh-base-image.sh on the ROCm base. Checked against those scripts in tests/unit/test_images.py.
VLLM_DEEPEP_ARCH = "vllm.rocm.deepep_rocm_arch"
VLLM_PYTORCH_ARCH = "vllm.rocm.pytorch_rocm_arch"
VLLM_DEEPEP_REPO = "vllm.rocm.deepep_repo"
VLLM_DEEPEP_COMMIT = "vllm.rocm.deepep_commit"
VLLM_DEEPEP_NIC = "vllm.rocm.deepep_nic"
VLLM_ROCSHMEM_REPO = "vllm.rocm.rocshmem_repo"
VLLM_ROCSHMEM_COMMIT = "vllm.rocm.rocshmem_commit"
VLLM_BASE_IMAGE = "vllm.rocm.base_image"
VLLM_ROCM_VERSION = "vllm.rocm_base.dependency.rocm"
VLLM_BASE_PYTORCH_ARCH = "vllm.rocm_base.pytorch_rocm_arch"
# What a ci_base holds, as the labels of the image it is built on say (rocmci's own first, then the bake's):
# a test image built on a given or reused ci_base is labelled from these, never from the checkout's pins.
HELD = (
    (ARCH, (ARCH, VLLM_DEEPEP_ARCH)),
    (DEEPEP_REPO, (DEEPEP_REPO, VLLM_DEEPEP_REPO)),
    (DEEPEP_REF, (DEEPEP_REF, VLLM_DEEPEP_COMMIT)),
    (DEEPEP_NIC, (DEEPEP_NIC, VLLM_DEEPEP_NIC)),
    (ROCSHMEM_REPO, (ROCSHMEM_REPO, VLLM_ROCSHMEM_REPO)),
    (ROCSHMEM_REF, (ROCSHMEM_REF, VLLM_ROCSHMEM_COMMIT)),
    (DEEPEP_FLAGS, (DEEPEP_FLAGS,)),
)


def held(labels: dict[str, str]) -> dict[str, str]:
    """rocmci's labels for what an image holds, read from its own labels; a fact it does not state is left out."""
    out = {}
    for key, sources in HELD:
        value = next((labels[s] for s in sources if labels.get(s)), None)
        if value is not None:
            out[key] = value
    return out


# Where the DeepEP arch list of an image is read, first match wins.
ARCH_LABELS = (ARCH, VLLM_DEEPEP_ARCH)
# Written by image.build only after the built image's DeepEP code objects were read and matched the request:
# what is inside, verified, where ARCH_LABELS only declare what was asked for.
EVIDENCE_ARCH = "rocmci.evidence.deepep-arch"


def image_arch(labels) -> tuple[str | None, str]:
    """DeepEP's arch list of an image and where it was read: the evidence label first, else a declared one."""
    value = (labels.get(EVIDENCE_ARCH) or "").strip()
    if value:
        return value, f"label {EVIDENCE_ARCH}: DeepEP's code objects, read after the build"
    for key in ARCH_LABELS:
        value = (labels.get(key) or "").strip()
        if value:
            return value, f"label {key}, declared: no {EVIDENCE_ARCH} (code objects not verified)"
    return None, f"no {' or '.join((EVIDENCE_ARCH, *ARCH_LABELS))} label"

# What `image.inspect` shows, in order: (title, label keys joined with " @ ").
INSPECT_ROWS: tuple[tuple[str, ...], ...] = (
    ("target", TARGET),
    ("archs (DEEPEP_ROCM_ARCH)", ARCH),
    ("archs verified (DeepEP code objects)", EVIDENCE_ARCH),
    ("vLLM CI: DeepEP archs", VLLM_DEEPEP_ARCH),
    ("vLLM CI: PyTorch archs", VLLM_PYTORCH_ARCH),
    ("vLLM CI: DeepEP", VLLM_DEEPEP_REPO, VLLM_DEEPEP_COMMIT),
    ("vLLM CI: rocSHMEM", VLLM_ROCSHMEM_REPO, VLLM_ROCSHMEM_COMMIT),
    ("vLLM CI: base image", VLLM_BASE_IMAGE),
    ("vLLM archs", VLLM_ARCH),
    ("DeepEP", DEEPEP_REPO, DEEPEP_REF),
    ("DeepEP NIC", DEEPEP_NIC),
    ("DeepEP setup flags", DEEPEP_FLAGS),
    ("rocSHMEM", ROCSHMEM_REPO, ROCSHMEM_REF),
    ("vLLM commit", VLLM_COMMIT),
    ("vLLM checkout had local changes", VLLM_DIRTY),
    ("base image", BASE_IMAGE, BASE_IMAGE_DIGEST),
    ("CI base image", CI_BASE_IMAGE),
    ("retargeted from", RETARGET_FROM),
    ("input hash", INPUT_HASH),
)


# Keys an extra label (setting extra_labels) may not take: those rocmci writes or reads, and vLLM's and OCI's.
_FOREIGN = ("vllm.", "org.opencontainers.")


def extra(text: str) -> dict[str, str]:
    """The extra labels of setting extra_labels (already checked against its pattern) as a dict.

    ValueError names a key that would overwrite a label rocmci writes or reads, or that repeats."""
    own = {value for name, value in globals().items() if name.isupper() and isinstance(value, str)}
    pairs: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=", 1)
        if key in own or key.startswith(_FOREIGN):
            raise ValueError(f"{key!r} is a label rocmci or vLLM's CI writes or reads itself; choose another key")
        if key in pairs:
            raise ValueError(f"{key!r} is given twice")
        pairs[key] = value
    return pairs
