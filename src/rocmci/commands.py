"""One function per user-facing task. tasks.py parses flags and calls exactly one of these.

Each returns an exit code (0 on success) or raises a RocmciError; output goes to stdout,
diagnostics to stderr. Heavy modules are imported inside the function that needs them so
that `invoke --list` stays fast.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rocmci import settings as settingsmod
from rocmci.report import shell_lines, table, to_json


@contextmanager
def _no_gc():
    """Pipeline work builds many small acyclic objects: cyclic GC passes over them cost time, free nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _int(flag: str, value: Any, *, minimum: int | None = None) -> int:
    """A numeric flag given as text; one clear line when it is not a number."""
    from rocmci.errors import UsageError

    try:
        number = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{flag} must be a whole number, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, got {number}")
    return number


def _settings(**flags: Any) -> settingsmod.Settings:
    return settingsmod.resolve(flags=flags)


def show_settings(*, as_json: bool = False) -> int:
    resolved = _settings()
    if as_json:
        print(to_json({name: {"value": value, "source": source} for name, value, source in resolved.rows()}))
    else:
        print(table(("setting", "value", "source"), resolved.rows()))
        print(f"\nworkspace: {resolved.workspace}")
    return 0


def doctor(*, purpose: str | None = None, kfd_root: str = "/", as_json: bool = False) -> int:
    from rocmci import doctor as doc
    from rocmci.engine import Engine
    from rocmci.errors import UsageError

    if purpose is not None and purpose not in doc.NEEDS:
        doc.needed_failures([], purpose)  # raises the usage error with the choices
    s = _settings()
    root = Path(kfd_root)
    try:
        image_ref = configured_image(s)
    except UsageError:
        image_ref = None  # no Dockerfile to name it from: reported as a missing image
    checks = doc.host_checks(
        root / "sys/class/kfd/kfd/topology/nodes", root / "dev/kfd", str(root / "dev/dri/renderD*")
    )
    checks += doc.engine_checks(Engine(s.docker), image_ref, want_buildkit=purpose in (None, "build"))
    checks.append(doc.disk_check(s.workspace))
    checks.append(_file_check("step file", s.path("source")))
    checks.append(_file_check("inventory", s.path("inventory")))
    if as_json:
        print(to_json([c.__dict__ for c in checks]))
    else:
        needed = {c.name for c in doc.needed_failures(checks, purpose)}
        status = {True: "ok", False: "no"}
        rows = [(c.name, "MISSING" if c.name in needed else status[c.ok], c.detail) for c in checks]
        print(table(("check", "status", "detail"), rows))
        if not any(c.ok for c in checks if c.name == "AMD GPUs"):
            print(
                "\nNo AMD GPU on this host: image builds and pipeline work here; "
                "the DeepEP workloads need an AMD GPU host."
            )
    doc.raise_if_missing(checks, purpose)
    return 0


def _file_check(name: str, path: Path):
    from rocmci.doctor import Check

    return Check(name, path.is_file(), str(path), f"create {path} or point the setting at one")


def _archs(text: str) -> tuple[str, ...]:
    from rocmci.arch import parse_arch_list

    return parse_arch_list(text)


def eprint(*args: Any) -> None:
    print(*args, file=sys.stderr)


def _generate_options(s, changed_file, diff_base, run_all, nightly):
    from rocmci.arch import parse_arch_list
    from rocmci.errors import UsageError
    from rocmci.pipeline import generate as gen
    from rocmci.pipeline import service

    if not _CI_IMAGE.fullmatch(s.ci_image):
        raise UsageError(
            f"ci_image {s.ci_image!r} is not an image reference",
            hint="e.g. rocm/vllm-ci:$BUILDKITE_COMMIT; it becomes part of a shell command in the pipeline",
        )
    return gen.Options(
        image=s.ci_image,
        mirror_hw=s.mirror_hw,
        changed_files=service.changed_files(changed_file, diff_base, s.workspace),
        run_all=run_all,
        nightly=nightly,
        archs=parse_arch_list(s.arch),
    )


def pipeline_generate(
    *,
    source: str | None = None,
    changed_files: str | None = None,
    diff_base: str | None = None,
    mirror_hw: str | None = None,
    run_all: bool = False,
    nightly: bool = False,
    arch: str | None = None,
    out: str | None = None,
    fmt: str = "yaml",
) -> int:
    from rocmci.errors import FindingsError, UsageError
    from rocmci.files import write_atomic
    from rocmci.pipeline import service

    if fmt not in ("yaml", "json"):
        raise UsageError(f"unknown --format {fmt!r}", hint="choose yaml or json")
    s = _settings(mirror_hw=mirror_hw, arch=arch)
    i = service.inputs(s, source)
    opts = _generate_options(s, changed_files, diff_base, run_all, nightly)
    with _no_gc():
        _, generated, report = service.build(i, opts, s.workspace)
    if report.findings:
        eprint(service.format_report(report, as_json=False))
    if report.errors:
        raise FindingsError(
            f"{report.errors} error(s) in the generated pipeline; nothing was written",
            hint="fix the findings above (file:line) and generate again",
        )
    text = service.render(generated.pipeline, fmt, i.source_name)
    if out:
        write_atomic(Path(out), text)
        eprint(f"wrote {out}: {len(generated.pipeline['steps'])} steps")
    else:
        sys.stdout.write(text)
    return 0


def pipeline_validate(
    *,
    source: str | None = None,
    pipeline: str | None = None,
    mirror_hw: str | None = None,
    arch: str | None = None,
    as_json: bool = False,
) -> int:
    from rocmci.errors import UsageError
    from rocmci.pipeline import service

    if source and pipeline:
        raise UsageError("give --source or --pipeline, not both")
    s = _settings(mirror_hw=mirror_hw, arch=arch)
    i = service.inputs(s, source)
    with _no_gc():
        if pipeline:
            report = service.load_pipeline_report(Path(pipeline), service.context(i, s.workspace), s.workspace)
        else:
            opts = _generate_options(s, None, None, run_all=False, nightly=False)
            _, _, report = service.build(i, opts, s.workspace)
    print(service.format_report(report, as_json))
    return 1 if report.errors else 0


def pipeline_plan(
    *,
    source: str | None = None,
    changed_files: str | None = None,
    diff_base: str | None = None,
    mirror_hw: str | None = None,
    run_all: bool = False,
    nightly: bool = False,
    as_json: bool = False,
) -> int:
    from rocmci.pipeline import generate as gen
    from rocmci.pipeline import service
    from rocmci.pipeline.source import load_source

    s = _settings(mirror_hw=mirror_hw)
    i = service.inputs(s, source)
    opts = _generate_options(s, changed_files, diff_base, run_all, nightly)
    src = load_source(i.source_path, i.source_name)
    forced = None if opts.changed_files is None else gen.run_all_trigger(opts.changed_files)
    decisions = [gen.decide(step, opts, forced) for step in src.steps]
    rows = [(d.action, d.step.pool, d.step.label, d.reason) for d in decisions]
    if as_json:
        print(to_json([dict(zip(("action", "pool", "label", "reason"), row, strict=True)) for row in rows]))
        return 0
    order = {"run": 0, "block": 1, "skip": 2}
    print(table(("action", "pool", "step", "why"), sorted(rows, key=lambda r: order[r[0]])))
    counts = {a: sum(r[0] == a for r in rows) for a in order}
    print(f"\n{counts['run']} run, {counts['block']} blocked, {counts['skip']} not on {s.mirror_hw}")
    return 0


def configured_image(s) -> str:
    """The image workloads use: the 'image' setting, else the tag `image.build` gives the configured archs."""
    from rocmci.image.plan import image_tag

    if s.image:
        return s.image
    return image_tag(s.image_repo, s.require("deepep_ref"), _archs(s.require("arch")), None)


_GIT_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")
# The same, plus Buildkite's upload-time $VAR / ${VAR}, for tags written into the pipeline.
_CI_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*(?:\$\{?[A-Z_][A-Z0-9_]*\}?[A-Za-z0-9._-]*)*")


def _vllm_revision(path: Path) -> str:
    """Identifies a local vLLM checkout in the input hash: its commit, and whether it has local changes."""
    import subprocess

    from rocmci.errors import UsageError

    if not path.is_dir():
        raise UsageError(f"--vllm-src {path} is not a folder", hint="point it at a vLLM checkout")
    done = subprocess.run(
        ["git", "-C", str(path), "describe", "--always", "--dirty", "--abbrev=40"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else f"untracked:{path.resolve()}"


def image_build(
    *,
    arch: str | None = None,
    deepep_ref: str | None = None,
    rocshmem_ref: str | None = None,
    base_image: str | None = None,
    target: str = "final",
    tag: str | None = None,
    push: bool = False,
    force: bool = False,
    dry_run: bool = False,
    vllm_src: str | None = None,
    vllm_arch: str | None = None,
    network: str | None = None,
) -> int:
    from rocmci import arch as archmod
    from rocmci.engine import Engine
    from rocmci.errors import EngineError, InputError, UsageError
    from rocmci.gpus import detect_gpus
    from rocmci.image import plan as planmod

    s = _settings(
        arch=arch, deepep_ref=deepep_ref, rocshmem_ref=rocshmem_ref, base_image=base_image, build_network=network
    )
    # Arch problems must surface before anything slow: a wrong list costs hours of build otherwise.
    text = s.require("arch")
    host = [g.arch for g in detect_gpus()] if text.strip().lower() == archmod.NATIVE else []
    archs = archmod.resolve_arch_list(text, host_archs=host, what="--arch")
    archmod.require_deepep_support(archs)
    vllm_archs = archmod.parse_arch_list(vllm_arch, what="--vllm-arch") if vllm_arch else None
    dockerfile = s.path("dockerfile")
    try:
        dockerfile_text = dockerfile.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the Dockerfile: {exc.strerror}", where=str(dockerfile)) from None
    refs_hint = "use a commit, branch or tag name"
    image_hint = "use an image reference like repo/name:tag"
    for flag, value, pattern, hint in (
        ("--deepep-ref", s.require("deepep_ref"), _GIT_REF, refs_hint),
        ("--rocshmem-ref", s.require("rocshmem_ref"), _GIT_REF, refs_hint),
        ("vllm_ref", s.require("vllm_ref"), _GIT_REF, refs_hint),
        ("--base-image", s.require("base_image"), _IMAGE_REF, image_hint),
        ("--tag", tag or "unset", _IMAGE_REF, image_hint),
    ):
        if not pattern.fullmatch(value):
            raise UsageError(f"{flag} {value!r} is not a valid reference", hint=hint)
    build_args = {
        "BASE_IMAGE": s.require("base_image"),
        "DEEPEP_REPO": s.require("deepep_repo"),
        "DEEPEP_BRANCH": s.require("deepep_ref"),
        "DEEPEP_NIC": s.require("deepep_nic"),
        "ROCSHMEM_REPO": s.require("rocshmem_repo"),
        "ROCSHMEM_BRANCH": s.require("rocshmem_ref"),
        "VLLM_REPO": s.require("vllm_repo"),
        "VLLM_BRANCH": s.require("vllm_ref"),
    }
    src = Path(vllm_src).resolve() if vllm_src else None
    request = planmod.BuildRequest(
        dockerfile=dockerfile,
        context=dockerfile.parent,  # the git build copies nothing from the context: keep it small
        archs=archs,
        build_args=build_args,
        image_repo=s.image_repo,
        tag=tag,
        target=target,
        vllm_archs=vllm_archs,
        vllm_src=src,
        vllm_src_revision=_vllm_revision(src) if src else None,
        network=s.build_network or None,
        push=push,
        force=force,
    )
    plan = planmod.plan_build(request, dockerfile_text)
    engine = Engine(s.docker)
    if dry_run:
        try:
            client = engine.client
        except EngineError:
            client = "docker"
        commands = [plan.argv(client)] + ([plan.push_argv(client)] if push else [])
        for n, argv in enumerate(commands):
            prefix = "DOCKER_BUILDKIT=1 " if n == 0 else ""
            print(prefix + shell_lines(argv))
        eprint(f"dry run: tag {plan.tag}, input hash {plan.input_hash}; nothing was built")
        return 0
    from rocmci.image.build import build

    live = sys.stderr.isatty() and not os.environ.get("CI")
    result = build(plan, engine, live=live, log=eprint)
    if result.built:
        eprint(f"built {result.tag} in {result.seconds:.0f}s (archs {archmod.canonical(archs)})")
    return 0


LABEL_ROWS = (
    ("archs (DEEPEP_ROCM_ARCH)", "rocmci.arch"),
    ("vLLM archs", "rocmci.vllm.arch"),
    ("DeepEP", "rocmci.deepep.repo", "rocmci.deepep.ref"),
    ("DeepEP NIC", "rocmci.deepep.nic"),
    ("rocSHMEM", "rocmci.rocshmem.repo", "rocmci.rocshmem.ref"),
    ("vLLM", "rocmci.vllm.repo", "rocmci.vllm.ref"),
    ("vLLM source", "rocmci.vllm.source"),
    ("base image", "rocmci.base-image"),
    ("input hash", "rocmci.input-hash"),
)


def image_inspect(*, tag: str | None = None, as_json: bool = False) -> int:
    from rocmci.engine import Engine
    from rocmci.errors import UsageError

    s = _settings()
    ref = tag or configured_image(s)
    labels = Engine(s.docker).image_labels(ref)
    if labels is None:
        raise UsageError(
            f"no image {ref} on this engine", hint="build it with `invoke image.build` or name another tag"
        )
    if as_json:
        print(to_json({"image": ref, "labels": labels}))
        return 0
    rows = []
    for title, *keys in LABEL_ROWS:
        values = [labels.get(k, "") for k in keys]
        rows.append((title, " @ ".join(v for v in values if v) or "-"))
    rocm = next((v for k, v in sorted(labels.items()) if "rocm" in k.lower() and "version" in k.lower()), None)
    rows.append(("ROCm version", rocm or "unknown (no label)"))
    print(f"{ref}\n")
    print(table(("", "value"), rows))
    return 0


def _run_options(s, **kw: Any):
    from rocmci.runs import RunOptions, parse_env
    from rocmci.workloads import WORKSPACE

    return RunOptions(
        image=configured_image(s),
        results_dir=s.path("results_dir"),
        timeout=float(_int("--timeout", kw.pop("timeout") or s.run_timeout, minimum=1)),
        network=s.run_network or None,
        shm_size=s.shm_size,
        memory=s.run_memory or None,
        hf_cache=s.hf_cache,
        env=parse_env(kw.pop("env") or ()),
        workdir=kw.pop("workdir") or WORKSPACE,
        **kw,
    )


def _split(flag: str, text: str | None) -> tuple[str, ...]:
    """Extra arguments as one quoted string, split like a shell would but never run by one."""
    import shlex

    from rocmci.errors import UsageError

    if not text:
        return ()
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r}: {exc}", hint="balance the quotes") from None


def _registry(s):
    from rocmci.pipeline.service import display_name
    from rocmci.workarounds import load_registry

    path = s.path("workarounds")
    return load_registry(path, display_name(path, s.workspace))


def _run(workloads, opts, registry, as_json: bool, engine) -> int:
    from rocmci import runs

    prepared = runs.prepare(workloads, opts, None if opts.no_container else engine)
    if opts.dry_run:
        print("\n".join(runs.dry_run_lines(prepared, engine)))
        eprint("dry run: nothing was started")
        return 0
    results = runs.execute(prepared, opts, engine, registry, out=eprint if as_json else print)
    return runs.report(results, opts, as_json)


def _probe_example(engine, opts) -> str:
    """The DP example's path in this vLLM: it moved to examples/features/ in April 2026."""
    from rocmci import container as ctr
    from rocmci import workloads as wl

    moved = f"{opts.workdir}/{wl.DP_EXAMPLE_MOVED}"
    if opts.no_container:
        return wl.DP_EXAMPLE_MOVED if Path(moved).is_file() else wl.DP_EXAMPLE
    if engine.image_labels(opts.image) is None:
        return wl.DP_EXAMPLE  # nothing to look into (dry run without the image): the classic path
    return wl.DP_EXAMPLE_MOVED if ctr.file_exists(engine, opts.image, moved) else wl.DP_EXAMPLE


def run_dp_example(
    *,
    image: str | None = None,
    model: str = "Qwen/Qwen1.5-MoE-A2.7B",
    tp: int | str = 1,
    dp: int | str = 2,
    max_model_len: int | str = 2048,
    backend: str = "deepep_high_throughput",
    extra: str | None = None,
    example: str | None = None,
    as_json: bool = False,
    **options: Any,
) -> int:
    from rocmci import workloads as wl
    from rocmci.engine import Engine

    s = _settings(image=image)
    opts = _run_options(s, **options)
    engine = Engine(s.docker)
    sizes = {"tp": _int("--tp", tp, minimum=1), "dp": _int("--dp", dp, minimum=1)}
    length = _int("--max-model-len", max_model_len, minimum=1)
    extra_args = _split("--extra", extra)
    path = example or _probe_example(engine, opts)
    workload = wl.dp_example(
        model=model, max_model_len=length, backend=backend, extra=extra_args, example=path, **sizes
    )
    return _run([workload], opts, _registry(s), as_json, engine)


def run_moe_tests(
    *,
    image: str | None = None,
    mode: str = "both",
    keyword: str | None = None,
    extra: str | None = None,
    shards: int | str = 1,
    as_json: bool = False,
    **options: Any,
) -> int:
    from rocmci import workloads as wl
    from rocmci.engine import Engine

    s = _settings(image=image)
    opts = _run_options(s, **options)
    results_path = str(opts.results_dir.resolve()) if opts.no_container else wl.RESULTS_MOUNT
    workloads = wl.moe_tests(
        modes=wl.parse_modes(mode),
        registry=_registry(s),
        keyword=keyword,
        extra=_split("--extra", extra),
        shards=_int("--shards", shards, minimum=1),
        results_path=results_path,
    )
    return _run(workloads, opts, _registry(s), as_json, Engine(s.docker))


def workarounds(*, image: str | None = None, strict: bool = False, as_json: bool = False) -> int:
    from rocmci import workarounds as wa
    from rocmci.errors import FindingsError, UsageError

    s = _settings()
    registry = _registry(s)
    facts = None
    if image:
        from rocmci import container as ctr
        from rocmci.engine import Engine

        engine = Engine(s.docker)
        labels = engine.image_labels(image)
        if labels is None:
            raise UsageError(f"no image {image} on this engine", hint="build it or name another tag")
        version = labels.get(wa.ROCM_VERSION_LABEL) or ctr.read_file(engine, image, "/opt/rocm/.info/version")
        fixes = {f.strip() for f in labels.get(wa.FIXES_LABEL, "").split(",") if f.strip()}
        facts = wa.ImageFacts(fixes=fixes, rocm_version=version)
    rows = []
    stale = []
    for w in registry:
        reason = wa.stale_reason(w, facts)
        if reason:
            stale.append(w.id)
        status = (
            f"STALE: {reason}" if reason else ("active" if w.applied_by == "rocmci" else f"tracked ({w.applied_by})")
        )
        sets = ", ".join(f"{k}={v}" for k, v in w.sets.items()) or "-"
        scope = f"{w.platform}: {', '.join(w.workloads)}" + (f" [{', '.join(w.tests)}]" if w.tests else "")
        rows.append((w.id, status, sets, scope, ", ".join(w.refs)))
    if as_json:
        print(to_json([dict(zip(("id", "status", "sets", "applies_to", "refs"), r, strict=True)) for r in rows]))
    else:
        print(table(("id", "status", "sets", "applies to", "refs"), rows))
        if facts is not None:
            fixes = ", ".join(sorted(facts.fixes)) or "none"
            print(f"\nimage {image}: ROCm {facts.rocm_version or 'unknown'}; declared fixes: {fixes}")
        else:
            print("\nname an image (--image TAG) to check whether any workaround can be removed")
    if stale and strict:
        raise FindingsError(
            f"stale workaround(s): {', '.join(stale)}", hint="remove them from workarounds.yaml and the code they cover"
        )
    return 0


def run_outcome(*, junit: str, exit_code: int | str, workload: str = "moe-tests", as_json: bool = False) -> int:
    """Classify a run that happened elsewhere (e.g. pytest in a Buildkite step) from its JUnit XML and exit."""
    from rocmci import results as res

    code = _int("--exit-code", exit_code)
    summary = res.parse_junit(Path(junit))
    related = [w for w in _registry(_settings()) if workload in w.workloads and w.applied_by == "rocmci"]
    hint = ""
    if related:
        w = related[0]
        sets = ", ".join(f"{k}={v}" for k, v in w.sets.items())
        hint = f"likely the ROCm runtime teardown crash ({', '.join(w.refs)}); workaround {w.id} sets {sets}"
    outcome, detail = res.classify(code, summary, teardown_hint=hint)
    result = res.Result(workload, outcome, code, 0.0, detail, summary)
    print(res.render_json([result]) if as_json else res.render_table([result]))
    return res.EXIT_CODES[outcome]
