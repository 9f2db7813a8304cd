"""`run.bisect`'s face: a local bisect (runs area), or the candidates fanned out as a Buildkite pipeline that
the pipeline area validates before it is written, or the answer read from the jobs' outcome files.

The runs area plans the jobs and the pipeline area judges the pipeline; neither imports the other's
services, so the two meet here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rocmci.errors import FindingsError, UsageError
from rocmci.files import remove_output


def bisect(flags) -> int:
    from rocmci.runs import service

    if flags.on and flags.from_results:
        raise UsageError("--on buildkite writes the jobs, --from-results reads what they uploaded: give one",
                         hint="first --on buildkite, then after the build --from-results DIR")  # fmt: skip
    if flags.out and not flags.on:
        raise UsageError("--out is where --on buildkite writes its pipeline", hint="add --on buildkite")
    if flags.from_results:
        return service.bisect_from_results(flags)
    if flags.on:
        return fan_out(flags)
    return service.bisect(flags)


def fan_out(flags) -> int:
    """Plan the jobs, validate the pipeline as `pipeline.validate --pipeline` would read it, then write it."""
    from rocmci.files import write_atomic
    from rocmci.findings import ERROR
    from rocmci.pipeline import emit, scalars, validate
    from rocmci.pipeline import service as pipelines
    from rocmci.report import plural, safe
    from rocmci.runs import service

    document, candidates, s = service.bisect_fanout(flags)
    jobs = sum(len(group["steps"]) for group in document["steps"])
    skipped = [c for c in candidates if c.image is None]
    head = (
        f"# Written by rocmci run.bisect --on buildkite for step {flags.step!r}: {plural(jobs, 'job')} for "
        f"{len(candidates) - len(skipped)} of {len(candidates)} candidate commits"
    )
    lines = [head] + [f"# skipped {c.commit[:12]}: {c.why}" for c in skipped]
    text = "\n".join(safe(line, limit=400).replace("\n", " ") for line in lines) + "\n" + emit.dump(document)
    name = flags.out or "the --on buildkite pipeline"
    report = validate.validate_pipeline_document(
        scalars.read_pipeline(text.encode("utf-8"), name), pipelines.context(pipelines.inputs(s), s.workspace)
    )
    errors = [f for f in report.findings if f.severity == ERROR]
    if errors:
        for finding in errors[:5]:
            print(safe(finding.text(), limit=400), file=sys.stderr)
        removed = remove_output(flags.out, "--out") if flags.out and not flags.dry_run else False
        gone = f", and the earlier {flags.out} was removed" if removed else ""
        raise FindingsError(
            f"the bisect pipeline would be refused ({plural(len(errors), 'error')}, first: [{errors[0].rule}] "
            f"{errors[0].message}); nothing was written{gone}",
            hint="rocmci pipeline.validate --source on the step file shows what is wrong with the step",
        )
    if flags.dry_run or not flags.out:
        sys.stdout.write(text)
        if flags.dry_run:
            print("dry run: nothing was written or run", file=sys.stderr)
        return 0
    write_atomic(Path(flags.out), text, what="--out")
    print(safe(f"wrote {flags.out}: {plural(jobs, 'job')}, {len(skipped)} candidate(s) skipped; upload it with "
               f"buildkite-agent pipeline upload {flags.out}"), file=sys.stderr)  # fmt: skip
    return 0
