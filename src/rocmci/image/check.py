"""The arch-flow check of vLLM's Dockerfile: one list, DEEPEP_ROCM_ARCH, must reach rocSHMEM and DeepEP.

One function per rule; each returns findings (file:line:col, rule, message, fix). Nothing here runs
Docker: the file, the requested lists and where they came from are all it needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocmci import arch as archmod
from rocmci.findings import ERROR, Finding
from rocmci.image import vllm_dockerfile as vd

_GPU_TARGETS = re.compile(r"-DGPU_TARGETS=(\"[^\"]*\"|'[^']*'|\S+)")
_ARCH_ASSIGN = re.compile(r"(?:\bexport\s+)?\bPYTORCH_ROCM_ARCH=(\"[^\"]*\"|'[^']*'|[^\s;&|]*)")
_USES_ARCH_ARG = re.compile(r"\$\{?" + vd.ARCH_ARG + r"\b")
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


def _f(df: vd.VllmDockerfile, line: int, col: int, rule: str, message: str, fix: str) -> Finding:
    return Finding(df.display, line, col, rule, ERROR, message, fix=fix)


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def rocshmem_targets(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    rule = "rocshmem-gpu-targets"
    stage = df.stage(vd.ROCSHMEM_STAGE)
    if stage is None:
        return [_f(df, 1, 1, rule, f"no {vd.ROCSHMEM_STAGE} stage: nothing builds rocSHMEM", "restore the stage")]
    run = next((r for r in stage.runs() if "all_backends" in r.original or "GPU_TARGETS" in r.original), None)
    if run is None:
        return [
            _f(df, stage.line, 1, rule, f"{vd.ROCSHMEM_STAGE} never runs rocSHMEM's all_backends build", "restore it")
        ]
    body = run.value[0] if run.value else ""
    m = _GPU_TARGETS.search(body)
    fix = f'pass -DGPU_TARGETS="${{{vd.ARCH_ARG}}}" to all_backends'
    if m is None:
        line, col = df.find(run, "all_backends")
        return [_f(df, line, col, rule, "rocSHMEM is built without -DGPU_TARGETS: the arch list never reaches it", fix)]
    line, col = df.find(run, "-DGPU_TARGETS=")
    value = _unquote(m.group(1))
    if not _USES_ARCH_ARG.search(value):
        return [
            _f(df, line, col, rule, f"rocSHMEM's -DGPU_TARGETS is hard-coded to {value!r}, not {vd.ARCH_ARG}", fix)
        ]
    if df.arg_in_scope(stage, vd.ARCH_ARG) is None:
        return [
            _f(
                df, line, col, rule,
                f"{vd.ARCH_ARG} is not declared in {vd.ROCSHMEM_STAGE}, so -DGPU_TARGETS expands to nothing",
                f'declare ARG {vd.ARCH_ARG}="gfx942;gfx950" in {vd.ROCSHMEM_STAGE}',
            )
        ]
    return []


def deepep_arch_source(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    rule = "deepep-arch-source"
    stage = df.stage(vd.DEEPEP_STAGE)
    if stage is None:
        return [_f(df, 1, 1, rule, f"no {vd.DEEPEP_STAGE} stage: nothing builds DeepEP", "restore the stage")]
    call = vd.deepep_setup_call(df)
    if call is None:
        return [_f(df, stage.line, 1, rule, f"{vd.DEEPEP_STAGE} never runs DeepEP's setup.py", "restore it")]
    fix = f'export PYTORCH_ROCM_ARCH="${{{vd.ARCH_ARG}}}" (DeepEP\'s setup.py reads only PYTORCH_ROCM_ARCH)'
    body = call.instruction.value[0] if call.instruction.value else ""
    # Every assignment before setup.py counts, not the first: `export ...=${DEEPEP_ROCM_ARCH}` followed by
    # `PYTORCH_ROCM_ARCH=gfx942 python3 setup.py` builds gfx942 only. The first hard-coded one is the finding.
    cut = body.find("setup.py")
    assigns = [a for a in _ARCH_ASSIGN.finditer(body) if cut < 0 or a.start() < cut]
    m = next((a for a in assigns if not _USES_ARCH_ARG.search(_unquote(a.group(1)))), None)
    m = m or (assigns[-1] if assigns else None)
    if m is not None:
        line, col = df.find(call.instruction, m.group(0))
        value = _unquote(m.group(1))
    else:
        env = _nearest_env(df, stage, "PYTORCH_ROCM_ARCH")
        if env is None:
            return [
                _f(
                    df, call.line, 1, rule,
                    f"DeepEP's PYTORCH_ROCM_ARCH is not set from {vd.ARCH_ARG}: it is whatever the base image has",
                    fix,
                )
            ]
        line, col, value = env
    if not _USES_ARCH_ARG.search(value):
        ros = next((r for r in (df.stage(vd.ROCSHMEM_STAGE) or stage).runs() if "GPU_TARGETS" in r.original), None)
        where = f" (line {df.find(ros, '-DGPU_TARGETS=')[0]})" if ros else ""
        return [
            _f(
                df, line, col, rule,
                f"DeepEP's PYTORCH_ROCM_ARCH is {value!r}, not {vd.ARCH_ARG}: an arch list given to the build "
                f"reaches rocSHMEM's -DGPU_TARGETS{where} only, and DeepEP is still built for {value!r}",
                fix,
            )
        ]
    if df.arg_in_scope(stage, vd.ARCH_ARG) is None:
        return [
            _f(
                df, line, col, rule,
                f"{vd.ARCH_ARG} is not declared in {vd.DEEPEP_STAGE} or a stage it is built FROM: "
                "PYTORCH_ROCM_ARCH would be empty and DeepEP would build its own default",
                f"declare ARG {vd.ARCH_ARG} in {vd.DEEPEP_STAGE}",
            )
        ]
    return []


def _nearest_env(df: vd.VllmDockerfile, stage: vd.Stage, name: str) -> tuple[int, int, str] | None:
    """Where the ENV that sets `name` last in the stage or a stage it is built FROM (nearest first) is, and the
    value it sets: that one value unquoted, not the rest of its line (`ENV A=x OTHER=1` sets x)."""
    whole = re.compile(rf"\b{name}(?=[=\s])")  # not OLD_{name}=, another variable on the same line
    for s in df.ancestors(stage):
        for ins in reversed(s.instructions):
            # ENV's words are name, value pairs (either form, `A=x` or `A x`); a later pair wins, as in Docker.
            pairs = dict(zip(ins.value[::2], ins.value[1::2], strict=False)) if ins.cmd == "ENV" else {}
            if name in pairs:
                return (*df.find(ins, whole), _unquote(pairs[name]))
    return None


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
            df, line, 1, "deepep-unsupported-arch",
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
        df, line, 1, "vllm-arch-superset",
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
                            df, line, col, "offload-arch-multi",
                            f"{m.group(1)} names {len(targets)} archs in one --offload-arch ({', '.join(targets)}); "
                            "an --offload-arch flag takes one arch",
                            f"drop --offload-arch from {m.group(1)}: DeepEP's setup.py adds one per arch "
                            f"of PYTORCH_ROCM_ARCH; set the list with {vd.ARCH_ARG}",
                        )
                    )
                    break
    return out


RULES = (rocshmem_targets, deepep_arch_source, deepep_supported, vllm_superset, offload_arch)
# A different list only matters when it can reach both builds; these rules say it cannot.
FLOW_RULES = ("rocshmem-gpu-targets", "deepep-arch-source")


def check(df: vd.VllmDockerfile, req: ArchRequest) -> list[Finding]:
    return sorted(f for rule in RULES for f in rule(df, req))


def summary(df: vd.VllmDockerfile, req: ArchRequest) -> str:
    vllm = f"; vLLM's {archmod.canonical(req.vllm_archs)} covers it" if req.vllm_archs else ""
    return (
        f"{df.display}: arch flow whole: {vd.ARCH_ARG}={archmod.canonical(req.archs)} reaches rocSHMEM "
        f"(-DGPU_TARGETS) and DeepEP (PYTORCH_ROCM_ARCH){vllm}"
    )


def render(findings: list[Finding]) -> str:
    return "\n".join(f"{f.text()}\n    fix: {f.fix}" for f in findings)
