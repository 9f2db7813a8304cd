"""Evidence after a build: the built image's DeepEP code objects, read by rocmci's verifier, against the list asked.

The same verifier image.retarget runs (packaged.VERIFIER), fed on standard input to the image's python3, so it
needs nothing copied into the image and works on a remote engine too. A mismatch is a BuildError naming the
stage that built DeepEP; the executor (build.py) then untags the image, so no tag carries labels that lie
(the labels are written by the same `docker build` that makes the image, so they cannot wait for the check).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmci import labels as label
from rocmci import packaged, verify
from rocmci.errors import BuildError

EVIDENCE_LABEL = label.EVIDENCE_ARCH


@dataclass(frozen=True)
class DeepEPCheck:
    """What a built tier's DeepEP must hold, and where it was built (for the error)."""

    archs: str  # the requested list, canonical (';'-joined, sorted)
    stage: str  # e.g. "stage build_deepep of docker/Dockerfile.rocm, in ci_base r:ci-base-gfx950"
    fix: str = (
        "make that stage build DeepEP for the requested list (its PYTORCH_ROCM_ARCH from DEEPEP_ROCM_ARCH: "
        "`rocmci image.check`) and rerun"
    )
    rocshmem_stage: str = ""  # where rocSHMEM is built, e.g. "stage build_rocshmem of docker/Dockerfile.rocm"


def argv(client: str, tag: str, check: DeepEPCheck) -> list[str]:
    """The verifier's run inside the image, no network; its script arrives on stdin (`python3 -`)."""
    return [client, "run", "--rm", "-i", "--network", "none", "--label", f"{label.MANAGED}=1",
            "--entrypoint", "python3", tag, "-", "--expect", check.archs]  # fmt: skip


def comment(tag: str, check: DeepEPCheck) -> str:
    """What a dry run prints above argv()."""
    return (f"then the DeepEP check (the verifier {packaged.VERIFIER} on stdin): code objects for "
            f"{check.archs}, else {tag} is untagged and the build fails")  # fmt: skip


def script() -> str:
    try:
        return packaged.VERIFIER.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(
            f"rocmci's code-object verifier {packaged.VERIFIER} cannot be read ({exc.strerror or exc})",
            hint="the rocmci package is incomplete: reinstall it (pip install --force-reinstall rocmci)",
        ) from None


def judge(stdout: str, returncode: int, tag: str, check: DeepEPCheck) -> list[str]:
    """The gfx targets found when they are exactly the requested ones; else the BuildError that says what is inside."""
    result = verify.answer(stdout)
    if result is None:
        raise BuildError(
            f"{tag} was built but the DeepEP check gave no answer (verifier exit {returncode}), so what "
            f"{check.stage} built is unknown",
            hint="rerun; or run the verifier inside the image by hand: " + str(packaged.VERIFIER),
        )
    found = sorted(a for a in result.get("found") or [] if isinstance(a, str))
    wanted = sorted(set(check.archs.split(";")))
    if returncode == 0 and result.get("ok") and found == wanted:
        rocshmem(result.get("rocshmem"), tag, check, wanted)
        return found
    if found:
        what = f"its DeepEP code objects are for {';'.join(found)}, not the requested {check.archs}"
    else:
        what = f"DeepEP does not check out ({result.get('error') or 'no code objects'}), requested {check.archs}"
    raise BuildError(
        f"{tag} was built but {what} (DeepEP is built by {check.stage})",
        hint=check.fix,
    )


def rocshmem(answer, tag: str, check: DeepEPCheck, wanted: list[str]) -> None:
    """rocSHMEM's shared libraries hold code objects for exactly the requested list (DeepEP links them: a
    narrower rocSHMEM fails on the GPU it lacks). No shared library to read (a static build) is no verdict."""
    if not isinstance(answer, dict) or not answer.get("libraries"):
        return
    found = sorted(a for a in answer.get("found") or [] if isinstance(a, str))
    if found == wanted and not answer.get("error"):
        return
    what = (f"its rocSHMEM code objects are for {';'.join(found)}" if found
            else f"rocSHMEM's libraries could not be read ({answer.get('error') or 'no code objects'})")  # fmt: skip
    where = check.rocshmem_stage or f"the stage that built rocSHMEM for {check.stage}"
    raise BuildError(
        f"{tag} was built but {what}, not the requested {check.archs} (rocSHMEM is built by {where})",
        hint="give that stage's GPU_TARGETS the DEEPEP_ROCM_ARCH list (`rocmci image.check`) and rerun",
    )
