"""The pipeline tasks: generate, validate, plan, diff. Flags arrive parsed (cli/flags.py); the work is
in pipeline/service.py (inputs, options, build, render), findings go through report.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rocmci.errors import FindingsError, UsageError
from rocmci.files import remove_output
from rocmci.heap import no_gc, skip_final_collection
from rocmci.pipeline import service
from rocmci.report import plural
from rocmci.settings import resolve


def _eprint(text: str) -> None:
    """A line for stderr: it may quote a path, a label or a skip reason, so through report.safe (escaped, bounded)."""
    from rocmci.report import MAX_FIELD, safe

    print(safe(text, limit=4 * MAX_FIELD), file=sys.stderr)


def generate(flags) -> int:
    from rocmci.files import write_atomic
    from rocmci.pipeline.model import walk_steps
    from rocmci.report import console, safe
    from rocmci.report_findings import print_report

    _distinct_outputs(flags.out, flags.annotation)
    s = resolve(flags=dict(mirror_hw=flags.mirror_hw, arch=flags.arch, branch=flags.branch))
    i = service.inputs(s, flags.source)
    opts, decision = service.generate_options(s, flags.changed_files, flags.diff_base, flags.run_all, flags.nightly)
    if decision.skip:
        _eprint(f"no pipeline: {decision.skip} (as bootstrap-amd.sh)")
        # Never stale: a pipeline or annotation a previous run left there would be uploaded as this one's.
        for path, what in ((flags.out, "--out"), (flags.annotation, "--annotation")):
            if path and remove_output(path, what):
                _eprint(f"removed {path} ({what}): it held an earlier run's output, and this change has none")
        return 0
    skip_final_collection()
    with no_gc():
        src, generated, report = service.build(i, opts, s.workspace)
    if report.findings:
        print_report(report, name=i.source_name, out=console(sys.stderr))
    pipeline = generated.pipeline
    held = []
    if report.errors and not flags.keep_going:
        raise FindingsError(
            f"{plural(report.errors, 'error')} in the generated pipeline; nothing was written",
            hint="fix the findings above (file:line), or pass --keep-going to hold those steps behind block steps",
        )
    if report.errors:
        from rocmci.pipeline import keepgoing  # imported only when there is something to hold

        pipeline, held = keepgoing.hold(src, generated, report.findings)
        if any(f.rule == "secret-in-pipeline" for f in report.findings):
            pipeline = keepgoing.without_secrets(pipeline)
        for h in held:
            what = "held behind a block step" if h.how == "held" else "left out"
            _eprint(f"--keep-going: {safe(h.title)}: {what}")  # the title bounded, so the line ends with what
    text = service.render(pipeline, flags.format, i.source_name)
    # --keep-going changed the pipeline: it is written only if Buildkite would take it
    refused = _refused(text, i, s.workspace, src, held) if report.errors else []
    if flags.annotation:  # no findings is news too: an earlier run's findings must not stay in the file
        from rocmci.pipeline import keepgoing

        annotation = keepgoing.annotation(i.source_name, [*report.findings, *refused], held)
        write_atomic(Path(flags.annotation), annotation, what="--annotation")
    if refused:
        for f in refused[:5]:  # what validate --pipeline says of it, so the one line below can be short
            _eprint(f.text())
        first, errors = refused[0], len(refused)
        more = f" (+{plural(errors - 1, 'more error')})" if errors > 1 else ""
        raise FindingsError(
            f"--keep-going: the pipeline it would write is one Buildkite refuses ([{first.rule}] {first.message}"
            f"{more}); no pipeline was written" + (f", {flags.annotation} says why" if flags.annotation else ""),
            hint="fix those steps in the step file (pipeline.validate --source lists them); --keep-going holds a "
            "step, it cannot make Buildkite accept this pipeline",
        )
    if flags.out:
        write_atomic(Path(flags.out), text)
        group = pipeline["steps"][0]
        # Counted as pipeline.validate counts them (model.walk_steps: the group is a step too), so the two agree.
        total = len(walk_steps(pipeline, lambda path, step: None))
        _eprint(
            f"wrote {flags.out}: {plural(total, 'generated step')} (the group {group['group']!r} and the "
            f"{plural(len(group['steps']), 'step')} in it)"
        )
    else:
        sys.stdout.write(text)
    return 0


def _distinct_outputs(out: str | None, annotation: str | None) -> None:
    """--out and --annotation are two outputs: one file for both would silently keep only the later."""
    if not out or not annotation:
        return
    same = os.path.realpath(out) == os.path.realpath(annotation)
    try:
        same = same or os.path.samefile(out, annotation)  # hard links
    except OSError:
        pass
    if same:
        raise UsageError(f"--out and --annotation name the same file ({out}); one would overwrite the other",
                         hint="give --annotation another path")  # fmt: skip


def _refused(text: str, i, workspace: Path, src, held) -> list:
    """The errors that keep the pipeline --keep-going would write from being written: it is read back and validated
    as `pipeline.validate --pipeline` reads and validates a file, and every error there counts but one of a held
    step (the reason it is held) that Buildkite itself accepts (keepgoing.UPLOAD_REFUSED: more than 500 steps, a
    schema error, an unknown key refuse the whole upload). (Splitting the pipeline over several uploads would
    change what the build runs, so it is not split.)"""
    from rocmci.findings import ERROR
    from rocmci.pipeline import keepgoing, scalars, validate

    doc = scalars.read_pipeline(text.encode("utf-8"), "the --keep-going pipeline")
    report = validate.validate_pipeline_document(doc, service.context(i, workspace))
    held_at = {f"{src.filename}:{src.doc.pos(('steps', h.step_index)).line}" for h in held if h.how == "held"}
    return [f for f in report.findings
            if f.severity == ERROR and (f.rule in keepgoing.UPLOAD_REFUSED or f.origin not in held_at)]  # fmt: skip


def validate(flags) -> int:
    from rocmci.report import console
    from rocmci.report_findings import print_report, report_dict

    if flags.source and flags.pipeline:
        raise UsageError("give --source or --pipeline, not both")
    s = resolve(flags=dict(mirror_hw=flags.mirror_hw, arch=flags.arch))
    i = service.inputs(s, flags.source)
    skip_final_collection()
    with no_gc():
        if flags.pipeline:
            name = service.display_name(Path(flags.pipeline), s.workspace)
            ctx = service.context(i, s.workspace)
            report = service.load_pipeline_report(Path(os.path.realpath(flags.pipeline)), ctx, s.workspace)
        else:
            name = i.source_name
            opts, _ = service.generate_options(s)
            _, _, report = service.build(i, opts, s.workspace)
    if flags.json:
        print(json.dumps(report_dict(report, name), indent=2))
    else:
        print_report(report, name=name, out=console(sys.stdout))
    return 1 if report.errors else 0


def plan(flags) -> int:
    """Summary first, then bootstrap's decisions, then the steps (only one kind with --only)."""
    from rocmci.report import lines, table, to_json

    s = resolve(flags=dict(mirror_hw=flags.mirror_hw, branch=flags.branch))
    i = service.inputs(s, flags.source)
    changed = service.changed_files(flags.changed_files, flags.diff_base, s.workspace, s.git_timeout)
    opts, decision = service.generate_options(
        s, flags.changed_files, flags.diff_base, flags.run_all, flags.nightly, labels=flags.label, changed=changed
    )
    explained = service.plan(i, opts, decision, changed)
    if flags.only:
        action = service.PLAN_ACTIONS[flags.only]
        explained["steps"] = [d for d in explained["steps"] if d["action"] == action]
    if flags.json:
        print(to_json(explained))
        return 0
    print(lines([explained["summary"], "", *explained["bootstrap"]]))
    if decision.skip or not explained["steps"]:
        return 0
    order = {"run": 0, "block": 1, "skip": 2}
    rows = sorted(((d["action"], d["pool"], d["label"], d["reason"]) for d in explained["steps"]),
                  key=lambda r: order[r[0]])  # fmt: skip
    print()
    print(table(("action", "pool", "step", "why"), rows, styles={"run": "green", "block": "yellow", "skip": "dim"}))
    return 0


def diff(flags) -> int:
    """Render a ci-infra template the way bootstrap-amd.sh does and compare it with rocmci's generator."""
    from rocmci.report import to_json

    if not flags.template:
        raise UsageError("pipeline.diff needs --template", hint="ci-infra's buildkite/test-template-amd.j2")
    if flags.changed_files and (flags.run_all or flags.nightly):
        raise UsageError("give --changed-files, --run-all or --nightly, not several")
    s = resolve(flags=dict(mirror_hw=flags.mirror_hw, branch=flags.branch))
    i = service.inputs(s, flags.source)
    opts, decision = service.generate_options(s, flags.changed_files, None, flags.run_all, flags.nightly)
    if decision.skip:
        _eprint(f"no pipeline to compare: {decision.skip}")
        return 0
    comparison = service.diff(Path(os.path.realpath(flags.template)), i, opts, s.render_fuel)
    if flags.json:
        print(to_json([d.__dict__ | {"allowed": d.allowed} for d in comparison.differences]))
    else:
        print(comparison.summary(examples=flags.examples))
    return 1 if comparison.unexpected else 0
