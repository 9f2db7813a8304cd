"""`run.bisect --on buildkite` and `--from-results`: the candidates fanned out as Buildkite jobs, and the
answer read back from the outcomes those jobs upload. Pure: no git, engine or file system here.

Each job is the commit's own generated step (its step file, rendered as run.step renders it: queue,
command, env, plugins, GPUs, timeout, retry) with three changes, each what run.step does for that commit:
the image is the commit's CI image pinned by its registry digest (DOCKER_IMAGE_NAME, or the native pod's
image, as `run.step --image` sets them), the job runs the commit's own runner (the tree is checked out at
the commit first) with BUILDKITE_COMMIT set to the commit (the native runner compares it with the image's
/opt/vllm-ci/commit.txt), and after the runner it writes a small outcome file (its exit status), uploaded
as an artifact named for the commit. The step's command itself is left as generated.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocmci.errors import InputError, UsageError
from rocmci.runs import bisect as bs

PREFIX = "rocmci-bisect-"  # outcome files: rocmci-bisect-<commit>-r<run>-p<parallel job>.json
GROUP_KEY = "rocmci-bisect"
FORMAT = 1  # the outcome file's "rocmci_bisect" value
_COMMIT = re.compile(r"[0-9a-f]{40}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}@sha256:[0-9a-f]{64}")
_NAME = re.compile(PREFIX + r"([0-9a-f]{40})-r([0-9]{1,2})-p([0-9]{1,3})\.json")
MAX_OUTCOME_BYTES = 4096


def search_id(step: str, good: str, bad: str, repeat: int, repo: str) -> str:
    """Which bisect an outcome file belongs to: outcomes of another search are refused, not mixed in."""
    text = json.dumps([step, good, bad, repeat, repo])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pinned_image(tag: str, digest: str) -> str:
    """`repo:tag` + the registry's digest -> `repo@sha256:...`: the image every agent pulls, whatever the tag does."""
    if not _DIGEST.fullmatch(digest or ""):
        raise UsageError(f"the registry's digest for {tag} is not a sha256 digest", hint="check the registry")
    repo = tag.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    return f"{repo}@{digest}"


def is_native(data: Mapping[str, Any]) -> bool:
    return any(isinstance(p, dict) and isinstance(p.get("kubernetes"), dict) for p in data.get("plugins") or ())


def with_image(data: dict[str, Any], image: str) -> dict[str, Any]:
    """The generated step running `image`, as `run.step --image` makes the job: the runner's DOCKER_IMAGE_NAME,
    or a native step's pod container image (stepjobs._with_image does the same on the agent's job)."""
    out = copy.deepcopy(data)
    if is_native(out):
        for plugin in out["plugins"]:
            if isinstance(plugin, dict) and isinstance(plugin.get("kubernetes"), dict):
                containers = plugin["kubernetes"].setdefault("podSpecPatch", {}).setdefault("containers", [{}])
                containers[0]["image"] = image
                break
    else:
        out["env"] = {**(out.get("env") or {}), "DOCKER_IMAGE_NAME": image}
    return out


def job_command(command: str, commit: str, run: int, search: str) -> str:
    """The job's script (run by the agent's `bash -e -c`): the commit's tree, the step's command unchanged,
    then the outcome file. `$$` is a literal `$` after `buildkite-agent pipeline upload`."""
    if not _COMMIT.fullmatch(commit):
        raise UsageError(f"{commit[:50]!r} is not a full commit hash")
    fields = (
        f'"rocmci_bisect":{FORMAT},"search":"{search}","commit":"{commit}","run":{run},'
        '"parallel_job":%d,"parallel_jobs":%d,"exit_code":%d,"seconds":%d'
    )
    values = '"$${BUILDKITE_PARALLEL_JOB:-0}" "$${BUILDKITE_PARALLEL_JOB_COUNT:-1}" "$$rocmci_bisect_exit" "$$SECONDS"'
    name = f"{PREFIX}{commit}-r{run}-p$${{BUILDKITE_PARALLEL_JOB:-0}}.json"
    return "\n".join(
        [
            f"git cat-file -e {commit}^{{commit}} 2>/dev/null || git fetch --quiet origin {commit}",
            f"git -c advice.detachedHead=false checkout --quiet --force {commit}",
            f"export BUILDKITE_COMMIT={commit}",
            f"rocmci_bisect_exit=0; {command} || rocmci_bisect_exit=$$?",
            f"printf '{{{fields}}}\\n' {values} > \"{name}\"",
            'exit "$$rocmci_bisect_exit"',
        ]
    )


def outcome_glob(commit: str, run: int) -> str:
    return f"{PREFIX}{commit}-r{run}-p*.json"


def job_steps(data: Mapping[str, Any], commit: str, image: str, repeat: int, search: str) -> list[dict[str, Any]]:
    """The `repeat` jobs of one commit: its generated step, pinned to its image, recording its outcome."""
    if not _IMAGE.fullmatch(image):
        raise UsageError(f"{image[:80]!r} is not an image pinned by digest", hint="repo@sha256:<64 hex>")
    out = []
    for run in range(repeat):
        step = with_image(dict(data), image)
        step.pop("depends_on", None)  # the image exists: no image build step in a bisect build
        step.pop("key", None)
        suffix = f" (run {run + 1} of {repeat})" if repeat > 1 else ""
        step["label"] = f"{data.get('label', '?')} @ {commit[:12]}{suffix}"
        step["key"] = f"bisect-{commit[:12]}-r{run}"
        step["command"] = job_command(str(data["command"]), commit, run, search)
        paths = step.get("artifact_paths") or []
        paths = [paths] if isinstance(paths, str) else list(paths)
        step["artifact_paths"] = [*paths, outcome_glob(commit, run)]
        out.append(step)
    return out


@dataclass(frozen=True)
class Candidate:
    commit: str
    tag: str  # the CI image's tag, as the build script names it
    image: str | None  # pinned by digest; None: no image in the registry (skipped)
    why: str = ""  # why it is skipped
    step: dict | None = None  # the commit's generated step


def pipeline(label: str, candidates: Sequence[Candidate], repeat: int, search: str) -> dict[str, Any]:
    """The pipeline for `buildkite-agent pipeline upload`: one group, the jobs of every commit with an image."""
    steps = []
    for c in candidates:
        if c.image is not None and c.step is not None:
            steps += job_steps(c.step, c.commit, c.image, repeat, search)
    if not steps:
        raise UsageError(
            "no candidate commit has a CI image in the registry: nothing to fan out",
            hint="check ROCM_CI_IMAGE_REPO and the registry (rocmci run.bisect -n lists them)",
        )
    return {"steps": [{"group": f"bisect: {label}", "key": GROUP_KEY, "steps": steps}]}


# ------------------------------------------------------------------------------ reading the outcomes


@dataclass(frozen=True)
class Outcome:
    commit: str
    run: int
    parallel_job: int
    parallel_jobs: int  # the step's parallelism (BUILDKITE_PARALLEL_JOB_COUNT)
    exit_code: int
    seconds: int
    where: str


def parse_outcome(data: bytes, where: str, search: str) -> Outcome:
    """One outcome file, checked: what it says, of this search, in the shape the job writes."""
    m = _NAME.fullmatch(where.rsplit("/", 1)[-1])
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InputError("not an outcome file of run.bisect (not JSON)", where=where,
                         hint="give the folder `buildkite-agent artifact download 'rocmci-bisect-*'` wrote") from None
    ints = ("run", "parallel_job", "parallel_jobs", "exit_code", "seconds")
    if (
        not isinstance(record, dict)
        or record.get("rocmci_bisect") != FORMAT
        or not isinstance(record.get("commit"), str)
        or not _COMMIT.fullmatch(record["commit"])
        or not all(isinstance(record.get(k), int) and not isinstance(record.get(k), bool) for k in ints)
    ):
        raise InputError("not an outcome file of run.bisect (its fields are not commit, run, exit_code ...)",
                         where=where, hint="remove it from the folder")  # fmt: skip
    if record.get("search") != search:
        raise InputError("the outcome belongs to another bisect (another step, --good, --bad, --repeat or image repo)",
                         where=where, hint="give the same flags as the --on buildkite run")  # fmt: skip
    if m and (m.group(1), int(m.group(2)), int(m.group(3))) != (record["commit"], record["run"],
                                                                  record["parallel_job"]):  # fmt: skip
        raise InputError("the file's name and content name different jobs", where=where, hint="remove it")
    if not 0 <= record["parallel_job"] < record["parallel_jobs"] <= 1000:
        raise InputError(f"parallel job {record['parallel_job']} of {record['parallel_jobs']} is not a job",
                         where=where, hint="remove it")  # fmt: skip
    if not -255 <= record["exit_code"] <= 255:
        raise InputError(f"exit_code {record['exit_code']} is not an exit status", where=where, hint="remove it")
    return Outcome(record["commit"], record["run"], record["parallel_job"], record["parallel_jobs"],
                   record["exit_code"], max(0, record["seconds"]), where)  # fmt: skip


@dataclass(frozen=True)
class Decided:
    commit: str
    outcomes: tuple[str, ...]
    verdict: str
    seconds: float
    why: str
    files: tuple[str, ...]


def decide(
    commits: Sequence[str],
    found: Iterable[tuple[Outcome, str]],
    *,
    repeat: int,
    any_fails: bool = True,
) -> dict[str, Decided]:
    """Each candidate's verdict from the outcomes its jobs uploaded (`found`: an outcome and its rocmci outcome
    word, from results.classify). A commit without every job's outcome is good only if all were seen; it is
    bad without them when a failure already decides it (--bad-if any). Commits with none are skips."""
    known = set(commits)
    by_commit: dict[str, dict[tuple[int, int], tuple[Outcome, str]]] = {}
    for outcome, word in found:
        if outcome.commit not in known:
            raise InputError(f"outcome of commit {outcome.commit[:12]}, which is not a candidate after --good up "
                             "to --bad", where=outcome.where, hint="give the same --good and --bad as the "
                             "--on buildkite run")  # fmt: skip
        if outcome.run >= repeat:
            raise InputError(f"run {outcome.run + 1} of commit {outcome.commit[:12]}: this bisect runs each commit "
                             f"{repeat} time(s)", where=outcome.where, hint="give the same --repeat")  # fmt: skip
        by_commit.setdefault(outcome.commit, {})[(outcome.run, outcome.parallel_job)] = (outcome, word)
    out = {}
    for commit in commits[:-1]:  # --bad is known bad, never run
        seen = by_commit.get(commit, {})
        expected = repeat * max((o.parallel_jobs for o, _ in seen.values()), default=1)
        words = tuple(word for _, (_, word) in sorted(seen.items()))
        verdict = bs.verdict(list(words), any_fails=any_fails) if words else bs.SKIP
        why = "" if words else "no outcome uploaded (no image, or its jobs did not run)"
        incomplete = len(seen) < expected
        if incomplete and (verdict == bs.GOOD or (verdict == bs.BAD and not any_fails)):
            verdict, why = bs.SKIP, f"undecided: {len(seen)} of {expected} jobs uploaded an outcome"
        elif words and verdict == bs.SKIP:
            why = "no run passed or failed: " + ", ".join(dict.fromkeys(words))
        seconds = float(max((o.seconds for o, _ in seen.values()), default=0))
        files = tuple(o.where for o, _ in seen.values())
        out[commit] = Decided(commit, words, verdict, seconds, why, files)
    return out


def out_of_order(commits: Sequence[str], verdicts: Mapping[str, str]) -> list[str]:
    """Bad commits older than a good one: the step is flaky, or a break was fixed and broken again."""
    goods = [i for i, c in enumerate(commits) if verdicts.get(c) == bs.GOOD]
    newest_good = max(goods, default=-1)
    return [c for c in commits[:newest_good] if verdicts.get(c) == bs.BAD]
