"""Where vLLM keeps the files rocmci reads, and what makes a folder a vLLM checkout.

Apart from checkout.py (which parses those files) because every start looks for a checkout: this module
imports nothing, so finding one costs a few `stat` calls and no parser.
"""

from __future__ import annotations

from pathlib import Path

DOCKERFILE = Path("docker/Dockerfile.rocm")
BASE_DOCKERFILE = Path("docker/Dockerfile.rocm_base")  # the base tier (rocm/vllm-dev:base), refresh-base-image.sh
BAKE_FILE = Path("docker/docker-bake-rocm.hcl")
# vLLM's CI runs its scripts from the checkout root, which holds both of these.
CHECKOUT_MARKERS = (DOCKERFILE, Path("setup.py"))


def is_checkout(folder: Path) -> bool:
    return all((folder / marker).is_file() for marker in CHECKOUT_MARKERS)
