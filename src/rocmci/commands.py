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
        print(table(("setting", "value", "source"), resolved.rows(), styles={"default": "dim"}))
        print(f"\nworkspace: {resolved.workspace}")
    return 0


def doctor(*, purpose: str | None = None, kfd_root: str = "/", as_json: bool = False) -> int:
    from rocmci import doctor as doc
    from rocmci.engine import Engine
    from rocmci.errors import UsageError
    from rocmci.report import lines as report_lines

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
        print(table(("check", "status", "detail"), doc.rows(checks, purpose), styles=doc.STATUS_STYLES))
        print("\n" + report_lines(doc.verdict(checks)))
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
    """(generator options, bootstrap decision): the inputs bootstrap-amd.sh would give the template."""
    from rocmci.errors import UsageError
    from rocmci.pipeline import service

    if not _CI_IMAGE.fullmatch(s.ci_image):
        raise UsageError(
            f"ci_image {s.ci_image!r} is not an image reference",
            hint="e.g. rocm/vllm-ci:build-$BUILDKITE_BUILD_ID; it is written into the pipeline's env",
        )
    changed = service.changed_files(changed_file, diff_base, s.workspace)
    return service.options(s, changed, run_all, nightly)


def pipeline_generate(
    *,
    source: str | None = None,
    changed_files: str | None = None,
    diff_base: str | None = None,
    mirror_hw: str | None = None,
    branch: str | None = None,
    run_all: bool = False,
    nightly: bool = False,
    arch: str | None = None,
    out: str | None = None,
    fmt: str = "yaml",
    keep_going: bool = False,
    annotation: str | None = None,
) -> int:
    from rocmci.errors import FindingsError, UsageError
    from rocmci.files import write_atomic
    from rocmci.pipeline import keepgoing, service

    if fmt not in ("yaml", "json"):
        raise UsageError(f"unknown --format {fmt!r}", hint="choose yaml or json")
    s = _settings(mirror_hw=mirror_hw, arch=arch, branch=branch)
    i = service.inputs(s, source)
    opts, decision = _generate_options(s, changed_files, diff_base, run_all, nightly)
    if decision.skip:
        eprint(f"no pipeline: {decision.skip} (as bootstrap-amd.sh)")
        return 0
    with _no_gc():
        src, generated, report = service.build(i, opts, s.workspace)
    if report.findings:
        eprint(service.format_report(report, as_json=False))
    pipeline = generated.pipeline
    if report.errors and not keep_going:
        raise FindingsError(
            f"{report.errors} error(s) in the generated pipeline; nothing was written",
            hint="fix the findings above (file:line), or pass --keep-going to hold those steps behind block steps",
        )
    if report.errors:
        pipeline, held = keepgoing.hold(src, generated, report.findings)
        for h in held:
            eprint(f"--keep-going: {h.title}: {'held behind a block step' if h.how == 'held' else 'left out'}")
    else:
        held = []
    if annotation and report.findings:
        write_atomic(Path(annotation), keepgoing.annotation(i.source_name, report.findings, held))
    text = service.render(pipeline, fmt, i.source_name)
    if out:
        write_atomic(Path(out), text)
        eprint(f"wrote {out}: {len(pipeline['steps'][0]['steps'])} steps in group {pipeline['steps'][0]['group']!r}")
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
            opts, _ = _generate_options(s, None, None, run_all=False, nightly=False)
            _, _, report = service.build(i, opts, s.workspace)
    print(service.format_report(report, as_json))
    return 1 if report.errors else 0


def pipeline_plan(
    *,
    source: str | None = None,
    changed_files: str | None = None,
    diff_base: str | None = None,
    mirror_hw: str | None = None,
    branch: str | None = None,
    run_all: bool = False,
    nightly: bool = False,
    as_json: bool = False,
) -> int:
    from rocmci.pipeline import service

    s = _settings(mirror_hw=mirror_hw, branch=branch)
    i = service.inputs(s, source)
    opts, decision = _generate_options(s, changed_files, diff_base, run_all, nightly)
    plan = service.plan(i, opts, decision)
    if as_json:
        print(to_json(plan))
        return 0
    print("\n".join(plan["bootstrap"]))
    if decision.skip:
        return 0
    order = {"run": 0, "block": 1, "skip": 2}
    rows = sorted(((d["action"], d["pool"], d["label"], d["reason"]) for d in plan["steps"]), key=lambda r: order[r[0]])
    print(table(("action", "pool", "step", "why"), rows))
    counts = {a: sum(r[0] == a for r in rows) for a in order}
    print(f"\n{counts['run']} run, {counts['block']} blocked, {counts['skip']} not on {opts.inputs.mirror_hw}")
    return 0


def pipeline_diff(
    *,
    template: str,
    source: str | None = None,
    changed_files: str | None = None,
    branch: str | None = None,
    mirror_hw: str | None = None,
    run_all: bool = False,
    nightly: bool = False,
    examples: int | str = 20,
    as_json: bool = False,
) -> int:
    """Render a ci-infra template the way bootstrap-amd.sh does and compare it with rocmci's generator."""
    from rocmci.errors import UsageError
    from rocmci.pipeline import service

    if changed_files and (run_all or nightly):
        raise UsageError("give --changed-files, --run-all or --nightly, not several")
    s = _settings(mirror_hw=mirror_hw, branch=branch)
    i = service.inputs(s, source)
    opts, decision = _generate_options(s, changed_files, None, run_all, nightly)
    if decision.skip:
        eprint(f"no pipeline to compare: {decision.skip}")
        return 0
    comparison = service.diff(Path(template), i, opts)
    if as_json:
        print(to_json([d.__dict__ | {"allowed": d.allowed} for d in comparison.differences]))
    else:
        print(comparison.summary(examples=_int("--examples", examples, minimum=0)))
    return 1 if comparison.unexpected else 0


def configured_image(s) -> str:
    """The image workloads use: the 'image' setting, else the tag `image.build` gives the test image."""
    from rocmci.image.plan import image_tag

    if s.image:
        return s.image
    vllm_archs = _archs(s.vllm_arch) if s.vllm_arch else None
    return image_tag(s.image_repo, "test", _archs(s.require("arch")), vllm_archs)


# An image reference, plus Buildkite's upload-time $VAR / ${VAR}, for tags written into the pipeline.
_CI_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*(?:\$\{?[A-Z_][A-Z0-9_]*\}?[A-Za-z0-9._-]*)*")


def _image_settings(vllm_src, arch=None, vllm_arch=None, **more):
    return _settings(vllm_src=vllm_src, arch=arch, vllm_arch=vllm_arch, **more)


def image_check(
    *, vllm_src: str | None = None, arch: str | None = None, vllm_arch: str | None = None, as_json: bool = False
) -> int:
    from rocmci.image import check as checkmod
    from rocmci.image import service

    co, req, findings = service.run_check(_image_settings(vllm_src, arch, vllm_arch))
    if as_json:
        print(to_json({"file": str(co.dockerfile.path), "archs": list(req.archs), "ok": not findings,
                       "findings": [f.as_dict() for f in findings]}))
    elif findings:
        print(checkmod.render(findings))
        print(f"\n{len(findings)} error(s) in the arch flow of {co.dockerfile.path}")
    else:
        print(checkmod.summary(co.dockerfile, req))
    return 1 if findings else 0


def _print_commands(commands: list[tuple[str, list[str]]]) -> None:
    for comment, argv in commands:
        if comment:
            print(f"# {comment}")
        print(shell_lines(argv))


def _client(engine) -> str:
    from rocmci.errors import EngineError

    try:
        return engine.client
    except EngineError:
        return "docker"


def image_build(
    *,
    vllm_src: str | None = None,
    arch: str | None = None,
    vllm_arch: str | None = None,
    deepep_ref: str | None = None,
    rocshmem_ref: str | None = None,
    base_image: str | None = None,
    target: str = "test",
    ci_base: str | None = None,
    tag: str | None = None,
    push: bool = False,
    force: bool = False,
    dry_run: bool = False,
    network: str | None = None,
) -> int:
    from rocmci import arch as archmod
    from rocmci.engine import Engine
    from rocmci.image import check as checkmod
    from rocmci.image import plan as planmod
    from rocmci.image import service

    s = _image_settings(
        vllm_src, arch, vllm_arch, deepep_ref=deepep_ref, rocshmem_ref=rocshmem_ref, base_image=base_image,
        build_network=network,
    )
    # Arch problems surface before anything slow: a wrong list costs hours of build otherwise.
    archmod.require_deepep_support(service.deepep_archs(s))
    co, req, findings = service.run_check(s)
    refused = service.refusal(co, req, findings)
    if refused:
        if refused.exit_code == 1:  # findings in the file: show them all, as image.check would
            eprint(checkmod.render(findings))
        raise refused
    for f in findings:
        eprint(f"{f.text()} (building the file's default list, as vLLM does)")
    plan = planmod.plan_build(
        service.build_request(s, co, req, target=target, tag=tag, ci_base=ci_base, push=push, force=force)
    )
    engine = Engine(s.docker)
    if dry_run:
        client = _client(engine)
        commands = []
        for step in plan.steps:
            note = f"{step.target}: skipped when {step.tag} carries {planmod.INPUT_HASH_LABEL}={step.input_hash}"
            commands.append((note, ["env", "DOCKER_BUILDKIT=1", *step.argv(client)]))
            if step.push:
                commands.append(("", step.push_argv(client)))
        _print_commands(commands)
        for note in plan.notes:
            eprint(f"note: {note}")
        eprint(f"dry run: image {plan.tag}; nothing was built")
        return 0
    from rocmci.image.build import build

    live = sys.stderr.isatty() and not os.environ.get("CI")
    build(plan, engine, live=live, log=eprint)
    return 0


def image_retarget(
    *,
    from_image: str,
    arch: str | None = None,
    vllm_src: str | None = None,
    tag: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    network: str | None = None,
) -> int:
    from rocmci.engine import Engine
    from rocmci.errors import UsageError
    from rocmci.image import retarget as retargetmod
    from rocmci.image import service
    from rocmci.image.build import build_step

    if not from_image:
        raise UsageError("image.retarget needs --from IMAGE", hint="name a vLLM ROCm image, e.g. rocm/vllm-ci:<commit>")
    s = _image_settings(vllm_src, arch, build_network=network)
    co = service.checkout(s)
    engine = Engine(s.docker)
    identity = from_image
    if not dry_run:
        done = engine.cli("image", "inspect", "--format", "{{.Id}}", from_image, check=False)
        if done.returncode != 0:
            raise UsageError(f"no image {from_image} on this engine", hint="build or pull it first")
        identity = done.stdout.strip()
    request = service.retarget_request(s, co, from_image=from_image, from_identity=identity, tag=tag, force=force)
    overlay = retargetmod.OVERLAY.read_text(encoding="utf-8")
    plan = retargetmod.plan_retarget(request, overlay)
    if dry_run:
        client = _client(engine)
        rows = [(arg, plan.step.build_args[arg], source) for arg, source in plan.sources.items()]
        eprint(table(("build arg", "value", "read from"), rows))
        _print_commands(
            [
                (f"skipped when {plan.step.tag} carries its input hash", ["env", "DOCKER_BUILDKIT=1",
                                                                            *plan.step.argv(client)]),
                ("then, inside the result:", plan.verify_argv(client)),
            ]
        )
        eprint(f"dry run: image {plan.step.tag}; nothing was built")
        return 0
    live = sys.stderr.isatty() and not os.environ.get("CI")
    result = build_step(plan.step, engine, live=live, log=eprint)
    done = engine.cli(*plan.verify_argv(engine.client)[1:], timeout=600, check=False)
    verified = retargetmod.check_verification(done.stdout, done.returncode, plan.step.tag)
    action = "built" if result.built else "reused"
    eprint(f"{action} {plan.step.tag}: deep_ep imports; code objects for {';'.join(verified['found'])}")
    return 0


LABEL_ROWS = (
    ("target", "rocmci.target"),
    ("archs (DEEPEP_ROCM_ARCH)", "rocmci.arch"),
    ("vLLM archs", "rocmci.vllm.arch"),
    ("DeepEP", "rocmci.deepep.repo", "rocmci.deepep.ref"),
    ("DeepEP NIC", "rocmci.deepep.nic"),
    ("DeepEP setup flags", "rocmci.deepep.flags"),
    ("rocSHMEM", "rocmci.rocshmem.repo", "rocmci.rocshmem.ref"),
    ("vLLM commit", "rocmci.vllm.commit"),
    ("base image", "rocmci.base-image"),
    ("CI base image", "rocmci.ci-base-image"),
    ("retargeted from", "rocmci.retarget.from"),
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

    no_container = bool(kw.get("no_container"))
    # A native CI pod names its workspace; vLLM's runner defaults to the image's /vllm-workspace.
    default_workdir = (os.environ.get("VLLM_CI_WORKSPACE") or WORKSPACE) if no_container else WORKSPACE
    return RunOptions(
        image=configured_image(s),
        results_dir=s.path("results_dir"),
        timeout=float(_int("--timeout", kw.pop("timeout") or s.run_timeout, minimum=1)),
        network=s.run_network or None,
        shm_size=s.shm_size,
        memory=s.run_memory or None,
        hf_cache=s.hf_cache,
        env=parse_env(kw.pop("env") or ()),
        workdir=kw.pop("workdir") or default_workdir,
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


def _vllm_src(s) -> Path | None:
    from rocmci.errors import UsageError

    if not s.vllm_src:
        return None
    path = s.path("vllm_src")
    if not path.is_dir():
        raise UsageError(
            f"--vllm-src {s.vllm_src} is not a folder ({s.origin('vllm_src')})", hint="point it at a vLLM checkout"
        )
    return path


def _labels(engine, image: str, *, tolerant: bool) -> dict[str, str] | None:
    """The image's labels; None when there is no such image, or (tolerant) when the engine cannot be asked."""
    from rocmci.errors import EngineError

    try:
        return engine.image_labels(image)
    except EngineError:
        if tolerant:
            return None
        raise


def _workaround_checks(s, registry, engine, opts, kinds: set[str]):
    """Check the registry against the evidence at hand; the ids to leave out and a note per entry."""
    from rocmci import workarounds as wa
    from rocmci.errors import FindingsError

    labels = None if opts.no_container else _labels(engine, opts.image, tolerant=True)
    sources = wa.Sources(vllm_src=_vllm_src(s), image=opts.image, labels=labels)
    obsolete, notes = wa.run_decisions(wa.check_all(registry, sources), kinds)
    if obsolete and opts.strict:
        raise FindingsError(
            f"obsolete workaround(s) still in the registry: {', '.join(sorted(obsolete))}",
            hint="remove them from workarounds.yaml (see `invoke workarounds`), or run without --strict",
        )
    return obsolete, notes


def _run(workloads, opts, registry, as_json: bool, engine, notes=()) -> int:
    from rocmci import runs

    prepared = runs.prepare(workloads, opts, None if opts.no_container else engine, notes)
    if opts.dry_run:
        print("\n".join(runs.dry_run_lines(prepared, engine, opts)))
        eprint("dry run: nothing was started")
        return 0
    for note in prepared.notes:
        eprint(f"rocmci: {note}")
    results = runs.execute(prepared, opts, engine, registry, out=eprint if as_json else print)
    return runs.report(results, opts, as_json, prepared.notes, prepared.files)


def _probe_example(engine, opts) -> str:
    """The DP example's path in this vLLM: it moved to examples/features/ in April 2026."""
    from rocmci import container as ctr
    from rocmci import workloads as wl

    moved = f"{opts.workdir}/{wl.DP_EXAMPLE_MOVED}"
    if opts.no_container:
        classic_only = not Path(moved).is_file() and Path(f"{opts.workdir}/{wl.DP_EXAMPLE}").is_file()
        return wl.DP_EXAMPLE if classic_only else wl.DP_EXAMPLE_MOVED
    if _labels(engine, opts.image, tolerant=opts.dry_run) is None:
        return wl.DP_EXAMPLE_MOVED  # nothing to look into (dry run without the image): vLLM's current path
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
    vllm_src: str | None = None,
    as_json: bool = False,
    **options: Any,
) -> int:
    from rocmci import workloads as wl
    from rocmci.engine import Engine

    s = _settings(image=image, vllm_src=vllm_src)
    opts = _run_options(s, **options)
    engine = Engine(s.docker)
    sizes = {"tp": _int("--tp", tp, minimum=1), "dp": _int("--dp", dp, minimum=1)}
    length = _int("--max-model-len", max_model_len, minimum=1)
    extra_args = _split("--extra", extra)
    registry = _registry(s)
    _, notes = _workaround_checks(s, registry, engine, opts, {"dp-example"})
    path = example or _probe_example(engine, opts)
    workload = wl.dp_example(
        model=model, max_model_len=length, backend=backend, extra=extra_args, example=path, **sizes
    )
    return _run([workload], opts, registry, as_json, engine, notes)


def run_moe_tests(
    *,
    image: str | None = None,
    mode: str = "both",
    keyword: str | None = None,
    extra: str | None = None,
    shards: int | str = 1,
    vllm_src: str | None = None,
    as_json: bool = False,
    **options: Any,
) -> int:
    from rocmci import workloads as wl
    from rocmci.engine import Engine

    s = _settings(image=image, vllm_src=vllm_src)
    opts = _run_options(s, **options)
    engine = Engine(s.docker)
    registry = _registry(s)
    modes = wl.parse_modes(mode)
    count = _int("--shards", shards, minimum=1)
    obsolete, notes = _workaround_checks(s, registry, engine, opts, {"moe-tests"})
    results_path = str(opts.results_dir.resolve()) if opts.no_container else wl.RESULTS_MOUNT
    workloads = wl.moe_tests(
        modes=modes,
        registry=registry,
        keyword=keyword,
        extra=_split("--extra", extra),
        shards=count,
        results_path=results_path,
        obsolete=obsolete,
    )
    return _run(workloads, opts, registry, as_json, engine, notes)


def workarounds(
    *, vllm_src: str | None = None, image: str | None = None, strict: bool = False, as_json: bool = False
) -> int:
    """Each workaround: applies or obsolete, with the evidence (file:line, commit or label)."""
    from rocmci import results as res
    from rocmci import workarounds as wa
    from rocmci.errors import FindingsError, UsageError

    s = _settings(vllm_src=vllm_src)
    registry = _registry(s)
    labels = None
    if image:
        from rocmci.engine import Engine

        labels = Engine(s.docker).image_labels(image)
        if labels is None:
            raise UsageError(f"no image {image} on this engine", hint="build it or name another tag")
    sources = wa.Sources(vllm_src=_vllm_src(s), image=image, labels=labels)
    checks = wa.check_all(registry, sources)
    if as_json:
        print(
            to_json(
                [
                    {
                        "id": c.workaround.id,
                        "status": c.status,
                        "evidence": list(c.evidence) or [c.reason()],
                        "sets": c.workaround.sets,
                        "applies_to": {"workloads": list(c.workaround.workloads), "tests": list(c.workaround.tests)},
                        "refs": {ref: res.ref_url(ref) for ref in c.workaround.refs},
                    }
                    for c in checks
                ]
            )
        )
    else:
        for c in checks:
            w = c.workaround
            sets = ", ".join(f"{k}={v}" for k, v in w.sets.items()) or "-"
            scope = ", ".join(w.workloads) + (f" [{', '.join(w.tests)}]" if w.tests else "")
            print(f"{w.id}: {c.status.upper()}  (sets {sets}; {scope})")
            for line in c.evidence or (c.reason(),):
                print(f"    evidence: {line}")
            for ref in w.refs:
                print(f"    ref: {ref} {res.ref_url(ref) or ''}".rstrip())
        if not sources.any:
            print("\nno evidence given: name a vLLM checkout (--vllm-src PATH) or an image (--image TAG)")
    obsolete = [c.workaround.id for c in checks if c.obsolete]
    if obsolete and strict:
        raise FindingsError(
            f"obsolete workaround(s): {', '.join(obsolete)}",
            hint="remove them from workarounds.yaml and the code they cover",
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
