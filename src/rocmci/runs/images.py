"""The image a run uses, and what it says of itself.

vLLM's own CI images are first-class: `--build-id N` names the image a Buildkite build made, an image
is pulled when asked (`--pull`) or missing, and its DeepEP arch list is read from rocmci's label,
from vLLM's (`vllm.rocm.deepep_rocm_arch`, written by ci-bake-rocm.sh) or, when an image carries
neither, from the code objects of its DeepEP libraries (rocmci's verify script, run inside it).
"""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmci import labels as label
from rocmci import packaged, verify
from rocmci.engine import Engine
from rocmci.errors import EngineError, PreflightError, UsageError
from rocmci.runs import container as ctr

# The template's amd_ci_image and amd_native_base_image, with the build's id filled in (tested against
# pipeline/amdsteps.py's CI_IMAGE and NATIVE_BASE_IMAGE).
CI_IMAGE = "rocm/vllm-ci:build-{}"
NATIVE_IMAGE = "rocm/vllm-dev:ci_base-build-{}"
_BUILD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # a number or a UUID: text a tag may hold
VERIFY_SCRIPT = packaged.VERIFIER  # shipped in the package: found from an installed rocmci too
ROCM_VERSION_FILE = "/opt/rocm/.info/version"


def build_id(flag: str, raw: str) -> str:
    """--build-id: what Buildkite's BUILDKITE_BUILD_ID holds (a UUID, or a number), checked for a tag."""
    if not isinstance(raw, str) or not _BUILD_ID.fullmatch(raw):
        raise UsageError(f"{flag} {raw[:40]!r} is not a build id", hint="give BUILDKITE_BUILD_ID, e.g. --build-id 4711")
    return raw


def build_image(build: str, native: bool) -> str:
    """The image a build's test step runs in: the Docker path's test image, or a native pod's ci_base."""
    return (NATIVE_IMAGE if native else CI_IMAGE).format(build)


@dataclass(frozen=True)
class ImageFacts:
    archs: str | None  # DeepEP's arch list, ';'-separated; None when nothing says
    arch_source: str  # where it was read, or why it is unknown
    rocm: str | None = None
    rocm_source: str = ""

    def note(self, image: str) -> str:
        archs = f"DeepEP built for {self.archs} ({self.arch_source})" if self.archs else self.arch_source
        rocm = f"ROCm {self.rocm} ({self.rocm_source})" if self.rocm else "ROCm version unknown"
        return f"image {image}: {archs}; {rocm}"


def arch_from_labels(labels: Mapping[str, str]) -> tuple[str | None, str]:
    """Evidence over declarations: the label image.build writes from verified code objects, else a declared one."""
    return label.image_arch(labels)


def parse_probe(stdout: str) -> tuple[str | None, str]:
    """The verify script's JSON line -> (archs of DeepEP's code objects, how they were found)."""
    result = verify.answer(stdout)
    if result is None:
        return None, "the code-object probe gave no answer"
    found = [a for a in result.get("found") or [] if isinstance(a, str) and re.fullmatch(r"gfx[0-9a-f]+", a)]
    if found:
        return ";".join(sorted(found)), f"code objects of {len(result.get('libraries') or [])} DeepEP libraries"
    return None, f"no DeepEP code objects found: {result.get('error') or 'none listed'}"


def probe_code_objects(engine: Engine, image: str) -> tuple[str | None, str]:
    """Run the verify script inside the image (no network) and read which gfx targets DeepEP carries."""
    try:
        script = VERIFY_SCRIPT.read_text(encoding="utf-8")
    except OSError:
        return None, f"no label, and the code-object probe {VERIFY_SCRIPT.name} is not installed"
    try:
        done = ctr.probe(engine, image, ["python3", "-c", script, "--expect", ""])
    except EngineError as exc:
        return None, f"no label, and the code-object probe failed: {exc.message}"
    return parse_probe(done.stdout)


def rocm_version(engine: Engine | None, image: str, labels: Mapping[str, str]) -> tuple[str | None, str]:
    value = (labels.get(label.VLLM_ROCM_VERSION) or "").strip()
    if value:
        return value, f"label {label.VLLM_ROCM_VERSION}"
    if engine is None:
        return None, ""
    text = ctr.read_file(engine, image, ROCM_VERSION_FILE)
    if text and re.fullmatch(r"[0-9][0-9A-Za-z.+-]{0,40}", text.splitlines()[0].strip()):
        return text.splitlines()[0].strip(), ROCM_VERSION_FILE
    return None, ""


def facts(engine: Engine, image: str, labels: Mapping[str, str]) -> ImageFacts:
    archs, source = arch_from_labels(labels)
    if archs is None:
        archs, source = probe_code_objects(engine, image)
    rocm, rocm_source = rocm_version(engine, image, labels)
    return ImageFacts(archs, source, rocm, rocm_source)


def ensure(
    engine: Engine, image: str, *, pull: bool, dry_run: bool, out: Callable[[str], None], local_only: bool = False
) -> dict[str, str] | None:
    """The image's labels, pulling it first when asked or missing (not in a dry run); None if it is not there.

    local_only: the tag `image.build` gives, which no registry holds: missing, it is built, not pulled."""
    labels = engine.image_labels(image)
    if labels is None and local_only and not pull:
        if dry_run:
            out(f"rocmci: dry run: {image} is not here; it is the tag `rocmci image.build` gives (not pulled)")
            return None
        raise PreflightError(
            f"image {image} is not here: it is the tag `rocmci image.build` gives, which no registry holds",
            hint="build it with `rocmci image.build`, or run the CI image of a build with --build-id N (or --image)",
        )
    if dry_run:
        if pull or labels is None:
            out(f"rocmci: dry run: would pull {image}" + ("" if labels is None else " (present, --pull given)"))
        return labels
    if pull or labels is None:
        out(f"rocmci: pulling {image}")
        try:
            code = engine.stream([engine.client, "pull", image], out)
        except OSError as exc:  # a client that exists but cannot be run
            raise EngineError(f"docker client {engine.client!r} cannot be run: {exc.strerror}") from None
        if code != 0:
            if labels is None:
                raise EngineError(f"could not pull {image} (docker pull exited {code})",
                                  hint="check the name and that you are logged in to its registry")  # fmt: skip
            out(f"rocmci: docker pull {image} exited {code}; using the local copy")
        labels = engine.image_labels(image)
    return labels


# Where an image keeps the tests it runs: rocmci's images and vLLM's final stage, then vLLM's CI images.
TEST_TREES = ("/vllm-workspace/tests", "/opt/vllm-ci/workspace/tests")
MAX_TESTS_BYTES = 256 * 2**20


def _python_files(data: bytes, dest: Path) -> int:
    """The .py files of a `docker cp` tar stream written below dest (no links, no path outside dest)."""
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if not member.isfile() or not member.name.endswith(".py") or ".." in parts or member.name.startswith("/"):
                continue
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is not None:
                target.write_bytes(source.read())
                count += 1
    return count


def export_tests(engine: Engine, image: str, dest: Path) -> tuple[Path, str] | None:
    """The image's tests/ tree (Python files only) copied to dest: (the workspace root there, its path
    inside the image). None when the image has none or the engine cannot be asked."""
    name = ctr.container_name("tests")
    try:
        made = engine.cli("create", "--name", name, "--label", f"{label.MANAGED}=1", "--network", "none", image,
                          "true", check=False)  # fmt: skip
    except EngineError:
        return None
    if made.returncode != 0:
        return None
    try:
        for path in TEST_TREES:
            try:
                got = subprocess.run(
                    [engine.client, "cp", f"{name}:{path}", "-"], capture_output=True, timeout=300, check=False
                )
            except (OSError, subprocess.TimeoutExpired):
                return None
            if got.returncode == 0 and 0 < len(got.stdout) <= MAX_TESTS_BYTES:
                try:
                    if _python_files(got.stdout, dest):  # the tar's top folder is "tests"
                        return dest, path.rsplit("/", 1)[0]
                except tarfile.TarError:
                    return None
        return None
    finally:
        ctr.remove(engine, name)
