"""The decisions ci-infra's bootstrap-amd.sh makes before it renders the template, as a pure function.

bootstrap-amd.sh turns the changed files (vs the merge base on a PR branch, HEAD~1 on main) into the
template's inputs: docs-only changes skip the pipeline, a few paths force run_all or nightly, and
everything else is passed on as `list_file_diff` ("a|b|c"; the sentinels "run_all" / "nightly" when
full coverage was chosen). Every decision keeps the rule and the file that made it, for `pipeline.plan`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from rocmci import values
from rocmci.errors import UsageError

ROCM_BASE_DOCKERFILE = "docker/Dockerfile.rocm_base"
# A change under any of these can affect every test (bootstrap-amd.sh `patterns`) ...
RUN_ALL_PATTERNS = (
    "docker/Dockerfile.rocm",
    "CMakeLists.txt",
    "requirements/common.txt",
    "requirements/rocm.txt",
    "requirements/build/rocm.txt",
    "requirements/test/rocm.txt",
    "setup.py",
    "csrc/",
    "cmake/",
)
# ... except these CPU-only parts (`ignore_patterns`).
RUN_ALL_IGNORED = ("csrc/cpu", "cmake/cpu_extension.cmake")
NIGHTLY_PATTERNS = (ROCM_BASE_DOCKERFILE,)
RUN_ALL_LABEL = "ready-run-all-tests"
NO_FAIL_FAST_LABEL = "ci-no-fail-fast"  # bootstrap-amd.sh fail_fast()
# Buildkite's own variable with the PR's labels, comma-separated, where the agent provides it. bootstrap-amd.sh
# itself asks GitHub's API (curl .../pulls/$BUILDKITE_PULL_REQUEST | jq '.labels[].name'); rocmci reads
# no network, so the variable or --label stands in for that answer.
LABELS_ENV = "BUILDKITE_PULL_REQUEST_LABELS"
FASTCHECK_SLUG = "fastcheck"
FASTCHECK_MIRROR = "amdtentative"


class TemplateInputs(NamedTuple):
    """The -D variables bootstrap-amd.sh gives minijinja-cli: all strings, exactly as the template sees them."""

    branch: str = ""
    list_file_diff: str = ""
    run_all: str = "0"
    nightly: str = "0"
    torch_nightly: str = "0"
    mirror_hw: str = "amdproduction"
    fail_fast: str = "false"
    vllm_use_precompiled: str = "1"
    vllm_merge_base_commit: str = ""
    cov_enabled: str = "0"
    vllm_ci_branch: str = "main"
    rocm_base_refresh_skip: str = "0"
    rocm_base_refresh_force: str = "0"

    def variables(self) -> dict[str, str]:
        return self._asdict()

    @property
    def changed(self) -> list[str]:
        """list_file_diff split as the template splits it (CR dropped, newlines and '|' separate)."""
        return self.list_file_diff.replace("\r", "").replace("\n", "|").split("|")


class Request(NamedTuple):
    """What bootstrap-amd.sh reads from its environment and git."""

    changed: Sequence[str] | None = ()  # None: the diff could not be computed (bootstrap then runs all)
    diff_problem: str = ""  # why it could not be (git's words), for the plan
    branch: str = ""
    run_all: bool = False  # RUN_ALL=1 in the environment (or --run-all)
    nightly: bool = False  # NIGHTLY=1 (e.g. a scheduled build; or --nightly)
    run_all_why: str = "RUN_ALL=1 was set"  # how run_all was asked for, in the plan's words
    nightly_why: str = "NIGHTLY=1 was set"
    labels: Sequence[str] = ()  # PR labels (bootstrap-amd.sh reads them on PR builds only: none elsewhere)
    pull_request: bool = False  # a PR build (BUILDKITE_PULL_REQUEST is a number): fail_fast is "true" only there
    pipeline_slug: str = ""
    mirror_hw: str = "amdproduction"
    docs_only_disable: bool = False
    base_refresh_skip: bool = False
    base_refresh_force: bool = False
    merge_base: str = ""


class Decision(NamedTuple):
    inputs: TemplateInputs
    skip: str | None = None  # why no pipeline is uploaded at all (docs-only change)
    reasons: tuple[str, ...] = ()  # why run_all / nightly are what they are


def docs_only(paths: Sequence[str]) -> bool:
    files = [p for p in paths if p]
    return bool(files) and all(p.startswith("docs/") or p.endswith(".md") or p == "mkdocs.yaml" for p in files)


def has_label(labels: Sequence[str], name: str) -> bool:
    """bootstrap-amd.sh's test, `[[ $PR_LABELS == *"<name>"* ]]`: a substring of the newline-joined labels,
    so a label that merely contains the name counts too (kept: it is what decides vLLM's real builds)."""
    return name in "\n".join(labels)


def fail_fast(req: Request) -> str:
    """bootstrap-amd.sh fail_fast(): "true" on a PR without the ci-no-fail-fast label, else "false"."""
    return "true" if req.pull_request and not has_label(req.labels, NO_FAIL_FAST_LABEL) else "false"


def _matches(path: str, patterns: Sequence[str]) -> str | None:
    # bash `[[ $file == $pattern* ]]`: a plain prefix test (no glob characters in these patterns). One
    # startswith(tuple) call rules out most paths in C: a generator per path made 10^6 paths cost 8 s.
    if not path.startswith(tuple(patterns)):
        return None
    return next(p for p in patterns if path.startswith(p))


REASONS_SHOWN = 5  # matching files named per kind (run_all, nightly); the rest are counted


def decide(req: Request) -> Decision:
    reasons: list[str] = []
    run_all, nightly = req.run_all, req.nightly
    if run_all:
        reasons.append(f"run_all: {req.run_all_why}")
    if nightly:
        reasons.append(f"nightly: {req.nightly_why}")
    changed = [p.replace("\r", "") for p in (req.changed or ())]
    if req.changed is None:
        run_all = True
        why = f" ({req.diff_problem})" if req.diff_problem else ""
        reasons.append(f"run_all: the changed files could not be computed{why}, as bootstrap-amd.sh falls back")
    mirror = FASTCHECK_MIRROR if req.pipeline_slug == FASTCHECK_SLUG else req.mirror_hw
    if mirror != req.mirror_hw:
        reasons.append(f"mirror_hw {mirror}: the {FASTCHECK_SLUG} pipeline uses it")
    if not req.docs_only_disable and docs_only(changed):
        return Decision(TemplateInputs(), skip="only docs/**, *.md or mkdocs.yaml changed: no pipeline")
    matched = {"nightly": 0, "run_all": 0}
    for path in filter(None, changed):
        hit = _matches(path, NIGHTLY_PATTERNS)
        kind = "nightly" if hit else ""
        if not hit:
            hit = _matches(path, RUN_ALL_PATTERNS)
            kind = "run_all" if hit and not _matches(path, RUN_ALL_IGNORED) else ""
        if not kind:
            continue
        nightly, run_all = nightly or kind == "nightly", run_all or kind == "run_all"
        matched[kind] += 1
        if matched[kind] <= REASONS_SHOWN:
            reasons.append(f"{kind}: {path} changed (pattern {hit})")
    for kind, count in matched.items():
        if count > REASONS_SHOWN:  # one file is reason enough; a million lines would bury the rest
            reasons.append(f"{kind}: and {count - REASONS_SHOWN:,} more changed files like these")
    if has_label(req.labels, RUN_ALL_LABEL):
        run_all = nightly = True
        reasons.append(f"run_all and nightly: the PR has the label {RUN_ALL_LABEL}")
    if req.pull_request:
        why = "the PR has" if has_label(req.labels, NO_FAIL_FAST_LABEL) else "a PR without"
        reasons.append(f"fail_fast {fail_fast(req)}: {why} the label {NO_FAIL_FAST_LABEL}")
    if run_all:
        listing = "run_all"
    elif nightly:
        listing = "nightly"
    else:
        listing = "|".join(p for p in changed if p)
    inputs = TemplateInputs(
        branch=req.branch,
        list_file_diff=listing,
        run_all="1" if run_all else "0",
        nightly="1" if nightly else "0",
        mirror_hw=mirror,
        fail_fast=fail_fast(req),
        vllm_use_precompiled="0" if run_all or nightly else "1",
        vllm_merge_base_commit=req.merge_base,
        rocm_base_refresh_skip="1" if req.base_refresh_skip else "0",
        rocm_base_refresh_force="1" if req.base_refresh_force else "0",
    )
    return Decision(inputs, None, tuple(reasons))


# --- reading git (effectful; everything above is pure) -------------------------------------------

GIT_SECONDS = 120  # registry.py's git_timeout default


def _git(args: list[str], workspace: Path, timeout: float = GIT_SECONDS) -> subprocess.CompletedProcess:
    from rocmci import process

    try:
        # The whole process group goes at the bound: a fetch's transport helper or ssh holds git's pipes open.
        return process.run_captured(["git", *args], cwd=workspace, timeout=timeout)
    except FileNotFoundError:
        raise UsageError(
            "--diff-base needs git, which is not on PATH", hint="install git, or use --changed-files"
        ) from None
    except subprocess.TimeoutExpired:
        peer = " (its remote did not answer)" if args[0] == "fetch" else ""
        raise UsageError(
            f"git {args[0]} did not finish within {timeout:g} s{peer}",
            hint="raise the setting git_timeout (ROCMCI_GIT_TIMEOUT), or give the changed files with --changed-files",
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot run git: {exc.strerror}", hint="use --changed-files") from None


class DiffUnavailable(tuple):
    """No changed files because git could not compute them (no merge base in a shallow clone): bootstrap-amd.sh
    then runs everything. An empty tuple that says why."""

    reason: str = ""

    def __new__(cls, reason: str) -> DiffUnavailable:
        made = super().__new__(cls, ())
        made.reason = reason
        return made


DEEPEN = 50  # bootstrap-amd.sh: git fetch --no-tags --deepen=50 origin


def _deepen_if_shallow(workspace: Path, timeout: float = GIT_SECONDS) -> None:
    """As bootstrap-amd.sh: a shallow clone is deepened by 50 commits first. A failed fetch is not fatal there
    either (`|| true`): the merge-base step after it says what is missing."""
    shallow = _git(["rev-parse", "--is-shallow-repository"], workspace, timeout)
    if shallow.returncode == 0 and shallow.stdout.strip() == "true":
        _git(["fetch", "--no-tags", f"--deepen={DEEPEN}", "origin"], workspace, timeout)


def _fetch_origin_ref(diff_base: str, workspace: Path, timeout: float = GIT_SECONDS) -> bool:
    """bootstrap-amd.sh fetch_origin_ref: an `origin/<branch>` the clone lacks is fetched (depth 50, then full)."""
    branch = diff_base.removeprefix("origin/")
    if branch == diff_base or not branch:
        return False
    refspec = f"{branch}:refs/remotes/origin/{branch}"
    for depth in ([f"--depth={DEEPEN}"], []):
        fetched = _git(["fetch", "--no-tags", *depth, "--end-of-options", "origin", refspec], workspace, timeout)
        if fetched.returncode == 0:
            return True
    return False


def git_changed_files(diff_base: str, workspace: Path, timeout: float = GIT_SECONDS) -> tuple[str, ...]:
    """Files changed between the merge base of `diff_base` and HEAD, as bootstrap-amd.sh's get_diff lists them.

    Like bootstrap-amd.sh, a shallow clone is deepened first, an `origin/<branch>` it lacks is fetched, and
    when no merge base can be found the result is DiffUnavailable (the caller then runs everything).
    Every other failure is one UsageError line: not a git repository, a ref git does not know, a ref that
    could be read as an option; never git's usage text.
    """
    values.git_ref("--diff-base", diff_base)  # never an option to git: checked by the flags' own rule
    inside = _git(["rev-parse", "--is-inside-work-tree"], workspace, timeout)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        # git's own reason: not a repository, or one it refuses to read (dubious ownership)
        reason = (inside.stderr.strip().splitlines() or [f"{workspace} is not a work tree"])[-1]
        raise UsageError(
            f"--diff-base needs a git repository: {reason[:200]}",
            hint="run it in a git clone, or give the changed files with --changed-files",
        )
    _deepen_if_shallow(workspace, timeout)
    verify = ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{diff_base}^{{commit}}"]
    ref = _git(verify, workspace, timeout)
    if ref.returncode != 0 and _fetch_origin_ref(diff_base, workspace, timeout):
        ref = _git(verify, workspace, timeout)
    if ref.returncode != 0:
        raise UsageError(
            f"--diff-base {diff_base!r} is not a commit this repository knows",
            hint="fetch it first (git fetch origin), or use --changed-files",
        )
    base = _git(["merge-base", "--end-of-options", diff_base, "HEAD"], workspace, timeout)
    if base.returncode != 0 or not base.stdout.strip():
        return DiffUnavailable(f"no merge base of {diff_base} and HEAD, even after deepening")
    diff = _git(["diff", "--name-only", "--diff-filter=ACMDR", f"{diff_base}...HEAD", "--"], workspace, timeout)
    if diff.returncode != 0:
        last = (diff.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"git diff against {diff_base!r} failed: {last[:200]}", hint="use --changed-files")
    return tuple(line for line in diff.stdout.splitlines() if line)
