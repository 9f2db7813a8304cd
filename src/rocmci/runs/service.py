"""The run tasks: dp-example, moe-tests, outcome, workarounds. Flags arrive parsed (cli/flags.py).

Everything a run task prints or writes goes through one Redactor: known secrets from the
environment, every --env value and secret-shaped text (so a token typed into --extra never shows),
except names given with --public.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rocmci import settings as settingsmod
from rocmci.gpus import check_root
from rocmci.report import to_json
from rocmci.runs.workloads import WORKSPACE


def _eprint(text: str) -> None:
    """A progress or note line on stderr, through the output gate (credential shapes masked, control and bidi
    characters escaped): commit subjects, paths and step labels come from outside."""
    from rocmci.report import safe

    print(safe(text, limit=None), file=sys.stderr)


def results_dir(s) -> Path:
    """The results folder; an empty setting would be the workspace itself, mounted read-write: refused."""
    from rocmci.errors import UsageError

    if not str(s.results_dir or "").strip():
        raise UsageError(
            f"setting 'results_dir' is empty ({s.origin('results_dir')})",
            hint="name a folder for logs and JUnit XML, e.g. ROCMCI_RESULTS_DIR=results",
        )
    folder = s.path("results_dir")
    # The folder is mounted read-write into every workload container: never the workspace, the checkout, the
    # home folder or a folder holding one of them (`.`, `./`, `..`, `~`, `/`), which a workload could rewrite.
    guarded = {"the workspace": s.workspace, "your home folder": Path.home()}
    if s.vllm_src:
        guarded["the vLLM checkout"] = s.path("vllm_src")
    for what, where in guarded.items():
        real = Path(os.path.realpath(where))
        if folder == real or folder in real.parents:
            holds = "is" if folder == real else "holds"
            raise UsageError(
                f"setting 'results_dir' ({s.origin('results_dir')}) {holds} {what} ({folder}): it is mounted "
                "read-write into workload containers",
                hint="name a folder of its own for logs and JUnit XML, e.g. ROCMCI_RESULTS_DIR=results",
            )
    return folder


def run_image(flags, s, native: bool = False) -> str:
    """--image (any reference), else --build-id's CI image, else the configured image."""
    from rocmci.image_names import configured_image
    from rocmci.runs import images

    if getattr(flags, "build_id", None) and not flags.image:
        return images.build_image(flags.build_id, native)
    return configured_image(s)


def run_options(flags, s, native: bool = False):
    """RunOptions from parsed flags and settings (the settings registry holds the run defaults)."""
    from rocmci.runs.types import RunOptions

    # A native CI pod names its workspace; vLLM's runner defaults to the image's /vllm-workspace.
    default_workdir = (os.environ.get("VLLM_CI_WORKSPACE") or WORKSPACE) if flags.no_container else WORKSPACE
    return RunOptions(
        image=run_image(flags, s, native),
        results_dir=results_dir(s),
        timeout=float(flags.timeout or s.run_timeout),
        network=s.run_network or None,
        shm_size=s.shm_size,
        memory=s.run_memory or None,
        hf_cache=s.hf_cache,
        workdir=flags.workdir or default_workdir,
        host_root=check_root(flags.host_root),
        gpus=flags.gpus,
        skip_preflight=flags.skip_preflight,
        no_container=flags.no_container,
        dry_run=flags.dry_run,
        strict=flags.strict,
        env=flags.env.as_dict(),
        public=flags.public,
        image_local_only=not (flags.image or getattr(flags, "build_id", None) or s.image),
    )


def registry_path(s) -> Path:
    """The workspace's registry when the setting names one (or the default file is there), else the packaged one."""
    path = s.path("workarounds")
    if s.origin("workarounds") == "default" and not os.path.lexists(path):
        from rocmci.workaround_registry import PACKAGED

        return PACKAGED
    return path


def _registry(s):
    from rocmci.errors import RocmciError
    from rocmci.files import display_name
    from rocmci.workaround_registry import load_registry

    path = registry_path(s)
    try:
        return load_registry(path, display_name(path, s.workspace))
    except RocmciError as exc:  # a registry the user named: the line says which setting named it
        if s.origin("workarounds") != "default":
            exc.message = f"setting workarounds ({s.origin('workarounds')}): {exc.message}"  # first: long paths are cut
        raise


def _vllm_src(s) -> Path | None:
    return Path(s.vllm_src) if s.vllm_src else None  # settings checked that it is a vLLM checkout


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
    import tempfile

    from rocmci.errors import FindingsError
    from rocmci.runs import images
    from rocmci.runs import workarounds as wa

    labels = None if opts.no_container else _labels(engine, opts.image, tolerant=True)
    with tempfile.TemporaryDirectory(prefix="rocmci-tests-") as scratch:
        # The test module that will run is the image's own: read from there when the image has one.
        exported = images.export_tests(engine, opts.image, Path(scratch)) if labels is not None else None
        tree, inside = exported if exported else (None, "")
        sources = wa.Sources(
            vllm_src=_vllm_src(s), image=opts.image, labels=labels, image_tree=tree,
            image_workspace=f"{opts.image}:{inside}" if inside else "",
        )  # fmt: skip
        obsolete, notes = wa.run_decisions(wa.check_all(registry, sources), kinds)
    if obsolete and opts.strict:
        raise FindingsError(
            f"obsolete workaround(s) still in the registry: {', '.join(sorted(obsolete))}",
            hint="remove them from the registry (see `rocmci workarounds`), or run without --strict",
        )
    return obsolete, notes


def _run(workloads, opts, registry, as_json: bool, engine, notes=(), pull: bool | None = False) -> int:
    """Plan, then print (dry run) or run and report. `pull`: None when the caller made sure of the image."""
    from rocmci.runs import execute

    if pull is not None and not opts.no_container:
        notes = [*_ensure_image(engine, opts, pull), *notes]
    prepared = execute.prepare(workloads, opts, None if opts.no_container else engine, notes)
    return _run_prepared(prepared, opts, registry, as_json, engine)


def _print_dry_run(prepared, engine, opts, as_json: bool) -> int:
    from rocmci.runs import dryrun

    if as_json:
        print(to_json(dryrun.dry_run_json(prepared, engine, opts)))
    else:
        print("\n".join(dryrun.dry_run_lines(prepared, engine, opts)))
    _eprint("dry run: nothing was started")
    return 0


def _as_jobs(flags, s, src, found, workloads, opts, engine, registry, notes, pull: bool | None = False) -> int | None:
    """The DeepEP workloads as jobs of the step they follow, through the checkout's runner (or the step's
    pod): the step's GPUs and container, the workload's commands. None where that cannot be (no runner in
    the checkout, --no-container): the caller runs them as rocmci's own containers."""
    import dataclasses

    from rocmci.runs import jobs, stepjobs
    from rocmci.runs import steps as st

    checkout = _vllm_src(s)
    if opts.no_container or checkout is None or jobs.runner_of(checkout) is None:
        return None
    generated = st.generated_steps(st.candidates(src, found.step_label), s.mirror_hw, s.ci_image)
    step = next((g for g in generated if g.source_label == found.step_label and g.origin == found.origin), None)
    if step is None:  # the step is not rendered for this mirror: there is no CI job to follow
        return None
    place = jobs.Place(checkout, opts.results_dir.resolve(), opts.hf_cache, opts.host_root, _client(engine),
                       opts.network, tuple(opts.env.items()))  # fmt: skip
    where = stepjobs.checkout_of(checkout)
    if step.native:
        where = stepjobs.image_commit(where, engine, opts.image)
    job_opts = dataclasses.replace(opts, timeout=float(flags.timeout) if flags.timeout else 60.0 * _job_minutes(step))
    prepared = stepjobs.plan_workloads(
        step, workloads, job_opts, engine, where=where, build_id=getattr(flags, "build_id", None),
        image_given=bool(flags.image), place=place,
    )  # fmt: skip
    _pull_and_check(prepared, job_opts, engine, bool(pull))
    prepared.notes[:0] = [*notes, f"as jobs of step {step.label!r} through vLLM's runner ({jobs.RUNNER})"]
    return _run_prepared(prepared, job_opts, registry, flags.json, engine)


def _probe_example(engine, opts) -> str:
    """The DP example's path in this vLLM: it moved to examples/features/ in April 2026."""
    from rocmci.runs import container as ctr
    from rocmci.runs import workloads as wl

    moved = f"{opts.workdir}/{wl.DP_EXAMPLE_MOVED}"
    if opts.no_container:
        classic_only = not Path(moved).is_file() and Path(f"{opts.workdir}/{wl.DP_EXAMPLE}").is_file()
        return wl.DP_EXAMPLE if classic_only else wl.DP_EXAMPLE_MOVED
    if _labels(engine, opts.image, tolerant=opts.dry_run) is None:
        return wl.DP_EXAMPLE_MOVED  # nothing to look into (dry run without engine or image): vLLM's current path
    return wl.DP_EXAMPLE_MOVED if ctr.file_exists(engine, opts.image, moved) else wl.DP_EXAMPLE


def _setup(flags, native: bool = False):
    from rocmci.engine import Engine

    s = settingsmod.resolve(flags={"image": flags.image, "vllm_src": flags.vllm_src})
    opts = run_options(flags, s, native)
    return s, opts, Engine(s.docker, s.engine_timeout), _registry(s)


def _ensure_image(engine, opts, pull: bool) -> list[str]:
    """Pull the image when asked or missing; a dry run only notes that it would. An engine that is down
    is left to preflight, which names it."""
    from rocmci.errors import EngineError
    from rocmci.runs import images

    said: list[str] = []
    try:
        out = said.append if opts.dry_run else _eprint
        images.ensure(engine, opts.image, pull=pull, dry_run=opts.dry_run, out=out, local_only=opts.image_local_only)
    except EngineError:
        if not opts.dry_run:
            raise
    return [line.removeprefix("rocmci: ") for line in said]


def _step_file(s):
    """The step file the DeepEP workloads follow, loaded; (None, why) when there is none to read."""
    from rocmci.errors import InputError
    from rocmci.files import display_name
    from rocmci.pipeline import source as srcmod

    candidates = [s.path("source")]
    if s.vllm_src:
        candidates.append(Path(s.vllm_src) / ".buildkite" / "test-amd.yaml")
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        return None, "no step file found"
    try:
        return srcmod.load_source(path, display_name(path, s.workspace), what=s.describe("source")), ""
    except InputError as exc:
        return None, f"step file unreadable: {exc.one_line()}"


def _check_backend(backend: str, s) -> None:
    """A backend the checkout's vLLM does not list is refused before anything starts."""
    from rocmci.errors import UsageError
    from rocmci.runs import upstream

    known = upstream.backends(_vllm_src(s))
    if known is not None and backend not in known:
        raise UsageError(
            f"--backend {backend} is not one of this vLLM's all2all backends ({upstream.PARALLEL_CONFIG})",
            hint="choose one of: " + ", ".join(known),
        )


def _example_text(engine, opts, example: str) -> str | None:
    from rocmci.runs import container as ctr

    path = example if example.startswith("/") else f"{opts.workdir}/{example}"
    if opts.no_container:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    if _labels(engine, opts.image, tolerant=True) is None:
        return None
    return ctr.read_file(engine, opts.image, path)


def dp_example(flags) -> int:
    from rocmci.runs import upstream
    from rocmci.runs import workloads as wl

    s, opts, engine, registry = _setup(flags)
    _check_backend(flags.backend, s)
    _, notes = _workaround_checks(s, registry, engine, opts, {"dp-example"})
    src, why = _step_file(s)
    found = upstream.find_dp_example(src) if src is not None else None
    env = None
    if found is not None:
        notes = [f"dp-example: the command of step {found.step_label!r} ({found.origin})", *notes]
        env = found.env
    else:
        notes = [f"dp-example: rocmci's seed command ({why or 'no step of the step file runs it'})", *notes]
    if not opts.no_container:  # the example's path and flags are read from the image: pull it first
        notes = [*_ensure_image(engine, opts, flags.pull), *notes]
    example = flags.example or _probe_example(engine, opts)
    example_flags = upstream.parallel_flags(upstream.example_flags(_example_text(engine, opts, example) or ""))
    workload = wl.dp_example(
        model=flags.model, tp=flags.tp, dp=flags.dp, max_model_len=flags.max_model_len, backend=flags.backend,
        extra=flags.extra,
        example=example, flags=example_flags, env=env,
    )  # fmt: skip
    if found is not None:
        code = _as_jobs(flags, s, src, found, [workload], opts, engine, registry, notes, pull=None)
        if code is not None:
            return code
    return _run([workload], opts, registry, flags.json, engine, notes, None)


def moe_tests(flags) -> int:
    from rocmci.report import terminal_mode
    from rocmci.runs import workloads as wl

    s, opts, engine, registry = _setup(flags)
    obsolete, notes = _workaround_checks(s, registry, engine, opts, {"moe-tests"})
    from rocmci.runs import upstream

    results_path = str(opts.results_dir.resolve()) if opts.no_container else wl.RESULTS_MOUNT
    src, why = _step_file(s)
    found = upstream.find_moe(src) if src is not None else None
    target: dict = {}
    if found is not None:
        test_file, options = upstream.pytest_target(found)
        target = {"test_file": test_file, "options": options}
        notes = [f"moe-tests: the pytest command of step {found.step_label!r} ({found.origin}), split by mode", *notes]
    else:
        notes = [f"moe-tests: rocmci's seed command ({why or 'no step of the step file runs it'})", *notes]
    workloads = wl.moe_tests(
        modes=wl.expand_modes(flags.mode), registry=registry, keyword=flags.k, extra=flags.extra, shards=flags.shards,
        results_path=results_path, obsolete=obsolete, color=terminal_mode(sys.stdout).colour and not flags.json,
        **target,
    )  # fmt: skip
    if found is not None and flags.shards == 1:
        code = _as_jobs(flags, s, src, found, workloads, opts, engine, registry, notes)
        if code is not None:
            return code
    return _run(workloads, opts, registry, flags.json, engine, notes, flags.pull)


def workarounds(flags) -> int:
    """Each workaround: applies or obsolete, with the evidence (file:line, commit or label)."""
    from rocmci.errors import FindingsError, UsageError
    from rocmci.runs import workarounds as wa

    s = settingsmod.resolve(flags={"vllm_src": flags.vllm_src})
    registry = _registry(s)
    labels = None
    if flags.image:
        from rocmci.engine import Engine

        labels = Engine(s.docker, s.engine_timeout).image_labels(flags.image)
        if labels is None:
            raise UsageError(f"no image {flags.image} on this engine", hint="build it or name another tag")
    sources = wa.Sources(vllm_src=_vllm_src(s), image=flags.image, labels=labels)
    if flags.strict and not sources.any:
        raise UsageError(
            "workarounds --strict needs evidence to check against",
            hint="name a vLLM checkout (--vllm-src PATH) or an image (--image TAG)",
        )
    checks = wa.check_all(registry, sources)
    print(to_json(wa.as_json(checks)) if flags.json else wa.render(checks, sources))
    obsolete = [c.workaround.id for c in checks if c.obsolete]
    if obsolete and flags.strict:
        raise FindingsError(
            f"obsolete workaround(s): {', '.join(obsolete)}", hint="remove them from workarounds.yaml and the code"
        )
    return 0


def outcome(flags) -> int:
    """Classify a run that happened elsewhere (e.g. pytest in a Buildkite step) from its JUnit XML and exit."""
    from rocmci.errors import UsageError
    from rocmci.runs import results as res
    from rocmci.secrets import Redactor

    if flags.junit is None or flags.exit_code is None:
        raise UsageError("run.outcome needs --junit FILE and --exit-code N", hint="e.g. --junit r.xml --exit-code 139")
    summary = res.parse_junit(Path(flags.junit), what="--junit")
    registry = _registry(settingsmod.resolve())
    related = [w for w in registry if flags.workload in w.workloads and w.applied_by == "rocmci"]
    hint = ""
    if related:
        w = related[0]
        sets = ", ".join(f"{k}={x}" for k, x in w.sets.items())
        hint = f"likely the ROCm runtime teardown crash ({', '.join(w.refs)}); workaround {w.id} sets {sets}"
    kind, detail = res.classify(flags.exit_code, summary, teardown_hint=hint, junit_expected=True)
    result = res.Result(flags.workload, kind, flags.exit_code, 0.0, detail, summary).redacted(Redactor(os.environ))
    print(res.render_json([result]) if flags.json else res.render_table([result]))
    return res.exit_code([result], strict=flags.strict)


def step(flags) -> int:
    """One step of the step file as an agent of its pool runs it: the checkout's runner executes the job."""
    from rocmci.errors import UsageError

    if not flags.step or not flags.step.strip():
        hint = "e.g. `rocmci run.step 'Basic Correctness'` (`rocmci pipeline.plan` lists them)"
        raise UsageError("run.step needs a step: its label, or --step LABEL", hint=hint)
    if flags.build_id and flags.image:
        raise UsageError("--build-id and --image both name the image", hint="give one of them")
    s = settingsmod.resolve(flags={"image": flags.image, "vllm_src": flags.vllm_src, "mirror_hw": flags.mirror_hw})
    planned = prepare_step(flags, s)
    if isinstance(planned, int):
        return planned
    prepared, opts, registry, engine = planned
    return _run_prepared(prepared, opts, registry, flags.json, engine)


def load_step_file(flags, s):
    """The step file run.step reads: --source, else the setting, else the vLLM checkout's."""
    from rocmci.files import display_name
    from rocmci.pipeline import source as srcmod

    path = Path(os.path.realpath(flags.source)) if flags.source else s.path("source")
    what = "--source" if flags.source else s.describe("source")
    if not flags.source and s.origin("source") == "default" and s.vllm_src and not path.is_file():
        path, what = Path(s.vllm_src) / ".buildkite" / "test-amd.yaml", "the vLLM checkout (vllm_src)"
    return srcmod.load_source(path, display_name(path, s.workspace), what=what)


def find_step(src, query: str, s):
    """The generated step `query` names (only the steps it may name are generated)."""
    from rocmci.errors import UsageError
    from rocmci.runs import steps as st

    generated = st.generated_steps(st.candidates(src, query), s.mirror_hw, s.ci_image)
    if not generated:  # matching steps that this mirror does not render: the whole file, for "did you mean"
        generated = st.generated_steps(src, s.mirror_hw, s.ci_image)
    chosen = st.find(generated, query, src.filename)
    if chosen.stops:
        raise UsageError(
            f"step {chosen.label!r} ({chosen.origin}): ci-infra's template stops on its {', '.join(chosen.stops)}, "
            "so vLLM's CI uploads no pipeline and never runs this step",
            hint="fix it in the step file (`rocmci pipeline.validate` shows the error at its line)",
        )
    return chosen


def prepare_step(flags, s, checkout: Path | None = None):
    """(prepared jobs, options, registry, engine) for run.step, or the exit code of the fallback run when the
    checkout has no runner. `checkout`: another tree than the vllm_src setting (run.bisect's commit)."""
    from rocmci.engine import Engine
    from rocmci.runs import jobs, stepjobs

    chosen = find_step(load_step_file(flags, s), flags.step, s)
    opts = run_options(flags, s, native=chosen.native)
    engine, registry = Engine(s.docker, s.engine_timeout), _registry(s)
    checkout = checkout or _vllm_src(s)
    if checkout is None or jobs.runner_of(checkout) is None:
        return _step_without_runner(flags, chosen, opts, engine, registry, checkout)
    timeout = float(flags.timeout) if flags.timeout else None
    place = jobs.Place(checkout, opts.results_dir.resolve(), opts.hf_cache, opts.host_root, _client(engine),
                       opts.network, tuple(opts.env.items()))  # fmt: skip
    job_opts = RunOptions_with(opts, timeout=timeout or 60.0 * _job_minutes(chosen))
    where = stepjobs.checkout_of(checkout)
    if chosen.native and not opts.no_container:
        where = stepjobs.image_commit(where, engine, opts.image)
    prepared = stepjobs.plan(
        chosen, job_opts, engine, where=where, parallel_job=flags.parallel_job,
        build_id=flags.build_id, image_given=bool(flags.image), place=place,
    )  # fmt: skip
    _pull_and_check(prepared, job_opts, engine, getattr(flags, "pull", False))
    return prepared, job_opts, registry, engine


def _pull_and_check(prepared, opts, engine, pull: bool) -> None:
    """The jobs' image pulled when asked or missing (a dry run says it would), then the preflight."""
    import dataclasses

    from rocmci.runs import stepjobs

    if not opts.no_container:
        image_opts = dataclasses.replace(opts, image=stepjobs.image_of(prepared, opts))
        prepared.notes[:0] = _ensure_image(engine, image_opts, pull)
    stepjobs.check(prepared, opts, engine)


def _step_without_runner(flags, chosen, opts, engine, registry, checkout) -> int:
    """A checkout without vLLM's runner (an older era, or no checkout): rocmci's own docker run for the step."""
    from rocmci.runs import jobs
    from rocmci.runs import steps as st

    why = "no vLLM checkout given" if checkout is None else f"the checkout has no {jobs.RUNNER}"
    note = f"run.step: {why}; the step runs as rocmci's own docker run, not through vLLM's runner (docs/runs.md)"
    workloads = st.workloads(chosen, flags.parallel_job, host=opts.no_container)
    return _run(workloads, opts, registry, flags.json, engine, (note,), flags.pull)


def _job_minutes(chosen) -> int:
    value = chosen.data.get("timeout_in_minutes")
    return value if isinstance(value, int) and value > 0 else 180


def RunOptions_with(opts, **changes):  # noqa: N802 - a copy of the options with some fields changed
    import dataclasses

    return dataclasses.replace(opts, **{k: v for k, v in changes.items() if v is not None})


def _client(engine) -> str:
    try:
        return engine.client
    except Exception:  # noqa: BLE001 - a dry run prints without a docker client
        return "docker"


def _run_prepared(prepared, opts, registry, as_json: bool, engine) -> int:
    """Prepared jobs (pulled and checked): print them (dry run), or run and report as every run task."""
    from rocmci.runs import execute

    redact = execute.redactor(opts)
    if opts.dry_run:
        return _print_dry_run(prepared, engine, opts, as_json)
    for note in prepared.notes:
        _eprint(redact(f"rocmci: {note}"))
    out = _eprint if as_json else print
    results = execute.execute(prepared, opts, engine, registry, out=out)
    return execute.report(results, opts, as_json, prepared.notes, prepared.files, redact)


def bisect(flags) -> int:
    """The first commit whose CI image fails a step: a binary search run as run.step runs the step."""
    from rocmci.engine import Engine
    from rocmci.errors import UsageError
    from rocmci.report import safe
    from rocmci.runs import bisect as bs
    from rocmci.runs import bisectrun as br

    s, checkout, good, bad, commits, repo = _bisect_range(flags)
    engine = Engine(s.docker, s.engine_timeout)
    results = results_dir(s)
    key = {"step": flags.step, "good": good, "bad": bad, "repeat": flags.repeat, "k": flags.k or "", "repo": repo}
    log = br.Log.for_run(results, key)
    images = {c: f"{repo}:{c}" for c in commits}

    def digest(commit: str) -> str | None:
        ref = images[commit]
        found = engine.registry_digest(ref)
        if found is None:
            attrs = engine.image_attrs(ref)
            found = (attrs or {}).get("Id")
        return found

    if flags.dry_run:
        rows = [{"commit": c, "image": images[c], "digest": digest(c)} for c in commits[:-1]]
        if flags.json:
            print(to_json({"dry_run": True, "good": good, "bad": bad, "candidates": rows, "log": str(log.path)}))
        else:
            span = f"after --good {good[:12]} up to --bad {bad[:12]}"
            print(f"# {len(rows)} candidates {span} (first parents, oldest first)")
            for row in rows:
                found = f"image: {row['digest']}" if row["digest"] else "no image (would be skipped)"
                print(safe(f"{row['commit'][:12]}  {row['image']}  {found}"))  # the repo comes from the env
        _eprint("dry run: nothing was run")
        return 0
    engine.server_version()  # a run needs the engine: its one-line error now, not per commit
    done = log.done()
    if done:
        _eprint(f"rocmci: resuming from {log.path}: {len(done)} commit(s) already tried")
    verdicts = {c: t.verdict for c, t in done.items()}
    search = bs.Search(commits, verdicts)
    tried: list = list(done.values())
    while (commit := search.next()) is not None:
        lo, hi = search.interval()
        since = commits[lo][:12] if lo >= 0 else good[:12]
        _eprint(f"rocmci: bisect: trying {commit[:12]} ({commits.index(commit) + 1} of {len(commits)}); "
                f"interval {since}..{commits[hi][:12]}, {hi - lo - 1} left")  # fmt: skip
        started = time.monotonic()
        outcomes, why, logs = [], "", []
        found = digest(commit)
        if found is None:
            why = f"no image {images[commit]}"
        else:
            with br.scratch() as folder:
                tree = br.commit_tree(checkout, commit, folder / "tree", s.git_timeout)
                step_file = tree / ".buildkite" / "test-amd.yaml"
                if not step_file.is_file():
                    why = "no .buildkite/test-amd.yaml at this commit"
                else:
                    for _ in range(flags.repeat):
                        try:
                            results = _bisect_try(flags, s, tree, step_file, images[commit])
                        except UsageError as exc:  # e.g. no such step at this commit: skip, not bad
                            why = exc.one_line()
                            break
                        outcomes += [str(r.outcome) for r in results]
                        logs += [r.log for r in results if r.log]
                        if flags.bad_if == "any" and "failed" in outcomes:
                            break  # bad already, whatever the other tries give
        verdict = bs.verdict(outcomes, any_fails=flags.bad_if == "any") if outcomes else bs.SKIP
        record = br.Tried(commit, images[commit], found, outcomes, verdict, round(time.monotonic() - started, 1),
                          ", ".join(logs), why)  # fmt: skip
        log.add(record)
        tried.append(record)
        search.verdicts[commit] = verdict
        _eprint(f"rocmci: bisect: {commit[:12]} is {verdict}" + (f" ({why})" if why else f" ({', '.join(outcomes)})"))
    answer = search.answer()
    return _bisect_report(flags, answer, tried, images, good, bad, str(log.path))


def _bisect_range(flags):
    """(settings, checkout, good, bad, candidates oldest first with --bad last, image repo) of a bisect."""
    from rocmci.errors import UsageError
    from rocmci.runs import bisectrun as br

    for flag, value in (("--step", flags.step), ("--good", flags.good), ("--bad", flags.bad)):
        if not value or not str(value).strip():
            example = "e.g. --step 'Basic Correctness' --good v0.11.0 --bad HEAD"
            raise UsageError(f"run.bisect needs {flag}", hint=example)
    s = settingsmod.resolve(flags={"vllm_src": flags.vllm_src, "mirror_hw": flags.mirror_hw})
    checkout = _vllm_src(s)
    if checkout is None:
        raise UsageError("run.bisect needs a vLLM checkout", hint="run it inside one, or give --vllm-src PATH")
    timeout = s.git_timeout
    good, bad = br.resolve(checkout, flags.good, "--good", timeout), br.resolve(checkout, flags.bad, "--bad", timeout)
    commits = br.candidates(checkout, good, bad, timeout)
    _step_at_bad(checkout, bad, flags.step, s)
    return s, checkout, good, bad, commits, br.image_repo(checkout)


def _step_at_bad(checkout: Path, bad: str, query: str, s) -> None:
    """The step must be one of --bad's: that is where it failed. A name no commit of the range may hold (a typo)
    would otherwise make every candidate "skipped" and answer nothing, dry run or not."""
    from rocmci.runs import bisectrun as br

    with br.scratch() as folder:
        _step_at(checkout, bad, query, s, folder, shown=f"--bad {bad[:12]}")


def _step_at(checkout: Path, commit: str, query: str, s, folder: Path, *, shown: str | None = None):
    """The generated step `query` names in `commit`'s own step file (its .buildkite, written below `folder`).
    UsageError when that commit has no step file or no such step."""
    from rocmci.errors import UsageError
    from rocmci.pipeline import source as srcmod
    from rocmci.runs import bisectrun as br

    shown = shown or commit[:12]
    step_file = br.commit_tree(checkout, commit, folder / "tree", s.git_timeout) / ".buildkite" / "test-amd.yaml"
    if not step_file.is_file():
        raise UsageError(f"no .buildkite/test-amd.yaml at {shown}", hint="give commits whose CI ran the step")
    return find_step(srcmod.load_source(step_file, f"{shown}:.buildkite/test-amd.yaml"), query, s)


def bisect_fanout(flags):
    """(pipeline, candidates, settings) of `run.bisect --on buildkite`: one job per candidate with a CI image in
    the registry, each the commit's own generated step as run.step derives its job (runs/fanout.py)."""
    from rocmci.engine import Engine
    from rocmci.errors import InputError, UsageError
    from rocmci.report import safe
    from rocmci.runs import bisectrun as br
    from rocmci.runs import fanout

    for given, flag, why in ((flags.gpus, "--gpus", "each agent hands its job its own GPUs"),
                             (flags.k, "-k", "it would change the step's env (PYTEST_ADDOPTS)"),
                             (flags.env.as_dict() if flags.env else {}, "--env",
                              "a job's env is the step's own")):  # fmt: skip
        if given:
            raise UsageError(f"{flag} is for a local bisect, not --on buildkite: {why}", hint=f"leave out {flag}")
    s, checkout, good, bad, commits, repo = _bisect_range(flags)
    engine = Engine(s.docker, s.engine_timeout)
    search = fanout.search_id(flags.step, good, bad, flags.repeat, repo)
    candidates = []
    for number, commit in enumerate(commits[:-1], 1):
        tag = f"{repo}:{commit}"
        digest = engine.registry_digest(tag)
        why, data = "", None
        if digest is None:
            why = f"no image {tag} in the registry"
        else:
            with br.scratch() as folder:
                try:
                    chosen = _step_at(checkout, commit, flags.step, s, folder)
                    if not chosen.through_runner:
                        raise UsageError(f"step {chosen.label!r} runs on the agent itself (no_plugin), not in an image")
                    data = chosen.data
                except (UsageError, InputError) as exc:  # the step is not there at this commit: skip, not bad
                    why = exc.one_line()
        image = fanout.pinned_image(tag, digest) if data is not None else None
        candidates.append(fanout.Candidate(commit, tag, image, why, data))
        state = f"{flags.repeat} job(s), {image}" if image else f"skipped ({why})"
        _eprint(safe(f"rocmci: bisect: {commit[:12]} ({number} of {len(commits) - 1}): {state}", limit=600))
    return fanout.pipeline(flags.step, candidates, flags.repeat, search), candidates, s


MAX_OUTCOME_FILES = 20_000


def bisect_from_results(flags) -> int:
    """The answer from the outcomes the --on buildkite jobs uploaded (downloaded into --from-results)."""
    from rocmci.errors import UsageError
    from rocmci.files import read_bytes
    from rocmci.runs import bisect as bs
    from rocmci.runs import bisectrun as br
    from rocmci.runs import fanout
    from rocmci.runs import results as res

    _, _, good, bad, commits, repo = _bisect_range(flags)
    given = Path(flags.from_results)
    if given.is_dir():
        paths = []
        for path in sorted(given.rglob(f"{fanout.PREFIX}*.json")):
            paths.append(path)
            if len(paths) > MAX_OUTCOME_FILES:
                raise UsageError(f"more than {MAX_OUTCOME_FILES} outcome files below {given}",
                                 hint="give the folder of one bisect's artifacts")  # fmt: skip
    elif os.path.lexists(given):
        paths = [given]
    else:
        raise UsageError(f"--from-results {flags.from_results}: no such file or folder",
                         hint="give the folder `buildkite-agent artifact download 'rocmci-bisect-*' DIR` wrote")
    if not paths:
        raise UsageError(f"no outcome files ({fanout.PREFIX}*.json) below {given}",
                         hint="download the bisect build's artifacts: buildkite-agent artifact download "
                         "'rocmci-bisect-*' DIR --build BUILD")  # fmt: skip
    search = fanout.search_id(flags.step, good, bad, flags.repeat, repo)
    found = []
    for path in paths:
        outcome = fanout.parse_outcome(
            read_bytes(path, what="--from-results", limit=fanout.MAX_OUTCOME_BYTES), str(path), search
        )
        junit_file = path.with_suffix(".xml")  # a JUnit report beside it, if the job uploaded one
        junit = res.parse_junit(junit_file, what="--from-results") if junit_file.is_file() else None
        kind, _ = res.classify(outcome.exit_code, junit)
        found.append((outcome, str(kind)))
    decided = fanout.decide(commits, found, repeat=flags.repeat, any_fails=flags.bad_if == "any")
    verdicts = {c: d.verdict for c, d in decided.items()}
    for commit in fanout.out_of_order(commits, verdicts):
        _eprint(f"rocmci: bisect: {commit[:12]} is bad but a later commit is good: a flaky step, or a break that was "
                "fixed and came back; the answer is the first bad commit after the last good one")  # fmt: skip
    images = {c: f"{repo}:{c}" for c in commits}
    tried = [br.Tried(d.commit, images[d.commit], None, list(d.outcomes), d.verdict, d.seconds, ", ".join(d.files),
                      d.why) for d in decided.values()]  # fmt: skip
    answer = bs.Search(commits, verdicts).answer()
    return _bisect_report(flags, answer, tried, images, good, bad, str(given), "results")


def _bisect_try(flags, s, tree, step_file, image):
    """One run of the step at a commit: that commit's step file and runner, in its image, as run.step."""
    import shlex
    import types

    from rocmci.runs import execute

    given = dict(flags.env.as_dict()) if flags.env else {}
    if flags.k:
        given["PYTEST_ADDOPTS"] = f"-k {shlex.quote(flags.k)}"  # the runner passes PYTEST_ADDOPTS on to pytest
    # run.step's flags for this commit: its step file and image, the bisect's GPUs, env, host and bounds.
    step_flags = types.SimpleNamespace(
        step=flags.step, source=str(step_file), image=image, build_id=None, parallel_job=None, pull=False,
        gpus=flags.gpus, timeout=flags.timeout, skip_preflight=flags.skip_preflight, no_container=False, dry_run=False,
        host_root=flags.host_root, env=types.SimpleNamespace(as_dict=lambda: given), public=flags.public, workdir=None,
        vllm_src=flags.vllm_src, strict=flags.strict, json=False, mirror_hw=flags.mirror_hw,
    )
    s = settingsmod.resolve(flags={"image": image, "vllm_src": flags.vllm_src, "mirror_hw": flags.mirror_hw})
    planned = prepare_step(step_flags, s, checkout=tree)
    if isinstance(planned, int):
        from rocmci.errors import UsageError

        raise UsageError("the commit has no vLLM runner (.buildkite/scripts/hardware_ci/run-amd-test.sh)")
    prepared, opts, registry, engine = planned
    return execute.execute(prepared, opts, engine, registry, out=_eprint)


def _bisect_report(flags, answer, tried, images, good, bad, log: str, log_name: str = "log") -> int:
    import shlex

    rows = [t.as_json() for t in tried]
    reproduce = {}
    # run.step reads the step file and runner of the checkout: the commit's own, once it is checked out.
    if answer.first_bad:
        reproduce["bad"] = (f"git checkout {answer.first_bad} && rocmci run.step --step {shlex.quote(flags.step)} "
                            f"--image {images.get(answer.first_bad, answer.first_bad)}")  # fmt: skip
    if answer.last_good:
        reproduce["good"] = (f"git checkout {answer.last_good} && rocmci run.step --step {shlex.quote(flags.step)} "
                             f"--image {images[answer.last_good]}")  # fmt: skip
    if flags.json:
        print(to_json({"first_bad": answer.first_bad if answer.exact else None, "last_good": answer.last_good or good,
                       "suspects": list(answer.suspects), "skipped": list(answer.skipped), "runs": len(tried),
                       "tried": rows, "reproduce": reproduce, log_name: log}))  # fmt: skip
    else:
        from rocmci.report import MAX_FIELD, safe

        def say(line: str) -> None:  # a why quotes step labels and git's words; the reproduce lines a step name
            print(safe(line, limit=4 * MAX_FIELD))

        say(f"{'commit':<12}  {'verdict':<7}  {'seconds':>7}  outcomes / why")
        for t in tried:
            say(f"{t.commit[:12]:<12}  {t.verdict:<7}  {t.seconds:>7.1f}  {t.why or ', '.join(t.outcomes)}")
        if answer.exact:
            say(f"first bad commit: {answer.first_bad}")
        else:
            say(f"the first bad commit is one of: {', '.join(answer.suspects)} (skipped commits hide which)")
        say(f"last good commit: {answer.last_good or good}" + ("" if answer.last_good else " (--good)"))
        say(f"skipped: {len(answer.skipped)}; {log_name}: {log}")
        for side, line in reproduce.items():
            say(f"reproduce {side}: {line}")
    return 0 if answer.exact else 1
