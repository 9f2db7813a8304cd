"""The pipeline tasks: generate, validate, plan, diff. Flags arrive parsed (cli/flags.py); the work is
in pipeline/service.py (inputs, options, build, render), findings go through report.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rocmci.errors import FindingsError, UsageError
from rocmci.heap import no_gc, skip_final_collection
from rocmci.pipeline import service
from rocmci.report import plural
from rocmci.settings import resolve


def _eprint(text: str) -> None:
    """A line for stderr: it may quote a path, a label or a skip reason, so through report.safe (escaped, bounded)."""
    from rocmci.report import MAX_FIELD, safe

    print(safe(text, limit=4 * MAX_FIELD), file=sys.stderr)


def generate(v) -> int:
    from rocmci.files import write_atomic
    from rocmci.pipeline.model import walk_steps
    from rocmci.report import console, safe
    from rocmci.report_findings import print_report

    s = resolve(flags=dict(mirror_hw=v.mirror_hw, arch=v.arch, branch=v.branch))
    i = service.inputs(s, v.source)
    opts, decision = service.generate_options(s, v.changed_files, v.diff_base, v.run_all, v.nightly)
    if decision.skip:
        _eprint(f"no pipeline: {decision.skip} (as bootstrap-amd.sh)")
        return 0
    skip_final_collection()
    with no_gc():
        src, generated, report = service.build(i, opts, s.workspace)
    if report.findings:
        print_report(report, name=i.source_name, out=console(sys.stderr))
    pipeline = generated.pipeline
    held = []
    if report.errors and not v.keep_going:
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
    if v.annotation and report.findings:
        from rocmci.pipeline import keepgoing

        annotation = keepgoing.annotation(i.source_name, report.findings, held)
        write_atomic(Path(v.annotation), annotation, what="--annotation")
    text = service.render(pipeline, v.format, i.source_name)
    if v.out:
        write_atomic(Path(v.out), text)
        group = pipeline["steps"][0]
        # Counted as pipeline.validate counts them (model.walk_steps: the group is a step too), so the two agree.
        total = len(walk_steps(pipeline, lambda path, step: None))
        _eprint(
            f"wrote {v.out}: {plural(total, 'generated step')} (the group {group['group']!r} and the "
            f"{plural(len(group['steps']), 'step')} in it)"
        )
    else:
        sys.stdout.write(text)
    return 0


def validate(v) -> int:
    from rocmci.report import console
    from rocmci.report_findings import print_report, report_dict

    if v.source and v.pipeline:
        raise UsageError("give --source or --pipeline, not both")
    s = resolve(flags=dict(mirror_hw=v.mirror_hw, arch=v.arch))
    i = service.inputs(s, v.source)
    skip_final_collection()
    with no_gc():
        if v.pipeline:
            name = service.display_name(Path(v.pipeline), s.workspace)
            ctx = service.context(i, s.workspace)
            report = service.load_pipeline_report(Path(os.path.realpath(v.pipeline)), ctx, s.workspace)
        else:
            name = i.source_name
            opts, _ = service.generate_options(s)
            _, _, report = service.build(i, opts, s.workspace)
    if v.json:
        print(json.dumps(report_dict(report, name), indent=2))
    else:
        print_report(report, name=name, out=console(sys.stdout))
    return 1 if report.errors else 0


def plan(v) -> int:
    """Summary first, then bootstrap's decisions, then the steps (only one kind with --only)."""
    from rocmci.report import lines, table, to_json

    s = resolve(flags=dict(mirror_hw=v.mirror_hw, branch=v.branch))
    i = service.inputs(s, v.source)
    changed = service.changed_files(v.changed_files, v.diff_base, s.workspace)
    opts, decision = service.generate_options(
        s, v.changed_files, v.diff_base, v.run_all, v.nightly, labels=v.label, changed=changed
    )
    explained = service.plan(i, opts, decision, changed)
    if v.only:
        action = service.PLAN_ACTIONS[v.only]
        explained["steps"] = [d for d in explained["steps"] if d["action"] == action]
    if v.json:
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


def diff(v) -> int:
    """Render a ci-infra template the way bootstrap-amd.sh does and compare it with rocmci's generator."""
    from rocmci.report import to_json

    if not v.template:
        raise UsageError("pipeline.diff needs --template", hint="ci-infra's buildkite/test-template-amd.j2")
    if v.changed_files and (v.run_all or v.nightly):
        raise UsageError("give --changed-files, --run-all or --nightly, not several")
    s = resolve(flags=dict(mirror_hw=v.mirror_hw, branch=v.branch))
    i = service.inputs(s, v.source)
    opts, decision = service.generate_options(s, v.changed_files, None, v.run_all, v.nightly)
    if decision.skip:
        _eprint(f"no pipeline to compare: {decision.skip}")
        return 0
    comparison = service.diff(Path(os.path.realpath(v.template)), i, opts)
    if v.json:
        print(to_json([d.__dict__ | {"allowed": d.allowed} for d in comparison.differences]))
    else:
        print(comparison.summary(examples=v.examples))
    return 1 if comparison.unexpected else 0
