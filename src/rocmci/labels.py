"""Image and container label keys rocmci writes and reads: one spelling, shared by image, runs and doctor.

A built image carries what it was built from, so `image.inspect`, preflight (arch list) and the
workaround registry (ROCm fixes) read facts from the image instead of guessing.
"""

from __future__ import annotations

PREFIX = "rocmci."

# Containers and probe images rocmci starts: found and removed by this label.
MANAGED = "rocmci.managed"
WORKLOAD = "rocmci.workload"

# Image labels, written by image/plan.py (build) and image/retarget.py (retarget).
TARGET = "rocmci.target"
ARCH = "rocmci.arch"  # DEEPEP_ROCM_ARCH, canonical ';' list
VLLM_ARCH = "rocmci.vllm.arch"
VLLM_COMMIT = "rocmci.vllm.commit"
BASE_IMAGE = "rocmci.base-image"
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

# What `image.inspect` shows, in order: (title, label keys joined with " @ ").
INSPECT_ROWS: tuple[tuple[str, ...], ...] = (
    ("target", TARGET),
    ("archs (DEEPEP_ROCM_ARCH)", ARCH),
    ("vLLM archs", VLLM_ARCH),
    ("DeepEP", DEEPEP_REPO, DEEPEP_REF),
    ("DeepEP NIC", DEEPEP_NIC),
    ("DeepEP setup flags", DEEPEP_FLAGS),
    ("rocSHMEM", ROCSHMEM_REPO, ROCSHMEM_REF),
    ("vLLM commit", VLLM_COMMIT),
    ("base image", BASE_IMAGE),
    ("CI base image", CI_BASE_IMAGE),
    ("retargeted from", RETARGET_FROM),
    ("input hash", INPUT_HASH),
)
