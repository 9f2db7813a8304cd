"""Request-building for the image tasks: settings -> checked values -> check/plan/retarget requests.

image/service.py holds the functions the tasks call; it builds its requests here.
Every value that reaches a command line is validated here, once.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rocmci import arch as archmod
from rocmci import labels as label
from rocmci.errors import FindingsError, UsageError
from rocmci.image import check as checkmod
from rocmci.image import plan as planmod
from rocmci.image import retarget as retargetmod
from rocmci.image import vllm_dockerfile as vd

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
    vllm_archs = archmod.parse_arch_list(vllm_text, what="vllm_arch") if vllm_text else None
    where = None
    found = vd.bake_variable(co.path, "PYTORCH_ROCM_ARCH")
    if vllm_archs is not None and not _overridden(s, "vllm_arch") and found is not None:
        where = (str(vd.BAKE_FILE), found[1])
    origin = "--arch" if s.origin("arch").startswith("flag") else f"DEEPEP_ROCM_ARCH ({s.origin('arch')})"
    return checkmod.ArchRequest(archs, origin, vllm_archs, s.origin("vllm_arch"), where)


def run_check(s) -> tuple[Checkout, checkmod.ArchRequest, list[checkmod.Finding]]:
    co = checkout(s)
    req = arch_request(s, co)
    return co, req, checkmod.check(co.dockerfile, req)


# Findings about the lists asked for, not about the file: a bad flag or setting value (exit 2).
LIST_RULES = ("deepep-unsupported-arch", "vllm-arch-superset")


def refusal(
    co: Checkout, req: checkmod.ArchRequest, findings: list[checkmod.Finding]
) -> FindingsError | UsageError | None:
    """Why a build must not start: a finding other than the flow ones, or a flow one with a non-default list.

    With the file's own default list the unfixed flow builds what vLLM builds; any other list would
    silently give DeepEP a different arch list than rocSHMEM. Only findings about the requested lists
    make it a usage error; a finding in the file is exit 1, like `image.check`.
    """
    decl = co.dockerfile.arg(vd.ARCH_ARG)
    default = archmod.parse_arch_list(decl.default) if decl and decl.default else None
    blocking = [f for f in findings if f.rule not in checkmod.FLOW_RULES or req.archs != default]
    if not blocking:
        return None
    first = blocking[0]
    more = f" (and {len(blocking) - 1} more)" if len(blocking) > 1 else ""
    kind = UsageError if all(f.rule in LIST_RULES for f in blocking) else FindingsError
    return kind(
        f"refusing to build for {archmod.canonical(req.archs)}: {first.text()}{more}",
        hint=f"fix: {first.fix}; `invoke image.check` lists every finding",
    )


def vllm_commit(path: Path) -> str:
    """The checkout's commit, marked -dirty with local changes; the tree's content is hashed separately."""
    try:
        done = subprocess.run(
            ["git", "-C", str(path), "describe", "--always", "--dirty", "--abbrev=40"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown (not a git checkout)"


def pins(s) -> tuple[dict[str, str], dict[str, str]]:
    """Labels for every pin as resolved, and --build-arg overrides for pins not taken from vLLM's file."""
    labels: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for name, arg, key in PINS:
        value = _checked(name, s.require(name), s.origin(name))
        if _overridden(s, name):
            overrides[arg] = value
        labels[key] = value
    labels[label.DEEPEP_FLAGS] = s.deepep_flags or ""
    return labels, overrides


def network(s) -> str | None:
    return s.build_network or None  # one of the registry's choices: '' (the engine default), none, host, default


def build_request(
    s, co: Checkout, req: checkmod.ArchRequest, *, target: str, tag: str | None, ci_base: str | None,
    push: bool, force: bool,
) -> planmod.BuildRequest:
    labels, overrides = pins(s)  # --tag and --ci-base were checked as image references when parsed
    return planmod.BuildRequest(
        checkout=co.path,
        dockerfile=co.dockerfile,
        archs=req.archs,
        vllm_archs=req.vllm_archs,
        pins=labels,
        overrides=overrides,
        image_repo=s.image_repo,
        vllm_commit=vllm_commit(co.path),
        target=target,
        tag=tag,
        ci_base_image=ci_base,
        network=network(s),
        push=push,
        force=force,
    )


def retarget_request(s, co: Checkout, *, from_image: str, from_identity: str, tag: str | None, force: bool):
    archs = deepep_archs(s)  # --from and --tag were checked as image references when parsed
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for name, arg, _ in PINS[1:]:
        values[arg] = _checked(name, s.require(name), s.origin(name))
        sources[arg] = s.origin(name)
    call = vd.deepep_setup_call(co.dockerfile)
    if call is not None and call.nic and "$" not in call.nic:
        values["DEEPEP_NIC"] = _checked("deepep_nic", call.nic, f"{co.dockerfile.display}:{call.line}")
        sources["DEEPEP_NIC"] = f"{co.dockerfile.display}:{call.line} (setup.py --nic)"
    flags = tuple(_checked("deepep_flags", s.require("deepep_flags"), s.origin("deepep_flags")).split())
    sources["DEEPEP_SETUP_FLAGS"] = s.origin("deepep_flags")
    multi = [f for f in flags if f.startswith("--offload-arch") and re.search(r"[;,]", f)]
    if multi:
        raise UsageError(f"DeepEP flags carry a multi-arch {multi[0]}", hint="--offload-arch works with one arch only")
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
    )
