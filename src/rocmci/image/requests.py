"""Request-building for the image tasks: settings -> checked values -> check/plan/retarget requests.

image/service.py holds the functions the tasks call; it builds its requests here.
Every value that reaches a command line is validated here, once.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rocmci import arch as archmod
from rocmci import labels as label
from rocmci.errors import FindingsError, UsageError
from rocmci.findings import ERROR
from rocmci.image import check as checkmod
from rocmci.image import plan as planmod
from rocmci.image import retarget as retargetmod
from rocmci.image import vllm_dockerfile as vd
from rocmci.values import CONTROL

# setting -> (build arg, label); the pins vLLM's Dockerfile declares.
PINS = (
    ("base_image", "BASE_IMAGE", label.BASE_IMAGE),
    ("deepep_repo", "DEEPEP_REPO", label.DEEPEP_REPO),
    ("deepep_ref", "DEEPEP_BRANCH", label.DEEPEP_REF),
    ("deepep_nic", "DEEPEP_NIC", label.DEEPEP_NIC),
    ("rocshmem_repo", "ROCSHMEM_REPO", label.ROCSHMEM_REPO),
    ("rocshmem_ref", "ROCSHMEM_BRANCH", label.ROCSHMEM_REF),
)
_OVERRIDE_ORIGINS = ("flag ", "env ", "pyproject")


@dataclass(frozen=True)
class Checkout:
    path: Path
    dockerfile: vd.VllmDockerfile


def checkout(s) -> Checkout:
    if not s.vllm_src:
        from rocmci.settings import NO_CHECKOUT

        raise UsageError(f"no vLLM checkout to read {vd.DOCKERFILE} from ({s.origin('vllm_src')})", hint=NO_CHECKOUT)
    path = Path(s.vllm_src)
    return Checkout(path, vd.load(path))


def _checked(name: str, value: str, where: str) -> str:
    """`value` under the registry's rule for setting `name`, whatever its origin: flag, env, pyproject, or a
    line of vLLM's Dockerfile (settings checks the first three when it resolves them; the last only here,
    where the value is about to reach a docker command line)."""
    from rocmci.settings import BY_NAME, convert

    return convert(BY_NAME[name], value, where)


def _overridden(s, name: str) -> bool:
    return s.origin(name).startswith(_OVERRIDE_ORIGINS)


def deepep_archs(s) -> tuple[str, ...]:
    text = s.require("arch")
    host: list[str] = []
    if text.strip().lower() == archmod.NATIVE:
        from rocmci.gpus import detect_gpus

        host = [g.arch for g in detect_gpus()]
    return archmod.resolve_arch_list(text, host_archs=host, what=f"arch ({s.origin('arch')})")


def arch_request(s, co: Checkout) -> checkmod.ArchRequest:
    archs = deepep_archs(s)
    vllm_text = s.vllm_arch
    vllm_archs = archmod.parse_arch_list(vllm_text, what=f"vllm_arch ({s.origin('vllm_arch')})") if vllm_text else None
    where = None
    found = vd.bake_variable(co.path, "PYTORCH_ROCM_ARCH")
    if vllm_archs is not None and not _overridden(s, "vllm_arch") and found is not None:
        where = (str(vd.BAKE_FILE), found[1])
    origin = "--arch" if s.origin("arch").startswith("flag") else f"DEEPEP_ROCM_ARCH ({s.origin('arch')})"
    return checkmod.ArchRequest(archs, origin, vllm_archs, s.origin("vllm_arch"), where)


def run_check(
    s, target: str = "ci_base", build_args: dict[str, str] | None = None
) -> tuple[Checkout, checkmod.ArchRequest, list[checkmod.Finding]]:
    """The arch check, following the stages `target` builds (test: the ci_base it is built on)."""
    from dataclasses import replace

    co = checkout(s)
    followed = "ci_base" if target == "test" else target
    req = replace(arch_request(s, co), target=followed, build_args=tuple(sorted((build_args or {}).items())))
    return co, req, checkmod.check(co.dockerfile, req)


# Findings about the lists asked for, not about the file: a bad flag or setting value (exit 2).
LIST_RULES = ("deepep-unsupported-arch", "vllm-arch-superset")


def refusal(
    co: Checkout, req: checkmod.ArchRequest, findings: list[checkmod.Finding]
) -> FindingsError | UsageError | None:
    """Why a build must not start: an error finding (a warning is a step the check could not follow; the
    DeepEP check after the build decides those). Only findings about the requested lists make it a usage
    error; a finding in the file is exit 1, like `image.check`.
    """
    blocking = [f for f in findings if f.severity == ERROR]
    if not blocking:
        return None
    first = blocking[0]
    more = f" (and {len(blocking) - 1} more)" if len(blocking) > 1 else ""
    kind = UsageError if all(f.rule in LIST_RULES for f in blocking) else FindingsError
    return kind(
        f"refusing to build for {archmod.canonical(req.archs)}: {first.text()}{more}",
        hint=f"fix: {first.fix}; `rocmci image.check` lists every finding",
    )


GIT_TIMEOUT = 30.0  # seconds for one git call: reading a commit or a status takes milliseconds, a hung git never ends


def _git(path: Path, *args: str) -> subprocess.CompletedProcess | None:
    """git in the checkout's own repository only: without a ceiling, git walks up and would label a plain copy
    of vLLM's files with the commit of whatever repository encloses it (a home folder under git, a CI
    workspace). safe.directory for this one path: a checkout owned by another user (a CI agent's, a bind
    mount) is still read, rather than labelled "unknown" while git knows its commit. The ceiling is a
    list split at ':', so a parent folder whose name holds one is no ceiling at all: the repository git
    finds must also be the checkout itself (None otherwise, as for no repository)."""
    real = os.path.realpath(path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(real)
    git = ["git", "-c", f"safe.directory={real}", "-C", str(path)]
    try:
        top = subprocess.run(
            [*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False, timeout=GIT_TIMEOUT,
            env=env,
        )
        if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != real:
            return None
        return subprocess.run([*git, *args], capture_output=True, text=True, check=False, timeout=GIT_TIMEOUT, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None


def vllm_commit(path: Path) -> str:
    """The checkout's commit (full sha); local changes are said by vllm_dirty, in a label of their own, so
    org.opencontainers.image.revision is always a commit git can show."""
    done = _git(path, "rev-parse", "--verify", "HEAD")
    text = done.stdout.strip() if done and done.returncode == 0 else ""
    return text if re.fullmatch(r"[0-9a-f]{40,64}", text) else "unknown (not a git checkout)"


def vllm_dirty(path: Path) -> bool | None:
    """Whether the checkout has local changes (tracked or untracked); None when git cannot say."""
    done = _git(path, "status", "--porcelain", "--untracked-files=normal")
    return bool(done.stdout.strip()) if done and done.returncode == 0 else None


def _no_credentials(name: str, value: str, where: str) -> str:
    """A repository URL without credentials: a build arg and a label are stored in the image for anyone to read."""
    from rocmci.values import url_credentials, without_url_credentials

    if url_credentials(value):
        raise UsageError(
            f"{name} ({where}) holds credentials in its URL ({without_url_credentials(value)}); rocmci never "
            "passes them as a build arg or label, where the image would keep them",
            hint="give the URL without them and let git authenticate through a credential helper, "
            "or pass the token as a BuildKit secret (--secret) in your own build",
        )
    return value


def pins(s) -> tuple[dict[str, str], dict[str, str]]:
    """Labels for every pin as resolved, and --build-arg overrides for pins not taken from vLLM's file."""
    labels: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for name, arg, key in PINS:
        value = _no_credentials(name, _checked(name, s.require(name), s.origin(name)), s.origin(name))
        if _overridden(s, name):
            overrides[arg] = value
        labels[key] = value
    labels[label.DEEPEP_FLAGS] = s.deepep_flags or ""
    return labels, overrides


def network(s) -> str | None:
    return s.build_network or None  # one of the registry's choices: '' (the engine default), none, host, default


# Build args rocmci passes itself, and the flag or setting that sets each instead.
OWN_ARGS = {
    vd.ARCH_ARG: "--arch", vd.VLLM_ARCH_ARG: "--vllm-arch", "CI_BASE_IMAGE": "--ci-base", "REMOTE_VLLM": "(always 0)",
    "BASE_IMAGE": "--base-image", "DEEPEP_BRANCH": "--deepep-ref", "ROCSHMEM_BRANCH": "--rocshmem-ref",
    "DEEPEP_REPO": "ROCMCI_DEEPEP_REPO", "ROCSHMEM_REPO": "ROCMCI_ROCSHMEM_REPO", "DEEPEP_NIC": "ROCMCI_DEEPEP_NIC",
}  # fmt: skip


def extra_build_args(df: vd.VllmDockerfile, pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """--build-arg NAME=VALUE: NAME declared by the Dockerfile (a typo would be ignored by docker, silently),
    not one rocmci passes itself, and a value without control characters (it becomes a label-free argv word)."""
    declared = {d.name for d in df.global_args} | {d.name for st in df.stages for d in st.args()}
    out: dict[str, str] = {}
    for name, value in pairs:
        if name in OWN_ARGS:
            raise UsageError(f"--build-arg {name} is set by rocmci", hint=f"use {OWN_ARGS[name]} instead")
        if name not in declared:
            import difflib

            close = difflib.get_close_matches(name, sorted(declared), n=1)
            raise UsageError(
                f"--build-arg {name}: {df.display} declares no ARG {name}",
                hint=f"did you mean {close[0]}?" if close else "see the ARG lines of the Dockerfile",
            )
        control = CONTROL.search(value)
        if control:
            raise UsageError(
                f"--build-arg {name} has the control character U+{ord(control.group()):04X} in its value",
                hint="give the value as one line of printable text",
            )
        out[name] = value
    return out


def base_facts(s, co: Checkout, engine, *, resolve: bool, from_registry: bool = False) -> planmod.BaseFacts | None:
    """What BASE_IMAGE and the base tier's own BASE_IMAGE are now (None: not asked, a dry run without an engine).

    `from_registry` (--pull): a tag's digest is the registry's, so a republished tag is seen even before
    (or without, in a dry run) pulling it; the local copy's identity otherwise.
    """
    from rocmci.errors import EngineError
    from rocmci.image import base

    image = s.require("base_image")

    def digest_of(ref: str) -> tuple[str | None, bool]:
        if "@sha256:" in ref:
            return ref.rsplit("@", 1)[1], True
        if from_registry:
            remote = engine.registry_digest(ref)
            if remote:
                return remote, True
        attrs = engine.image_attrs(ref)
        found = engine.image_digest(ref) if attrs else None
        pinnable = bool(found) and found != (attrs or {}).get("Id")
        return found, pinnable

    if not resolve:
        return None
    try:
        digest, pinnable = digest_of(image)
        # A pinned reference (`name@sha256:…` or `name:tag@sha256:…`) is inspected as it is: the engine finds a
        # local image by its digest, so its rocm_base labels are read as a tag's are.
        attrs = engine.image_attrs(image) if digest else None
    except EngineError:
        return None
    labels = ((attrs or {}).get("Config") or {}).get("Labels") or {}
    tier = base.tier(co.path, digest_of)
    return planmod.BaseFacts(image, digest, pinnable, labels.get(base.CONTENT_HASH_LABEL), tier,
                             files_hash=labels.get(base.FILES_HASH_LABEL))  # fmt: skip


def build_request(
    s, co: Checkout, req: checkmod.ArchRequest, *, target: str, tag: str | None, ci_base: str | None,
    push: bool, force: bool, base: planmod.BaseFacts | None = None, extra_args: dict[str, str] | None = None,
    load: bool = False, ci_base_digest: str | None = None, ci_base_labels: dict[str, str] | None = None,
    chain: planmod.Chain | None = None,
) -> planmod.BuildRequest:
    labels, overrides = pins(s)  # --tag and --ci-base were checked as image references when parsed
    try:
        extra = label.extra(s.extra_labels)
    except ValueError as exc:
        raise UsageError(f"{s.describe('extra_labels')}: {exc}") from None
    return planmod.BuildRequest(
        checkout=co.path,
        dockerfile=co.dockerfile,
        archs=req.archs,
        vllm_archs=req.vllm_archs,
        pins=labels,
        overrides=overrides,
        image_repo=s.image_repo,
        vllm_commit=vllm_commit(co.path),
        vllm_dirty=vllm_dirty(co.path),
        target=target,
        tag=tag,
        ci_base_image=ci_base,
        network=network(s),
        push=push,
        force=force,
        base=base,
        extra_args=extra_args or {},
        load=load,
        ci_base_digest=ci_base_digest,
        ci_base_labels=ci_base_labels,
        chain=chain,
        rocm_fixes=rocm_fixes(co.path),
        extra_labels=extra,
    )


def rocm_fixes(checkout: Path) -> tuple[str, ...]:
    """The fixes the packaged workaround registry names that the checkout's Dockerfile.rocm_base applies.

    Read with the registry's own evidence function (rocmci/fixes.py), so a label written here is exactly
    what `vllm_dockerfile_applies` would have found in the checkout.
    """
    from rocmci import fixes
    from rocmci.checkout import BASE_DOCKERFILE
    from rocmci.files import read_text
    from rocmci.image import base
    from rocmci.workaround_registry import PACKAGED, load_registry, named_fixes

    path = checkout / BASE_DOCKERFILE
    if not os.path.lexists(path):
        return ()
    text = read_text(path, what=str(BASE_DOCKERFILE), limit=base.MAX_BYTES)
    return fixes.applied(text, named_fixes(load_registry(PACKAGED)))


# build arg -> setting, and the image labels that record it (rocmci's own first, then vLLM CI's).
RETARGET_PINS = (
    ("DEEPEP_REPO", "deepep_repo", (label.DEEPEP_REPO, label.VLLM_DEEPEP_REPO)),
    ("DEEPEP_BRANCH", "deepep_ref", (label.DEEPEP_REF, label.VLLM_DEEPEP_COMMIT)),
    ("DEEPEP_NIC", "deepep_nic", (label.DEEPEP_NIC, label.VLLM_DEEPEP_NIC)),
    ("ROCSHMEM_REPO", "rocshmem_repo", (label.ROCSHMEM_REPO, label.VLLM_ROCSHMEM_REPO)),
    ("ROCSHMEM_BRANCH", "rocshmem_ref", (label.ROCSHMEM_REF, label.VLLM_ROCSHMEM_COMMIT)),
    ("DEEPEP_SETUP_FLAGS", "deepep_flags", (label.DEEPEP_FLAGS,)),
)
VLLM_ARCH_LABELS = (label.VLLM_ARCH, label.VLLM_PYTORCH_ARCH)


def _from_label(labels: dict[str, str], keys: tuple[str, ...]) -> tuple[str, str] | None:
    return next(((labels[k], k) for k in keys if labels.get(k)), None)


def retarget_request(
    s, co: Checkout, *, from_image: str, from_identity: str, tag: str | None, force: bool,
    from_labels: dict[str, str] | None = None, from_workdir: str = "/",
):  # fmt: skip
    """Pins for the overlay: what the --from image holds (its labels) unless a flag or setting says otherwise.

    Rebuilding DeepEP for another arch must not also change its version: the image's own labels are
    what it was built with, so they win over the checkout's defaults; a value given on purpose (flag,
    ROCMCI_*, pyproject) wins over both. Each disagreement is a note in `notes`.
    """
    archs = deepep_archs(s)  # --from and --tag were checked as image references when parsed
    labels = from_labels or {}
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    notes: list[str] = []
    call = vd.deepep_setup_call(co.dockerfile)
    for arg, name, keys in RETARGET_PINS:
        mine, origin = s.require(name), s.origin(name)
        if arg == "DEEPEP_NIC" and call is not None and call.nic and "$" not in call.nic:
            mine, origin = call.nic, f"{co.dockerfile.display}:{call.line} (setup.py --nic)"
        found = _from_label(labels, keys)
        if found and not _overridden(s, name):
            if found[0] != mine:
                notes.append(f"{arg}: the image's label {found[1]}={found[0]} wins over {mine} ({origin}); "
                             f"it is what {from_image} was built with (a flag or ROCMCI_{name.upper()} chooses)")
            mine, origin = found[0], f"image label {found[1]}"
        elif found and found[0] != mine:
            notes.append(f"{arg}: {origin} wins over the image's label {found[1]}={found[0]}")
        where = origin
        value = _checked(name, mine, where)
        values[arg] = _no_credentials(name, value, where) if arg.endswith("_REPO") else value
        sources[arg] = origin
    flags = tuple(values.pop("DEEPEP_SETUP_FLAGS").split())
    multi = [f for f in flags if f.startswith("--offload-arch") and re.search(r"[;,]", f)]
    if multi:
        raise UsageError(f"DeepEP flags carry a multi-arch {multi[0]}", hint="one arch per --offload-arch flag")
    vllm = _from_label(labels, VLLM_ARCH_LABELS)
    if vllm is not None:
        have = archmod.parse_arch_list(vllm[0], what=f"label {vllm[1]} of {from_image}")
        lacking = [a for a in archs if a not in have]
        if lacking:
            raise UsageError(
                f"{from_image} has vLLM kernels for {archmod.canonical(have)} (label {vllm[1]}), not for "
                f"{', '.join(lacking)}: DeepEP rebuilt for it would sit beside a vLLM that cannot run there",
                hint="retarget an image whose vLLM list covers it, or build one with `rocmci image.build --arch`",
            )
    elif labels or from_labels is not None:
        notes.append(f"{from_image} has no vLLM arch label ({', '.join(VLLM_ARCH_LABELS)}): its kernels' "
                     "archs are not checked")  # fmt: skip
    workdir = from_workdir or "/"
    if not workdir.startswith("/") or any(ord(c) < 32 for c in workdir):
        raise UsageError(f"{from_image} has an unusable WORKDIR {workdir[:60]!r}", hint="rebuild it with a plain path")
    return retargetmod.RetargetRequest(
        from_image=from_image,
        from_identity=from_identity,
        archs=archs,
        pins=values,
        setup_flags=flags,
        sources=sources,
        image_repo=s.image_repo,
        tag=tag,
        network=network(s),
        force=force,
        workdir=workdir,
        notes=tuple(notes),
    )
