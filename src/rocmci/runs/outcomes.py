"""After a run: outcomes from exit codes and JUnit XML, shards merged into one result, and the report
to the terminal, the results folder and (under Buildkite) the build page."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rocmci.errors import InputError
from rocmci.files import write_atomic
from rocmci.runs import container as ctr
from rocmci.runs import results as res
from rocmci.runs.types import RESULTS_WHAT, Prepared, RunOptions
from rocmci.runs.workloads import Workload
from rocmci.workaround_registry import Workaround


def merge_results(prepared: Prepared, ordered: list[res.Result], opts: RunOptions) -> list[res.Result]:
    """Shards of one workload become one result (and one JUnit file); other runs stay as they are."""
    merged: list[res.Result] = []
    runs = prepared.runs
    i = 0
    while i < len(ordered):
        group = runs[i].workload.group
        j = i + 1
        while group is not None and j < len(ordered) and runs[j].workload.group == group and runs[j].workload.sharded:
            j += 1
        chunk = ordered[i:j]
        if len(chunk) == 1:
            merged.append(chunk[0])
        else:
            merged.append(merge_shards(chunk, f"moe-tests {group} ({len(chunk)} shards)"))
            shard_files = [opts.results_dir / run.workload.junit for run in runs[i:j] if run.workload.junit]
            target = opts.results_dir / f"junit-moe-{group}.xml"
            res.merge_junit_files(shard_files, target)
            prepared.files.append(target)
        i = j
    return merged


def teardown_hint(workload: Workload, registry: Sequence[Workaround]) -> str:
    related = [w for w in registry if workload.kind in w.workloads and w.applied_by == "rocmci"]
    if not related:
        return ""
    w = related[0]
    state = "was applied" if w.id in workload.workarounds else "was NOT applied to this run"
    refs = ", ".join(w.refs)
    return f"likely the ROCm runtime teardown crash ({refs}); workaround {w.id} {state}"


def outcome_of(
    workload: Workload, run: ctr.RunResult, opts: RunOptions, registry: Sequence[Workaround], log: str
) -> res.Result:
    junit = None
    junit_problem = None
    if workload.junit:
        path = opts.results_dir / workload.junit
        try:
            junit = res.parse_junit(path)
        except InputError as exc:
            junit_problem = exc.one_line()
    outcome, detail = res.classify(
        run.exit_code,
        junit,
        timed_out=run.timed_out,
        infra_error=run.infra_error,
        teardown_hint=teardown_hint(workload, registry),
        oom_killed=run.oom_killed,
        in_container=not opts.no_container,
        junit_expected=workload.junit is not None,
    )
    if junit_problem and outcome in (res.Outcome.FAILED, res.Outcome.PASSED):
        detail += f" ({junit_problem})"
    return res.Result(
        workload.name, outcome, run.exit_code, run.seconds, detail, junit, list(workload.workarounds), log
    )


def merge_shards(results: list[res.Result], name: str) -> res.Result:
    """One result for the shards of one workload: a shard that drew no case does not spoil the others."""
    outcomes = [r.outcome for r in results]
    if res.Outcome.PASSED in outcomes:
        outcomes = [o for o in outcomes if o is not res.Outcome.NO_TESTS]
    outcome = res.worst(outcomes)
    junit = None
    for r in results:
        if r.junit is not None:
            junit = r.junit if junit is None else junit.merge(r.junit)
    details = shard_summary(results, junit)
    return res.Result(
        name,
        outcome,
        max(r.exit_code for r in results),
        max(r.seconds for r in results),
        details,
        junit,
        sorted({w for r in results for w in r.workarounds}),
        ", ".join(r.log or "" for r in results),
    )


PASSED = res.Outcome.PASSED


def shard_summary(results: list[res.Result], junit: res.JUnitSummary | None) -> str:
    """Once for all shards: the totals, then only the shards that did not pass, each in its own words."""
    head = f"{len(results)} shards"
    if junit is not None:
        head += f": {junit.passed} passed, {junit.skipped} skipped" + (
            f", {len(junit.failed_cases)} failed" if junit.failed_cases else ""
        )
    odd = [f"shard {i}: {r.outcome.value} ({r.detail})" for i, r in enumerate(results) if r.outcome is not PASSED]
    return "; ".join([head, *odd])


def report(
    results: list[res.Result],
    opts: RunOptions,
    as_json: bool,
    notes: Sequence[str] = (),
    files: Sequence[Path] = (),
    redact: Callable[[str], str] = str,
) -> int:
    """Results to the terminal and the results folder, and under Buildkite to the build page.

    Every one of those outputs is rendered from the same redacted results and notes: a secret in a
    failing test's id or in a detail never reaches the table, --json, results.json, annotation.md or
    the build page.
    """
    results = [r.redacted(redact) for r in results]
    notes = [redact(n) for n in notes]
    annotation = opts.results_dir / "annotation.md"
    write_atomic(annotation, res.render_annotation(results, list(notes)), what=RESULTS_WHAT)
    write_atomic(opts.results_dir / "results.json", res.render_json(results) + "\n", what=RESULTS_WHAT)
    print(res.render_json(results) if as_json else res.render_table(results))
    agent = res.under_buildkite()
    if agent:
        present = [f for f in dict.fromkeys(files) if f.is_file()]
        for problem in res.post_to_buildkite(agent, results, list(notes), opts.results_dir, present):
            print(f"rocmci: {problem}", file=sys.stderr)
        if not as_json:
            print(f"\nposted to the Buildkite build page; files also in {opts.results_dir}", file=sys.stderr)
    elif not as_json:
        print(f"\nlogs and JUnit XML in {opts.results_dir}; Buildkite annotation: {annotation}", file=sys.stderr)
    return res.exit_code(results, strict=opts.strict)
