"""What a vLLM checkout is, for everything that only needs to find one (settings, the hook).

Kept apart from image/vllm_dockerfile.py, which parses the Dockerfile: finding the checkout must not
cost the parser's import on every run of a task that never reads the Dockerfile.
"""

from __future__ import annotations

from pathlib import Path

DOCKERFILE = Path("docker/Dockerfile.rocm")
# vLLM's CI runs its scripts from the checkout root, which holds both of these.
CHECKOUT_MARKERS = (DOCKERFILE, Path("setup.py"))


def is_checkout(folder: Path) -> bool:
    return all((folder / marker).is_file() for marker in CHECKOUT_MARKERS)
