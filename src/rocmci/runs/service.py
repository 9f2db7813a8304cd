"""The run tasks: dp-example, moe-tests, outcome, workarounds. Flags arrive parsed (cli/flags.py).

Everything a run task prints or writes goes through one Redactor: known secrets from the
environment, every --env value and secret-shaped text (so a token typed into --extra never shows),
except names given with --public.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rocmci import settings as settingsmod
from rocmci.report import to_json
from rocmci.runs.workloads import WORKSPACE


def _eprint(text: str) -> None:
    print(text, file=sys.stderr)


def run_options(v, s):
    """RunOptions from parsed flags and settings (the settings registry holds the run defaults)."""
    from rocmci.image.service import configured_image
    from rocmci.runs.execute import RunOptions

    # A native CI pod names its workspace; vLLM's runner defaults to the image's /vllm-workspace.
    default_workdir = (os.environ.get("VLLM_CI_WORKSPACE") or WORKSPACE) if v.no_container else WORKSPACE
    return RunOptions(
        image=configured_image(s),
        results_dir=s.path("results_dir"),
        timeout=float(v.timeout or s.run_timeout),
        network=s.run_network or None,
        shm_size=s.shm_size,
        memory=s.run_memory or None,
        hf_cache=s.hf_cache,
        workdir=v.workdir or default_workdir,
        host_root=Path(v.host_root),
        gpus=v.gpus,
        skip_preflight=v.skip_preflight,
        no_container=v.no_container,
        dry_run=v.dry_run,
        strict=v.strict,
        env=v.env.as_dict(),
        public=v.public,
    )


def _registry(s):
    from rocmci.pipeline.service import display_name
    from rocmci.runs.workarounds import load_registry

    path = s.path("workarounds")
    return load_registry(path, display_name(path, s.workspace))


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
    from rocmci.errors import FindingsError
    from rocmci.runs import workarounds as wa

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
    from rocmci.runs import execute

    redact = execute.redactor(opts)
    prepared = execute.prepare(workloads, opts, None if opts.no_container else engine, notes)
    if opts.dry_run:
        print(redact("\n".join(execute.dry_run_lines(prepared, engine, opts))))
        _eprint("dry run: nothing was started")
        return 0
    for note in prepared.notes:
        _eprint(redact(f"rocmci: {note}"))
    out = _eprint if as_json else print
    results = execute.execute(prepared, opts, engine, registry, out=out)
    return execute.report(results, opts, as_json, prepared.notes, prepared.files)


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


def _setup(v):
    from rocmci.engine import Engine

    s = settingsmod.resolve(flags={"image": v.image, "vllm_src": v.vllm_src})
    opts = run_options(v, s)
    return s, opts, Engine(s.docker), _registry(s)


def dp_example(v) -> int:
    from rocmci.runs import workloads as wl

    s, opts, engine, registry = _setup(v)
    _, notes = _workaround_checks(s, registry, engine, opts, {"dp-example"})
    workload = wl.dp_example(
        model=v.model, tp=v.tp, dp=v.dp, max_model_len=v.max_model_len, backend=v.backend, extra=v.extra,
        example=v.example or _probe_example(engine, opts),
    )  # fmt: skip
    return _run([workload], opts, registry, v.json, engine, notes)


def moe_tests(v) -> int:
    from rocmci.report import terminal_mode
    from rocmci.runs import workloads as wl

    s, opts, engine, registry = _setup(v)
    obsolete, notes = _workaround_checks(s, registry, engine, opts, {"moe-tests"})
    results_path = str(opts.results_dir.resolve()) if opts.no_container else wl.RESULTS_MOUNT
    workloads = wl.moe_tests(
        modes=wl.expand_modes(v.mode), registry=registry, keyword=v.k, extra=v.extra, shards=v.shards,
        results_path=results_path, obsolete=obsolete, color=terminal_mode(sys.stdout).colour and not v.json,
    )  # fmt: skip
    return _run(workloads, opts, registry, v.json, engine, notes)


def workarounds(v) -> int:
    """Each workaround: applies or obsolete, with the evidence (file:line, commit or label)."""
    from rocmci.errors import FindingsError, UsageError
    from rocmci.runs import workarounds as wa

    s = settingsmod.resolve(flags={"vllm_src": v.vllm_src})
    registry = _registry(s)
    labels = None
    if v.image:
        from rocmci.engine import Engine

        labels = Engine(s.docker).image_labels(v.image)
        if labels is None:
            raise UsageError(f"no image {v.image} on this engine", hint="build it or name another tag")
    sources = wa.Sources(vllm_src=_vllm_src(s), image=v.image, labels=labels)
    if v.strict and not sources.any:
        raise UsageError(
            "workarounds --strict needs evidence to check against",
            hint="name a vLLM checkout (--vllm-src PATH) or an image (--image TAG)",
        )
    checks = wa.check_all(registry, sources)
    print(to_json(wa.as_json(checks)) if v.json else wa.render(checks, sources))
    obsolete = [c.workaround.id for c in checks if c.obsolete]
    if obsolete and v.strict:
        raise FindingsError(
            f"obsolete workaround(s): {', '.join(obsolete)}", hint="remove them from workarounds.yaml and the code"
        )
    return 0


def outcome(v) -> int:
    """Classify a run that happened elsewhere (e.g. pytest in a Buildkite step) from its JUnit XML and exit."""
    from rocmci.errors import UsageError
    from rocmci.runs import results as res
    from rocmci.secrets import Redactor

    if v.junit is None or v.exit_code is None:
        raise UsageError("run.outcome needs --junit FILE and --exit-code N", hint="e.g. --junit r.xml --exit-code 139")
    summary = res.parse_junit(Path(v.junit), what="--junit")
    related = [w for w in _registry(settingsmod.resolve()) if v.workload in w.workloads and w.applied_by == "rocmci"]
    hint = ""
    if related:
        w = related[0]
        sets = ", ".join(f"{k}={x}" for k, x in w.sets.items())
        hint = f"likely the ROCm runtime teardown crash ({', '.join(w.refs)}); workaround {w.id} sets {sets}"
    kind, detail = res.classify(v.exit_code, summary, teardown_hint=hint)
    result = res.Result(v.workload, kind, v.exit_code, 0.0, detail, summary)
    print(Redactor(os.environ)(res.render_json([result]) if v.json else res.render_table([result])))
    return res.EXIT_CODES[kind]
