"""The arch-flow check of vLLM's Dockerfile: one list, DEEPEP_ROCM_ARCH, must reach rocSHMEM and DeepEP.

One function per rule; each returns findings (file:line:col, rule, message, fix). Nothing here runs
Docker: the file, the requested lists and where they came from are all it needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocmci import arch as archmod
from rocmci.findings import ERROR, WARNING, Finding
from rocmci.image import dockerflow as flowmod
from rocmci.image import vllm_dockerfile as vd

# The name is taken whole (possessive), after a lookahead that finds FLAGS in it: '\w*FLAGS\w*' tried every
# split of a long word holding FLAGS many times (quadratic: 'FLAGS' * 20,000 did not finish in 10 s).
_FLAGS_ASSIGN = re.compile(r"\b(?=\w*FLAGS)(\w*+)=(\"[^\"]*\"|'[^']*'|\S+)")
_OFFLOAD = re.compile(r"--offload-arch[= ]([^\s\"']+)")


@dataclass(frozen=True)
class ArchRequest:
    """The DeepEP list and the vLLM list to check, with where each came from (for messages)."""

    archs: tuple[str, ...]
    archs_origin: str
    vllm_archs: tuple[str, ...] | None = None
    vllm_origin: str | None = None
    vllm_where: tuple[str, int] | None = None  # file and line the vLLM list is written at
    target: str = "ci_base"  # the stage whose build is followed
    build_args: tuple[tuple[str, str], ...] = ()  # further --build-arg values, as given


def _f(df: vd.VllmDockerfile, line: int, col: int, rule: str, message: str, fix: str) -> Finding:
    return Finding(df.display, line, col, rule, ERROR, message, fix=fix)


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def _flow(df: vd.VllmDockerfile, req: ArchRequest) -> flowmod.Flow:
    """The build followed once per (file, request): both flow rules read the same result."""
    # The cache holds the file itself, so that `is` (not an id a freed object's successor may reuse) decides.
    if _FLOW_CACHE.get("df") is not df or _FLOW_CACHE.get("req") != req:
        args = {vd.ARCH_ARG: archmod.canonical(req.archs), "REMOTE_VLLM": "0", **dict(req.build_args)}
        if req.vllm_archs is not None:
            args[vd.VLLM_ARCH_ARG] = archmod.canonical(req.vllm_archs)
        _FLOW_CACHE.update(df=df, req=req, flow=flowmod.follow(df, req.target, args))
    return _FLOW_CACHE["flow"]


_FLOW_CACHE: dict = {}


def _find(where, rule: str, severity: str, message: str, fix: str) -> Finding:
    """A finding at a value's, a call's or a problem's place (file, line, col)."""
    return Finding(where.file, max(where.line, 1), max(where.col, 1), rule, severity, message, fix=fix)


class _Place:
    def __init__(self, file: str, line: int, col: int = 1) -> None:
        self.file, self.line, self.col = file, line, col


def _judge(df: vd.VllmDockerfile, req: ArchRequest, kind: str) -> list[Finding]:
    flow = _flow(df, req)
    rule = "deepep-arch-source" if kind == "deepep" else "rocshmem-gpu-targets"
    what = "DeepEP's setup.py" if kind == "deepep" else "rocSHMEM's all_backends"
    stage_name = vd.DEEPEP_STAGE if kind == "deepep" else vd.ROCSHMEM_STAGE
    # DeepEP keeps only the archs it supports (its setup.py filters); asking for others is deepep-unsupported-arch.
    want = archmod.canonical([a for a in req.archs if a in archmod.DEEPEP_ARCHS] if kind == "deepep" else req.archs)
    fix = (f'export PYTORCH_ROCM_ARCH="${{{vd.ARCH_ARG}}}" before DeepEP\'s setup.py (it reads only PYTORCH_ROCM_ARCH)'
           if kind == "deepep" else f'pass -DGPU_TARGETS="${{{vd.ARCH_ARG}}}" to rocSHMEM\'s all_backends')  # fmt: skip
    if not want:
        return []  # nothing DeepEP can build was asked for: deepep-unsupported-arch is the finding
    calls = [c for c in flow.calls if c.kind == kind]
    var = "PYTORCH_ROCM_ARCH" if kind == "deepep" else "-DGPU_TARGETS"
    out: list[Finding] = []
    if not calls:
        if stage_name not in flow.stages and not any(df.stage(n) is None for n in [stage_name]):
            return []  # the target builds no DeepEP/rocSHMEM: nothing to judge
        stage = df.stage(stage_name)
        warned = [p for p in flow.problems if p.severity == "warning"]
        line = stage.line if stage else 1
        if warned or any(p.severity == ERROR for p in flow.problems):
            return []  # a RUN that fails for certain is the finding; one not followed may be the build
        return [_find(_Place(df.display, line), rule, ERROR, f"{req.target} builds no {what}: the stages it installs "
                      f"({', '.join(flow.stages) or 'none'}) never run it", "restore the build step")]  # fmt: skip
    for call in calls:
        val = call.value
        if val is None:
            out.append(_find(call, rule, ERROR,
                             f"rocSHMEM is built without -DGPU_TARGETS (stage {call.stage}): the arch list never "
                             "reaches it", fix))  # fmt: skip
            continue
        if val.text is None:
            out.append(_find(call, "arch-flow-unfollowed", WARNING,
                             f"{what} in stage {call.stage}: its arch list cannot be known before the build "
                             f"({val.why}); the DeepEP check after the build decides", fix))  # fmt: skip
            continue
        at = call if val.file == "--build-arg" or val.line <= 0 else val
        origin = "the build argument" if val.file == "--build-arg" else f"{val.file}:{val.line}"
        if kind == "deepep":
            got = flowmod.deepep_effective(val.text)
            if got is None:
                out.append(_find(at, rule, ERROR,
                                 f"DeepEP's PYTORCH_ROCM_ARCH is {val.text!r} (set at {origin}): DeepEP's setup.py "
                                 "keeps none of it and the build fails", fix))  # fmt: skip
                continue
            shown = repr(val.text) if val.text.strip() else "empty (setup.py's default gfx942;gfx950)"
        else:
            if not val.text.strip():
                out.append(_find(at, rule, ERROR,
                                 f"rocSHMEM's -DGPU_TARGETS is empty (from {origin}, stage {call.stage}): "
                                 f"{vd.ARCH_ARG} is not set there, and the arch list never reaches rocSHMEM", fix))
                continue
            try:
                got = archmod.parse_arch_list(val.text, what="-DGPU_TARGETS")
            except Exception:  # noqa: BLE001 (a UsageError: not an arch list)
                out.append(
                    _find(
                        at,
                        rule,
                        ERROR,
                        f"rocSHMEM's -DGPU_TARGETS is {val.text!r} (set at {origin}), not an arch list",
                        fix,
                    )
                )
                continue
            shown = repr(val.text)
        if archmod.canonical(got) != want:
            out.append(
                _find(
                    at,
                    rule,
                    ERROR,
                    f"{what} (stage {call.stage}, {call.file}:{call.line}) builds for "
                    f"{archmod.canonical(got)}, "
                    f"not the requested {want}: {var} is {shown} (from {origin})",
                    fix,
                )
            )
    return out


def rocshmem_targets(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    return _judge(df, req, "rocshmem")


def deepep_arch_source(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    return _judge(df, req, "deepep")


def flow_problems(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    """Where the build fails for certain (a bash-only expansion under dash) or cannot be followed."""
    seen: set[tuple] = set()
    out = []
    flow = _flow(df, req)
    # A step it cannot follow matters where it could change a list: in a stage that runs a build (or one it
    # is built FROM), or anywhere when a build was not found at all.
    builders = {c.stage for c in flow.calls} | {n for n in (vd.DEEPEP_STAGE, vd.ROCSHMEM_STAGE) if n in flow.stages}
    relevant = {s.name for n in builders for s in df.ancestors(df.stage(n))} if builders else None
    for p in flow.problems:
        if p.severity != ERROR and relevant is not None and p.stage not in relevant:
            continue
        key = (p.file, p.line, p.message)
        if key in seen:
            continue
        seen.add(key)
        rule = "shell-bad-substitution" if p.severity == ERROR else "arch-flow-unfollowed"
        fix = (
            'under the default SHELL /bin/sh (dash) use POSIX expansions, or SHELL ["/bin/bash", "-c"]'
            if p.severity == ERROR
            else "the DeepEP check after the build decides; `rocmci image.build` runs it"
        )
        out.append(_find(p, rule, p.severity, p.message, fix))
    return out


def deepep_supported(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    unsupported = [a for a in req.archs if a not in archmod.DEEPEP_ARCHS]
    if not unsupported:
        return []
    decl = df.arg(vd.ARCH_ARG)
    stage = df.stage(vd.ROCSHMEM_STAGE)
    line = decl.line if decl else (stage.line if stage else 1)
    supported = ", ".join(archmod.describe(a) for a in archmod.DEEPEP_ARCHS)
    return [
        _f(
            df,
            line,
            1,
            "deepep-unsupported-arch",
            f"{req.archs_origin} asks DeepEP for {', '.join(archmod.describe(a) for a in unsupported)}; "
            f"DeepEP builds only {supported} (source: {archmod.DEEPEP_ARCHS_SOURCE})",
            f"drop {', '.join(unsupported)} from the DeepEP list",
        )
    ]


def vllm_superset(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    if req.vllm_archs is None:
        return []
    missing = [a for a in req.archs if a not in req.vllm_archs]
    if not missing:
        return []
    if req.vllm_where is not None:
        file, line = req.vllm_where
    else:
        decl = next(iter(df.declarations(vd.VLLM_ARCH_ARG)), None)
        file, line = df.display, decl.line if decl else 1
    finding = _f(
        df,
        line,
        1,
        "vllm-arch-superset",
        f"vLLM is built for {archmod.canonical(req.vllm_archs)} ({req.vllm_origin}), which lacks "
        f"{', '.join(missing)} that DeepEP is built for: vLLM's own kernels would be missing there",
        f"add {', '.join(missing)} to vLLM's list (--vllm-arch, or PYTORCH_ROCM_ARCH in {vd.BAKE_FILE})",
    )
    return [Finding(file, finding.line, 1, finding.rule, ERROR, finding.message, fix=finding.fix)]


def offload_arch(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    out = []
    for stage in df.stages:
        for ins in stage.instructions:
            if ins.cmd not in ("RUN", "ENV", "ARG"):
                continue
            for m in _FLAGS_ASSIGN.finditer(ins.original):
                # One --offload-arch per arch is what clang takes (DeepEP's setup.py emits one per arch);
                # the mistake is one flag naming several.
                for offload in _OFFLOAD.findall(_unquote(m.group(2))):
                    targets = [t for t in re.split(r"[;,]", offload) if t]
                    if len(targets) <= 1:
                        continue
                    line, col = df.find(ins, f"{m.group(1)}=")
                    out.append(
                        _f(
                            df,
                            line,
                            col,
                            "offload-arch-multi",
                            f"{m.group(1)} names {len(targets)} archs in one --offload-arch ({', '.join(targets)}); "
                            "an --offload-arch flag takes one arch",
                            f"drop --offload-arch from {m.group(1)}: DeepEP's setup.py adds one per arch "
                            f"of PYTORCH_ROCM_ARCH; set the list with {vd.ARCH_ARG}",
                        )
                    )
                    break
    return out


RULES = (rocshmem_targets, deepep_arch_source, flow_problems, deepep_supported, vllm_superset, offload_arch)
# A different list only matters when it can reach both builds; these rules say it cannot.
FLOW_RULES = ("rocshmem-gpu-targets", "deepep-arch-source")


def check(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    return sorted(f for rule in RULES for f in rule(df, req))


def summary(df: vd.VllmDockerfile, req: ArchRequest) -> str:
    vllm = f"; vLLM's {archmod.canonical(req.vllm_archs)} covers it" if req.vllm_archs else ""
    warned = [f for f in check(df, req) if f.severity == WARNING]
    if warned:
        return (
            f"{df.display}: no error, but {len(warned)} step(s) the check cannot follow (the warnings above): "
            f"whether {vd.ARCH_ARG}={archmod.canonical(req.archs)} reaches them is for the DeepEP check after "
            "the build (`rocmci image.build` runs it)"
        )
    return (
        f"{df.display}: arch flow whole: {vd.ARCH_ARG}={archmod.canonical(req.archs)} reaches rocSHMEM "
        f"(-DGPU_TARGETS) and DeepEP (PYTORCH_ROCM_ARCH){vllm}"
    )


def render(findings: list[Finding]) -> str:
    return "\n".join(f"{f.text()}\n    fix: {f.fix}" for f in findings)
