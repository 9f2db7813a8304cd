"""The base tier: vLLM's docker/Dockerfile.rocm_base (rocm/vllm-dev:base), as refresh-base-image.sh builds it.

The content hash is computed the way that script computes it (compute_base_content_hash: the file's
mode and sha256, the ARG defaults it lists, the upstream base image's digest), so the
`vllm.rocm_base.content_hash` label on vLLM's published base and on a base rocmci built compare
equal exactly when they come from the same Dockerfile.rocm_base. Pure: the digest is given.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from rocmci.checkout import BASE_DOCKERFILE
from rocmci.files import read_text

CONTENT_HASH_LABEL = "vllm.rocm_base.content_hash"
FILES_HASH_LABEL = "vllm.rocm_base.content_files_hash"  # the Dockerfile.rocm_base text alone
METADATA_VERSION = "1"  # refresh-base-image.sh DEFAULT_ROCM_BASE_METADATA_VERSION
# refresh-base-image.sh DEFAULT_ROCM_BASE_CONTENT_ARGS, in its order (the order is part of the hash).
CONTENT_ARGS = (
    "BASE_IMAGE", "TRITON_BRANCH", "TRITON_REPO", "PYTORCH_BRANCH", "PYTORCH_REPO", "PYTORCH_VISION_BRANCH",
    "PYTORCH_VISION_REPO", "PYTORCH_AUDIO_BRANCH", "PYTORCH_AUDIO_REPO", "FA_BRANCH", "FA_REPO", "AITER_BRANCH",
    "AITER_REPO", "MORI_BRANCH", "MORI_REPO", "PYTORCH_ROCM_ARCH", "PYTHON_VERSION", "USE_SCCACHE",
)  # fmt: skip
USE_SCCACHE = "0"  # the script's default (ROCM_BASE_USE_SCCACHE / USE_SCCACHE unset)
MAX_BYTES = 4 * 2**20


@dataclass(frozen=True)
class BaseTier:
    """What the checkout's Dockerfile.rocm_base builds: its content hash and the image it starts FROM."""

    path: Path
    upstream: str  # its ARG BASE_IMAGE default, e.g. rocm/dev-ubuntu-22.04:7.2.1-complete
    upstream_digest: str | None
    upstream_pinnable: bool
    content_hash: str | None  # None while the upstream digest is unknown: no key from a mutable tag
    files_hash: str
    args: dict[str, str]  # the CONTENT_ARGS defaults, as the script extracts them


def arg_default(text: str, name: str) -> str:
    """refresh-base-image.sh extract_arg_default: the first `ARG NAME=value` line, quotes and comment dropped."""
    pattern = re.compile(rf'^[ \t]*ARG[ \t]+{re.escape(name)}="?([^"\s]+)"?')
    return next((m.group(1) for line in text.splitlines() if (m := pattern.match(line))), "")


def files_hash(checkout: Path, rel: Path = BASE_DOCKERFILE) -> str:
    """compute_content_hash over the one content file: kind, mode (644/755) and `sha256sum` line, hashed."""
    path = checkout / rel
    data = read_text(path, what="docker/Dockerfile.rocm_base", limit=MAX_BYTES).encode()
    mode = "755" if os.stat(path).st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH) else "644"
    listing = f"file:{rel}\nmode:{mode}\n{hashlib.sha256(data).hexdigest()}  {rel}\n"
    return hashlib.sha256(listing.encode()).hexdigest()


def content_hash(files: str, args: dict[str, str], base_digest: str, rel: Path = BASE_DOCKERFILE) -> str:
    """compute_base_content_hash: the files hash, the Dockerfile path and each content ARG (BASE_IMAGE's digest)."""
    lines = [f"content-files-hash:{files}", f"dockerfile:{rel}", "resolved-build-args:"]
    for name in CONTENT_ARGS:
        value = USE_SCCACHE if name == "USE_SCCACHE" else args.get(name, "")
        lines.append(f"arg:{name}={value or '<empty>'}")
        if name == "BASE_IMAGE" and value:
            lines.append(f"arg:{name}.digest={base_digest or 'unknown'}")
    return hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()


def tier(checkout: Path, digest_of) -> BaseTier | None:
    """The checkout's base tier, or None when it has no Dockerfile.rocm_base.

    `digest_of(ref)` gives (digest or None, pinnable) for the upstream base image.
    """
    path = checkout / BASE_DOCKERFILE
    if not os.path.lexists(path):
        return None
    text = read_text(path, what="docker/Dockerfile.rocm_base", limit=MAX_BYTES)
    args = {name: arg_default(text, name) for name in CONTENT_ARGS}
    upstream = args["BASE_IMAGE"]
    digest, pinnable = digest_of(upstream) if upstream else (None, False)
    files = files_hash(checkout)
    chash = content_hash(files, args, digest) if digest else None
    return BaseTier(path, upstream, digest, pinnable, chash, files, args)


def pinned(image: str, digest: str, pinnable: bool) -> str:
    """`image@digest` when the digest is a registry digest (as refresh-base-image.sh pins it), else the tag.

    A local image ID is no registry digest: `name@<ID>` would send BuildKit to a registry that never
    had it, so the tag stays, and the ID keys the input hash instead.
    """
    return f"{image.split('@', 1)[0]}@{digest}" if pinnable else image
