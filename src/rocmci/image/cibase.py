"""vLLM's ci_base content hash and labels, from the checkout's own .buildkite/scripts/ci-bake-rocm.sh.

rocmci does not re-implement the hash: the script guards its `main` (`BASH_SOURCE == $0`), so it is sourced
in bash from the checkout and its own functions run (compute_ci_base_content_hash, ci_base_metadata_pairs).
Only the registry lookup it would do with `docker buildx imagetools` is replaced: BASE_IMAGE's digest is
handed in through the script's own digest cache (BASE_IMAGE_DIGEST_CACHE_*), as prime_base_image_digest_cache
would fill it. The values of the build args it hashes come from the environment it is given: exactly the
build args rocmci passes, so the hash names the image rocmci would build.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rocmci.errors import BuildError

SCRIPT = Path(".buildkite/scripts/ci-bake-rocm.sh")
HASH_LABEL = "vllm.ci_base.content_hash"
TIMEOUT = 120  # the script hashes a handful of files and folders: seconds, even on a slow disk

# Sourced, never run: main() stays unreached. $1 script, $2 BASE_IMAGE as passed, $3 its digest ('' = none).
_DRIVER = r"""
set -euo pipefail
source "$1"
init_config ci-base-rocm >/dev/null
trap cleanup EXIT
if [[ -n "$3" ]]; then
    BASE_IMAGE_DIGEST_CACHE_REF="$2"
    BASE_IMAGE_DIGEST_CACHE_VALUE="$3"
    BASE_IMAGE_DIGEST_CACHE_READY=1
fi
CI_BASE_CONTENT_HASH=$(compute_ci_base_content_hash 2>/dev/null)
export CI_BASE_CONTENT_HASH
configure_ci_base_image_refs >/dev/null
ci_base_metadata_pairs
"""
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class CiBase:
    """What vLLM's CI would call the ci_base for these inputs."""

    content_hash: str
    labels: dict[str, str]  # the vllm.* metadata the bake writes (empty values left out)

    def tag(self, stable: str) -> str:
        """ci_base_tag_with_suffix: `<stable>-<hash>`, e.g. rocm/vllm-dev:ci_base-<64 hex>."""
        return f"{stable}-{self.content_hash}"


def environment(build_args: dict[str, str]) -> dict[str, str]:
    """Only what the script needs and the build args rocmci passes: a user's stray BUILDKITE_* or ARG-named
    variables must not enter the hash of an image they do not shape. PYTORCH_ROCM_ARCH is the name the script
    reads ARG_PYTORCH_ROCM_ARCH from."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": os.environ.get("HOME", "/")}
    for name, value in build_args.items():
        env["PYTORCH_ROCM_ARCH" if name == "ARG_PYTORCH_ROCM_ARCH" else name] = value
    return env


# Build args rocmci passes that vLLM's CI does not: nothing in .buildkite or docker/*.hcl sets DEEPEP_ROCM_ARCH, so
# CI's hash has the Dockerfile's own default for it (the script's resolve_dockerfile_arg_value falls back to it).
NOT_PASSED_BY_CI = ("DEEPEP_ROCM_ARCH",)


def as_ci_passes(build_args: dict[str, str]) -> dict[str, str]:
    """The ci_base build args as vLLM's CI would hash them: rocmci's DeepEP arch override left out."""
    return {name: value for name, value in build_args.items() if name not in NOT_PASSED_BY_CI}


def compute(checkout: Path, build_args: dict[str, str], base_digest: str | None, stable: str) -> CiBase | None:
    """The hash and labels by the checkout's script (`stable`: its CI_BASE_IMAGE_TAG, which names the tags in
    the labels, not the hash); None when the checkout has no ci-bake-rocm.sh."""
    if not (checkout / SCRIPT).is_file():
        return None
    base = build_args.get("BASE_IMAGE", "")
    argv = ["bash", "-c", _DRIVER, "rocmci-ci-base-hash", str(SCRIPT), base, base_digest or ""]
    try:
        env = {**environment(build_args), "CI_BASE_IMAGE_TAG": stable}
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise BuildError(f"{SCRIPT}'s ci_base hash did not finish within {TIMEOUT}s") from None
    except OSError as exc:
        raise BuildError(f"cannot run bash for {SCRIPT}'s ci_base hash ({exc.strerror or exc})") from None
    labels: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, tab, value = line.partition("\t")
        if tab and key.startswith("vllm.") and value:
            labels[key] = value
    chash = labels.get(HASH_LABEL, "")
    if done.returncode != 0 or not _HASH.fullmatch(chash):
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}, no hash"])[-1]
        raise BuildError(
            f"{SCRIPT} could not compute the ci_base content hash: {why}",
            hint="run `bash -c 'source .buildkite/scripts/ci-bake-rocm.sh; init_config ci-base-rocm; "
            "compute_ci_base_content_hash'` in the checkout to see why",
        )
    return CiBase(chash, labels)
