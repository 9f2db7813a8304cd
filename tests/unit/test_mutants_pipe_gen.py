"""Promises of pipeline generate / amdsteps / bootstrap that mutation testing (issue 24) found unguarded.

The git helpers run the real git on throw-away repositories in tmp_path, in-process, as `pipeline.plan
--diff-base` runs them; the rest feed generate/decide real step files and compare whole outputs.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from rocmci.errors import UsageError
from rocmci.pipeline import amdsteps as amd
from rocmci.pipeline import bootstrap, scalars

# --- bootstrap's git helpers (what `pipeline.plan --diff-base` asks git) ----------------------------------


def clean_git_env(home: Path) -> dict[str, str]:
    """git as on a clean agent: no user or system config, an identity for commits, no repository above home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_CEILING_DIRECTORIES=str(home.parent))
    for who in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{who}_NAME": "t", f"GIT_{who}_EMAIL": "t@t"})
    return env


@pytest.fixture
def git_env(tmp_path, monkeypatch):
    """tmp_path, with the process environment (which bootstrap's git calls inherit) made clean_git_env."""
    home = tmp_path / "home"
    home.mkdir()
    env = clean_git_env(home)
    for name in set(os.environ) - set(env):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return tmp_path


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, capture_output=True, text=True, check=True,
        timeout=60, env=env,
    )  # fmt: skip
    return done.stdout.strip()


def commit(repo: Path, message: str, **files: str | None) -> None:
    """Write (or, for None, delete) files named with '__' for '/', then commit everything."""
    for name, text in files.items():
        path = repo / name.replace("__", "/")
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)


def pr_repo(root: Path) -> Path:
    """main: base files; branch pr (checked out) changes them every way; main then moves on by itself."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, "base", keep="k\n", edit="e\n", gone="g\n", moved="the same text, long enough to be a rename\n",
           kind="a regular file\n")  # fmt: skip
    git(repo, "checkout", "-q", "-b", "pr")
    (repo / "moved").rename(repo / "renamed")
    (repo / "kind").unlink()
    (repo / "kind").symlink_to("keep")  # a type change: bootstrap's --diff-filter=ACMDR leaves it out
    commit(repo, "pr", edit="e2\n", gone=None, csrc__new_kernel="k\n")
    git(repo, "checkout", "-q", "main")
    commit(repo, "main moves on", only_on_main="m\n")
    git(repo, "checkout", "-q", "pr")
    return repo


def test_diff_base_lists_what_the_branch_changed_since_the_merge_base(git_env):
    """--diff-base: added, edited, deleted and renamed files since the merge base (not what main did since),
    a type change left out, as bootstrap-amd.sh's `git diff --name-only --diff-filter=ACMDR base...HEAD`."""
    repo = pr_repo(git_env)
    changed = bootstrap.git_changed_files("main", repo)
    assert type(changed) is tuple
    assert changed == ("csrc/new_kernel", "edit", "gone", "renamed")


def test_diff_base_against_itself_is_no_change(git_env):
    repo = pr_repo(git_env)
    assert bootstrap.git_changed_files("pr", repo) == ()
    assert bootstrap.git_changed_files("HEAD~1", repo) == ("csrc/new_kernel", "edit", "gone", "renamed")


def test_no_merge_base_is_diff_unavailable_with_the_reason(git_env):
    """Unrelated histories: no error, a DiffUnavailable saying why (pipeline.plan then runs everything)."""
    repo = pr_repo(git_env)
    git(repo, "checkout", "-q", "--orphan", "other")
    commit(repo, "unrelated")
    changed = bootstrap.git_changed_files("main", repo)
    assert isinstance(changed, bootstrap.DiffUnavailable) and changed == ()
    assert changed.reason == "no merge base of main and HEAD, even after deepening"
    decision = bootstrap.decide(bootstrap.Request(changed=None, diff_problem=changed.reason))
    assert decision.reasons == (
        "run_all: the changed files could not be computed (no merge base of main and HEAD, even after "
        "deepening), as bootstrap-amd.sh falls back",
    )


def test_a_folder_that_is_no_repository_is_one_usage_line(git_env):
    plain = git_env / "plain"
    plain.mkdir()
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", plain)
    assert caught.value.message == (
        "--diff-base needs a git repository: fatal: not a git repository (or any of the parent directories): .git"
    )
    assert caught.value.hint == "run it in a git clone, or give the changed files with --changed-files"


def test_inside_the_git_folder_is_not_a_work_tree(git_env):
    """`git rev-parse --is-inside-work-tree` says "false" in .git: no diff can be made there."""
    repo = pr_repo(git_env)
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", repo / ".git")
    assert caught.value.message == f"--diff-base needs a git repository: {repo / '.git'} is not a work tree"


def test_an_unknown_ref_is_one_usage_line(git_env):
    repo = pr_repo(git_env)
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("origin/nowhere", repo)
    assert caught.value.message == "--diff-base 'origin/nowhere' is not a commit this repository knows"
    assert caught.value.hint == "fetch it first (git fetch origin), or use --changed-files"


def test_a_ref_that_reads_as_an_option_never_reaches_git(git_env):
    repo = pr_repo(git_env)
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("--output=x", repo)
    assert caught.value.message == "--diff-base '--output=x' is not a git ref"
    assert not (repo / "x").exists()


def test_no_git_on_path_is_one_usage_line(git_env, monkeypatch):
    repo = pr_repo(git_env)
    empty = git_env / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", repo)
    assert caught.value.message == "--diff-base needs git, which is not on PATH"
    assert caught.value.hint == "install git, or use --changed-files"


def test_a_git_that_cannot_be_started_is_one_usage_line(git_env, monkeypatch):
    repo = pr_repo(git_env)
    bad = git_env / "bad-bin"
    bad.mkdir()
    (bad / "git").write_bytes(b"\x7fELF not really a program")
    (bad / "git").chmod(0o755)
    monkeypatch.setenv("PATH", str(bad))
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", repo)
    assert caught.value.message == "cannot run git: Exec format error"
    assert caught.value.hint == "use --changed-files"


@pytest.fixture(scope="module")
def long_origin(tmp_path_factory) -> Path:
    """origin: main of 60 commits, then pr (1 commit) forks off its tip and main moves on by 5. Both
    histories are longer than bootstrap-amd.sh's 50. Made once: tests clone it and never change it."""
    root = tmp_path_factory.mktemp("origin")
    env = clean_git_env(root)
    origin = root / "origin"
    origin.mkdir()
    git(origin, "init", "-q", env=env)
    (origin / "a").write_text("a\n")
    git(origin, "add", "-A", env=env)
    for i in range(60):
        git(origin, "commit", "-q", "--allow-empty", "-m", f"old {i}", env=env)
    git(origin, "checkout", "-q", "-b", "pr", env=env)
    (origin / "vllm").mkdir()
    (origin / "vllm" / "changed_by_pr").write_text("x\n")
    git(origin, "add", "-A", env=env)
    git(origin, "commit", "-q", "-m", "pr", env=env)
    git(origin, "checkout", "-q", "main", env=env)
    for i in range(5):
        (origin / f"m{i}").write_text("m\n")
        git(origin, "add", "-A", env=env)
        git(origin, "commit", "-q", "-m", f"main {i}", env=env)
    return origin


def shallow_clone(origin: Path, root: Path) -> Path:
    """The agent's clone: pr at depth 1, no origin/main."""
    clone = root / "clone"
    git(root, "clone", "-q", "--depth", "1", "--branch", "pr", f"file://{origin}", str(clone))
    return clone


def test_a_shallow_clone_is_deepened_by_50_and_origin_main_fetched_at_depth_50(git_env, long_origin):
    """bootstrap-amd.sh on an agent's depth-1 clone: `git fetch --deepen=50`, then origin/main fetched with
    --depth=50 first; the merge base lies within both, so the diff is the PR's own file."""
    clone = shallow_clone(long_origin, git_env)
    assert bootstrap.git_changed_files("origin/main", clone) == ("vllm/changed_by_pr",)
    assert git(clone, "rev-parse", "--is-shallow-repository") == "true"  # deepened, not unshallowed
    assert git(clone, "rev-list", "--count", "origin/main") == "50"


def test_deepening_adds_50_commits_to_a_shallow_clone(git_env, long_origin):
    clone = shallow_clone(long_origin, git_env)
    bootstrap._deepen_if_shallow(clone)
    assert git(clone, "rev-list", "--count", "HEAD") == "51"


def test_a_full_clone_is_not_fetched_from(git_env):
    """Only a shallow clone is deepened: a full clone's remote refs stay as they were (no network call)."""
    origin = pr_repo(git_env)
    full = git_env / "full"
    git(git_env, "clone", "-q", f"file://{origin}", str(full))
    before = git(full, "for-each-ref", "refs/remotes")
    commit(origin, "origin's pr moves on", later="l\n")
    assert bootstrap.git_changed_files("origin/main", full) == ("csrc/new_kernel", "edit", "gone", "renamed")
    assert git(full, "for-each-ref", "refs/remotes") == before


def test_fetch_origin_ref_only_fetches_origin_branches(git_env, long_origin):
    """fetch_origin_ref: only `origin/<branch>` names are fetched, a branch origin lacks is no error."""
    clone = shallow_clone(long_origin, git_env)
    assert bootstrap._fetch_origin_ref("main", clone) is False  # not origin/...: nothing to fetch
    assert bootstrap._fetch_origin_ref("origin/", clone) is False
    assert bootstrap._fetch_origin_ref("origin/nowhere", clone) is False
    assert bootstrap._fetch_origin_ref("origin/main", clone) is True
    assert git(clone, "rev-list", "--count", "origin/main") == "50"


# --- bootstrap.decide: the reasons pipeline.plan prints, and the inputs ---------------------------------


def test_every_reason_pipeline_plan_prints_for_a_pr_on_fastcheck():
    """pipeline.plan's "why" lines: one per rule that fired, in bootstrap-amd.sh's order, naming file and rule."""
    req = bootstrap.Request(
        changed=("docs/a.md", "csrc/x.cu\r", "csrc/cpu/y.cpp", "docker/Dockerfile.rocm_base", "", "vllm/z.py"),
        branch="feature/x", run_all=True, nightly=True, labels=("bug", "ready-run-all-tests"), pull_request=True,
        pipeline_slug="fastcheck", merge_base="abc123", base_refresh_skip=True,
    )  # fmt: skip
    decision = bootstrap.decide(req)
    assert decision.skip is None
    assert decision.reasons == (
        "run_all: RUN_ALL=1 was set",
        "nightly: NIGHTLY=1 was set",
        "mirror_hw amdtentative: the fastcheck pipeline uses it",
        "run_all: csrc/x.cu changed (pattern csrc/)",
        "nightly: docker/Dockerfile.rocm_base changed (pattern docker/Dockerfile.rocm_base)",
        "run_all and nightly: the PR has the label ready-run-all-tests",
        "fail_fast true: a PR without the label ci-no-fail-fast",
    )
    assert decision.inputs == bootstrap.TemplateInputs(
        branch="feature/x", list_file_diff="run_all", run_all="1", nightly="1", mirror_hw="amdtentative",
        fail_fast="true", vllm_use_precompiled="0", vllm_merge_base_commit="abc123", rocm_base_refresh_skip="1",
    )  # fmt: skip


def test_a_plain_change_lists_its_files_and_keeps_the_precompiled_wheel():
    req = bootstrap.Request(
        changed=("vllm/a.py\r", "", "csrc/cpu/b.cpp", "cmake/cpu_extension.cmake"), labels=("ci-no-fail-fast",),
        pull_request=True, mirror_hw="amdexperimental", base_refresh_force=True,
    )  # fmt: skip
    decision = bootstrap.decide(req)
    assert decision.reasons == ("fail_fast false: the PR has the label ci-no-fail-fast",)
    assert decision.inputs.variables() == {
        "branch": "", "list_file_diff": "vllm/a.py|csrc/cpu/b.cpp|cmake/cpu_extension.cmake", "run_all": "0",
        "nightly": "0", "torch_nightly": "0", "mirror_hw": "amdexperimental", "fail_fast": "false",
        "vllm_use_precompiled": "1", "vllm_merge_base_commit": "", "cov_enabled": "0", "vllm_ci_branch": "main",
        "rocm_base_refresh_skip": "0", "rocm_base_refresh_force": "1",
    }  # fmt: skip


def test_nightly_alone_lists_the_nightly_sentinel():
    decision = bootstrap.decide(bootstrap.Request(changed=("docker/Dockerfile.rocm_base",)))
    assert (decision.inputs.list_file_diff, decision.inputs.run_all, decision.inputs.nightly) == ("nightly", "0", "1")
    assert decision.inputs.vllm_use_precompiled == "0"
    assert decision.inputs.fail_fast == "false"  # not a PR build


@pytest.mark.parametrize(
    ("problem", "reason"),
    [
        ("", "run_all: the changed files could not be computed, as bootstrap-amd.sh falls back"),
        ("no merge base", "run_all: the changed files could not be computed (no merge base), as bootstrap-amd.sh "
         "falls back"),
    ],
)  # fmt: skip
def test_an_unknown_diff_runs_everything_and_says_why(problem, reason):
    decision = bootstrap.decide(bootstrap.Request(changed=None, diff_problem=problem))
    assert decision.reasons == (reason,)
    assert (decision.inputs.run_all, decision.inputs.list_file_diff) == ("1", "run_all")


@pytest.mark.parametrize(
    ("changed", "skipped"),
    [
        (("docs/a.txt", "README.md", "mkdocs.yaml", ""), True),
        (("docs/a.txt", "vllm/x.py"), False),
        (("mkdocs.yml",), False),
        (("docsx/a.txt",), False),
        (("", ""), False),
        ((), False),
    ],
)
def test_docs_only_changes_skip_the_pipeline(changed, skipped):
    """bootstrap-amd.sh uploads nothing when only docs/**, *.md or mkdocs.yaml changed (not for no change)."""
    decision = bootstrap.decide(bootstrap.Request(changed=changed, run_all=True))
    if skipped:
        assert decision == bootstrap.Decision(
            bootstrap.TemplateInputs(), skip="only docs/**, *.md or mkdocs.yaml changed: no pipeline"
        )
    else:
        assert decision.skip is None and decision.inputs.run_all == "1"
    kept = bootstrap.decide(bootstrap.Request(changed=changed, docs_only_disable=True))
    assert kept.skip is None


def test_label_test_is_a_substring_of_the_joined_labels():
    """`[[ $PR_LABELS == *"name"* ]]`: a label containing the name counts; names across two labels do not."""
    assert bootstrap.has_label(("x-ready-run-all-tests-y",), "ready-run-all-tests")
    assert not bootstrap.has_label(("ready-run", "all-tests"), "ready-run-all-tests")
    assert not bootstrap.has_label(("ready-run", "-all-tests"), "ready-run-all-tests")
    assert not bootstrap.has_label((), "ci-no-fail-fast")


def test_template_inputs_split_the_listing_as_the_template_does():
    inputs = bootstrap.TemplateInputs(list_file_diff="a\r\nb|c\nd")
    assert inputs.changed == ["a", "b", "c", "d"]


# --- generate.decide: run / block / skip and the reason pipeline.plan shows --------------------------------

DECIDE_STEPS = """\
steps:
- label: Deps
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  source_file_dependencies: [vllm/a/, 7, vllm/b/]
  commands: [pytest deps]
- label: No deps
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  commands: [pytest free]
- label: Native
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  dind: false
  source_file_dependencies: [tests/never/]
  commands: [pytest native]
- label: Optional
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  optional: true
  source_file_dependencies: [vllm/]
  commands: [pytest optional]
- label: Autorun
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  autorun_on_main: true
  source_file_dependencies: [tests/never/]
  commands: [pytest autorun]
- label: Elsewhere
  mirror_hardwares: [amdexperimental]
  agent_pool: mi300_1
  commands: [pytest elsewhere]
"""


def decisions(**inputs) -> dict[str, tuple[str, str]]:
    from rocmci import yamldoc
    from rocmci.pipeline import generate, source

    src = source.from_document(yamldoc.parse(DECIDE_STEPS, "steps.yaml"))
    result = generate.generate(src, generate.Options(inputs=bootstrap.TemplateInputs(**inputs)))
    return {d.step.label: (d.action, d.reason) for d in result.decisions}


RUNNER = ".buildkite/scripts/hardware_ci/run-amd-test.sh"


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        (
            {"list_file_diff": f"vllm/b/x.py|vllm/a/z.py|vllm/a/y.py|{RUNNER}", "branch": "main"},
            {
                "Deps": ("run", "vllm/a/z.py matches vllm/a/"),  # the first in the listing's order
                "No deps": ("run", "no source_file_dependencies: always runs"),
                "Native": ("run", f"{RUNNER} changed and the step runs natively (dind: false)"),
                "Optional": ("block", "optional: runs unblocked only in nightly builds"),
                "Autorun": ("run", "autorun_on_main on branch main"),
                "Elsewhere": ("skip", "mirror_hardwares lacks amdproduction"),
            },
        ),
        (
            {"list_file_diff": "vllm/b/x.py|docs/x.md", "branch": "feature"},
            {
                "Deps": ("run", "vllm/b/x.py matches vllm/b/"),
                "No deps": ("run", "no source_file_dependencies: always runs"),
                "Native": ("block", "no changed file matches its source_file_dependencies"),
                "Optional": ("block", "optional: runs unblocked only in nightly builds"),
                "Autorun": ("block", "no changed file matches its source_file_dependencies"),
                "Elsewhere": ("skip", "mirror_hardwares lacks amdproduction"),
            },
        ),
        (
            {"list_file_diff": "run_all", "run_all": "1", "mirror_hw": "amdexperimental"},
            {
                "Deps": ("skip", "mirror_hardwares lacks amdexperimental"),
                "No deps": ("skip", "mirror_hardwares lacks amdexperimental"),
                "Native": ("skip", "mirror_hardwares lacks amdexperimental"),
                "Optional": ("skip", "mirror_hardwares lacks amdexperimental"),
                "Autorun": ("skip", "mirror_hardwares lacks amdexperimental"),
                "Elsewhere": ("run", "run_all"),
            },
        ),
        (
            {"list_file_diff": "run_all", "run_all": "1", "nightly": "1"},
            {
                "Deps": ("run", "run_all"),
                "No deps": ("run", "run_all"),
                "Native": ("run", "run_all"),
                "Optional": ("run", "run_all"),
                "Autorun": ("run", "run_all"),
                "Elsewhere": ("skip", "mirror_hardwares lacks amdproduction"),
            },
        ),
        (
            {"list_file_diff": "nightly", "nightly": "1"},
            {
                "Deps": ("run", "nightly"),
                "No deps": ("run", "nightly"),
                "Native": ("run", "nightly"),
                "Optional": ("run", "nightly"),
                "Autorun": ("run", "nightly"),
                "Elsewhere": ("skip", "mirror_hardwares lacks amdproduction"),
            },
        ),
        (
            {"list_file_diff": "run_all", "run_all": "1"},
            {
                "Deps": ("run", "run_all"),
                "No deps": ("run", "run_all"),
                "Native": ("run", "run_all"),
                "Optional": ("block", "optional: runs unblocked only in nightly builds"),
                "Autorun": ("run", "run_all"),
                "Elsewhere": ("skip", "mirror_hardwares lacks amdproduction"),
            },
        ),
    ],
    ids=["pr-on-main", "pr-on-branch", "run-all-experimental", "run-all-nightly", "nightly", "run-all"],
)
def test_each_step_decision_and_its_reason(inputs, expected):
    """pipeline.plan's table: for each step whether it runs, waits behind a block step or is left out, and why."""
    assert decisions(**inputs) == expected


# --- amdsteps: values printed the way minijinja-cli 2.3.1 (Rust) prints them ------------------------------

PREFIX = f"(command rocm-smi || true) && {amd.DEBUG_AGENT_SETUP} && cd "


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        (True, "true"), (False, "false"), (None, ""), ("x y", "x y"), (7, "7"), (1.0, "1.0"),
        (["a", None, True, 1.5], '["a", none, true, 1.5]'), ({"k": [1, {"n": False}]}, '{"k": [1, {"n": false}]}'),
        (['say "hi"\\', "tab\tnl\ncr\rnul\0"], '["say \\"hi\\"\\\\", "tab\\tnl\\ncr\\rnul\\0"]'),
        (["zero\u200bwidth", "nb\u00a0sp", "café ok", "del\x7f"],
         '["zero\\u{200b}width", "nb\\u{a0}sp", "café ok", "del\\u{7f}"]'),
        ([1e20, float("nan")], "[1e20, NaN]"),
        (["back\\slash", "plain"], '["back\\\\slash", "plain"]'),
    ],
)  # fmt: skip
def test_values_print_as_minijinja_cli_prints_them(value, printed):
    """`{{ value }}` in the Rust engine: lists and mappings in Rust's Debug form, text escaped as Rust escapes it."""
    assert amd.rust_text(value) == printed


def test_a_null_item_prints_none_and_other_items_as_values():
    assert [amd.rust_item(v) for v in (None, True, "a", 3, ["b"])] == ["none", "true", "a", "3", '["b"]']


@pytest.mark.parametrize(
    ("command", "workdir", "expected"),
    [
        ('pytest -k "a and b"', "/w", '/w && pytest -k "a and b"'),  # quotes escaped, then unescaped: unchanged
        ("echo a\\\\b", "/w", "/w && echo a\\b"),  # a backslash pair reaches the agent as one
        ("x", "/w\\\\d", "/w\\d && x"),
        ("a\nb", "/w", "/w && a b"),  # a line break in a double-quoted YAML value folds to a space
        ("x", "/w\nd", "/w d && x"),
    ],
)
def test_the_test_commands_value_is_what_the_agent_receives(command, workdir, expected):
    assert amd.test_commands(command, workdir) == PREFIX + expected


def test_a_double_quote_in_the_working_dir_breaks_the_template():
    with pytest.raises(scalars.TemplateBreak, match="double quote"):
        amd.test_commands("x\\\\y", '/w"d')
    with pytest.raises(scalars.TemplateBreak, match="double quote"):
        amd.test_commands("x", '/w"d')


@pytest.mark.parametrize(("timeout", "seconds"), [(180, "10740"), (3, "120"), (2, "60"), (1, "60"), (0, None)])
def test_the_container_stops_a_minute_before_buildkite(timeout, seconds):
    env = amd.runner_env({}, timeout, "pytest x", amd.CI_IMAGE)
    assert env.get("CONTAINER_TIMEOUT_S") == seconds


def test_the_runner_environment_of_a_docker_step():
    data = {"num_gpus": 4, "working_dir": "/vllm-workspace/x"}
    assert amd.runner_env(data, 30, "pytest a", "img:tag") == {
        "BUILDKITE_ARTIFACT_UPLOAD_SKIP_SYMLINKS": "true",
        "NUM_NODES": "1",
        "DOCKER_BUILDKIT": "1",
        "DOCKER_IMAGE_NAME": "rocm/vllm-dev:ci_base",
        "VLLM_CI_BASE_IMAGE": "rocm/vllm-dev:ci_base",
        "VLLM_CI_FALLBACK_IMAGE": "img:tag",
        "VLLM_CI_USE_ARTIFACTS": "1",
        "VLLM_CI_ARTIFACT_GLOB": "artifacts/vllm-rocm-install/vllm-rocm-install.tar.gz",
        "VLLM_CI_RESULTS_ROOT": "/home/buildkite-agent/huggingface/amd-ci-results",
        "VLLM_CI_DIAGNOSTICS_DIR": "artifacts/amd-gpu-diagnostics",
        "VLLM_CI_EXPECTED_GPU_COUNT": "4",
        "CONTAINER_TIMEOUT_S": "1740",
        "VLLM_CI_EXECUTION_MODE": "single-node",
        "VLLM_TEST_COMMANDS": PREFIX + "/vllm-workspace/x && pytest a",
    }


def test_the_runner_environment_of_a_multi_node_native_step():
    data = {"dind": False, "num_nodes": 2, "num_gpus": 8, "commands": [["a", "b"], None, "c"]}
    env = amd.runner_env(data, 60, "ignored", "img:tag")
    assert env == {
        "BUILDKITE_ARTIFACT_UPLOAD_SKIP_SYMLINKS": "true",
        "NUM_NODES": "2",
        "VLLM_CI_BASE_IMAGE": "rocm/vllm-dev:ci_base-build-$BUILDKITE_BUILD_ID",
        "AMD_CI_RUNTIME": "native",
        "NATIVE_CI": "true",
        "VLLM_CI_DOCKER_DISABLED": "1",
        "VLLM_CI_ARTIFACT_STEP": "image-build-amd",
        "VLLM_CI_ARTIFACT_CHECKSUM_GLOB": "artifacts/vllm-rocm-install/vllm-rocm-install.tar.gz.sha256",
        "VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE": "1",
        "VLLM_CI_WORKSPACE": "/vllm-workspace",
        "VLLM_CI_REQUIRE_WORKSPACE_MOUNT": "1",
        "HF_HOME": "/home/buildkite-agent/huggingface",
        "HF_HUB_DOWNLOAD_TIMEOUT": "300",
        "HF_HUB_ETAG_TIMEOUT": "60",
        "PYTORCH_ROCM_ARCH": "",
        "VLLM_CI_USE_ARTIFACTS": "1",
        "VLLM_CI_ARTIFACT_GLOB": "artifacts/vllm-rocm-install/vllm-rocm-install.tar.gz",
        "VLLM_CI_RESULTS_ROOT": "/home/buildkite-agent/huggingface/amd-ci-results",
        "VLLM_CI_DIAGNOSTICS_DIR": "artifacts/amd-gpu-diagnostics",
        "VLLM_CI_EXPECTED_GPU_COUNT": "8",
        "CONTAINER_TIMEOUT_S": "3540",
        "VLLM_CI_EXECUTION_MODE": "multi-node",
        "VLLM_NUM_GPUS_PER_NODE": "8",
        "VLLM_NODE_COMMAND_COUNT": "3",
        "VLLM_NODE_COMMAND_0": PREFIX + '/vllm-workspace/tests && ["a", "b"]',
        "VLLM_NODE_COMMAND_1": PREFIX + "/vllm-workspace/tests && none",
        "VLLM_NODE_COMMAND_2": PREFIX + "/vllm-workspace/tests && c",
    }


@pytest.mark.parametrize(
    ("nodes", "multi"), [(1, False), (2, True), (3, True), ("2", True), ("1", True), (None, False), (0, False)]
)
def test_multi_node_needs_two_nodes_or_text(nodes, multi):
    """minijinja: `num_nodes >= 2`, where text compares greater than every number (so "1" is multi-node)."""
    env = amd.runner_env({"num_nodes": nodes, "commands": ["a"]}, 10, "a", amd.CI_IMAGE)
    assert env["VLLM_CI_EXECUTION_MODE"] == ("multi-node" if multi else "single-node")
    if multi:
        assert (env["VLLM_NODE_COMMAND_COUNT"], env["VLLM_NUM_GPUS_PER_NODE"]) == ("1", "1")
    else:
        assert env["VLLM_TEST_COMMANDS"] == PREFIX + "/vllm-workspace/tests && a"


def test_a_number_as_multi_node_commands_makes_no_node_command():
    env = amd.runner_env({"num_nodes": 2, "commands": 5}, 10, "", amd.CI_IMAGE)
    assert env["VLLM_NODE_COMMAND_COUNT"] == "0"
    assert not [k for k in env if k.startswith("VLLM_NODE_COMMAND_") and k != "VLLM_NODE_COMMAND_COUNT"]


@pytest.mark.parametrize(
    ("data", "count"), [({}, 1), ({"num_gpus": 4}, 4), ({"no_gpu": True, "num_gpus": 4}, 0), ({"num_gpus": 0}, 1)]
)
def test_gpu_count(data, count):
    assert amd.gpu_count(data) == count


def test_retry_rules_of_test_and_build_steps():
    """amd_infra_retry(): infrastructure failures and the GPU-hang SIGABRT retry once; builds also on exit 1, 2."""
    infra = [
        {"signal_reason": "agent_stop", "limit": 1},
        {"signal_reason": "agent_refused", "limit": 1},
        {"exit_status": -1, "signal_reason": "none", "limit": 1},
        {"exit_status": 134, "limit": 1},
    ]
    assert amd.retry() == {"automatic": [{"signal_reason": "stack_error", "limit": 1}, *infra]}
    assert amd.retry(True) == {
        "automatic": [
            {"signal_reason": "stack_error", "limit": 1},
            {"exit_status": 1, "limit": 1},
            {"exit_status": 2, "limit": 1},
            *infra,
        ]
    }


# --- generate.ChangedFiles: the template's "first changed path starting with a dependency" ------------------


def test_the_first_path_in_the_listings_order_that_starts_with_a_dependency():
    from rocmci.pipeline.generate import ChangedFiles

    changed = ChangedFiles(["b/2", "", "a/1", "b/1", "bz", "c"])
    assert changed.first_with_prefix("b/") == "b/2"  # the listing's order, not the sorted order
    assert changed.first_with_prefix("b") == "b/2"
    assert changed.first_with_prefix("a") == "a/1"
    assert changed.first_with_prefix("bz") == "bz"
    assert changed.first_with_prefix("c") == "c"
    assert changed.first_with_prefix("b/1") == "b/1"
    assert changed.first_with_prefix("b/3") is None
    assert changed.first_with_prefix("d") is None
    assert changed.first_with_prefix("0") is None
    assert changed.first_with_prefix("") == "b/2"  # every non-empty path starts with ""
    assert changed.first_with_prefix("b/") == "b/2"  # asked again: the same answer
    assert "a/1" in changed and "a/" not in changed and "" in changed
    assert list(changed) == ["b/2", "", "a/1", "b/1", "bz", "c"]
    assert ChangedFiles().first_with_prefix("a") is None and "a" not in ChangedFiles()


def test_past_five_matching_files_per_kind_the_rest_are_counted():
    """The million-file promise in small: five files named per kind, then one count line each (nightly first)."""
    paths = [f"csrc/{i}.cu" for i in range(1006)] + [f"docker/Dockerfile.rocm_base.{i}" for i in range(7)]
    decision = bootstrap.decide(bootstrap.Request(changed=paths))
    assert decision.reasons == (
        *(f"run_all: csrc/{i}.cu changed (pattern csrc/)" for i in range(5)),
        *(f"nightly: docker/Dockerfile.rocm_base.{i} changed (pattern docker/Dockerfile.rocm_base)" for i in range(5)),
        "nightly: and 2 more changed files like these",
        "run_all: and 1,001 more changed files like these",
    )


# --- generate: each step-file value that breaks or changes in the template is a finding on its own key ------

BREAKING = """\
steps:
- label: Plain
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  no_plugin: true
  command: "[a, b"
  env:
    "A: B": x
    C: "0777"
    D: "[x"
    E: ok
- label: Native tags
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  dind: false
  agent_tags:
    "t: u": v
    "on": w
    queue: ignored
    empty: ""
  timeout_in_minutes: "20"
  parallelism: "010"
  commands: [pytest x]
"""


def test_values_the_template_breaks_or_changes_are_findings_on_their_key():
    """validate's template-escape and yaml-meaning findings come from these problems: step, key, message, rule
    and severity each reach the finding (a changed timeout or parallelism is only a warning)."""
    from rocmci import yamldoc
    from rocmci.pipeline import generate, source

    src = source.from_document(yamldoc.parse(BREAKING, "steps.yaml"))
    result = generate.generate(src, generate.Options(inputs=bootstrap.TemplateInputs(run_all="1")))
    octal = (
        "{what} '{text}' has a leading 0, which buildkite-agent's YAML reader (yaml.v3) reads as an octal number: "
        "the CI receives '{got}'; to send '{text}', write the YAML quotes into the value (\"'{text}'\"), since the "
        "template pastes it without quotes"
    )
    not_plain = "not a valid plain YAML value once pasted by the template: "
    assert [(p.step.label, p.key, p.message, p.rule, p.severity) for p in result.problems] == [
        ("Plain", "commands", f"the command {not_plain}did not find expected ',' or ']'", "template-escape", "error"),
        ("Plain", "env", f"env name {not_plain}mapping values are not allowed in this context", "template-escape",
         "error"),
        ("Plain", "env", octal.format(what="env C", text="0777", got="511"), "yaml-meaning", "error"),
        ("Plain", "env", f"env D {not_plain}did not find expected ',' or ']'", "template-escape", "error"),
        ("Native tags", "timeout_in_minutes", "timeout_in_minutes '20' is text to minijinja-cli (serde_yaml reads a "
         "quoted value, or digits after a leading 0, as text), and text never compares <= 180 in the template: the "
         "CI receives timeout_in_minutes 180; write a plain number", "yaml-meaning", "warning"),
        ("Native tags", "agent_tags", f"agent tag {not_plain}mapping values are not allowed in this context",
         "template-escape", "error"),
        ("Native tags", "parallelism", octal.format(what="parallelism", text="010", got="8"), "yaml-meaning",
         "warning"),
    ]  # fmt: skip
    plain, native = result.steps[3:]
    assert plain["command"] == "[a, b"  # the text as written stands in for what cannot be pasted
    assert plain["env"] == {"A: B": "x", "C": "511", "D": "[x", "E": "ok", "AMD_CI_STEP_SOURCE": "steps.yaml:2"}
    assert native["agents"] == {"queue": "amd_mi300_1", "t: u": "v", "on": "w"}
    assert (native["parallelism"], native["timeout_in_minutes"]) == (8, 180)


def test_a_range_is_not_one_commit(git_env):
    """`rev-parse --verify`: a range such as main..pr is refused as a --diff-base, never diffed."""
    repo = pr_repo(git_env)
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main..pr", repo)
    assert caught.value.message == "--diff-base 'main..pr' is not a commit this repository knows"


def test_gits_reason_is_cut_at_200_characters(git_env):
    """A `.git` file naming a missing folder: git's reason names that path, and the one line stays short."""
    work = git_env / "work"
    work.mkdir()
    missing = git_env / ("x" * 250)
    (work / ".git").write_text(f"gitdir: {missing}\n")
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", work)
    reason = f"fatal: not a git repository: {missing}"
    assert caught.value.message == f"--diff-base needs a git repository: {reason[:200]}"


def git_failing_on(bin_dir: Path, command: str, stderr: str) -> None:
    """A `git` at the front of PATH that is the real git except for one subcommand, which fails (exit 1)."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    bin_dir.mkdir()
    say = f"printf '{stderr}' >&2; " if stderr else ""  # printf reads \\n in its format as a line break
    (bin_dir / "git").write_text(f'#!/bin/sh\nif [ "$1" = {command} ]; then {say}exit 1; fi\nexec {real} "$@"\n')
    (bin_dir / "git").chmod(0o755)


@pytest.mark.parametrize(
    ("stderr", "last"),
    [
        ("warning: x\\nfatal: bad object deadbeef\\n", "fatal: bad object deadbeef"),
        ("", "no output"),
        ("fatal: " + "y" * 250, "fatal: " + "y" * 193),  # one line, cut at 200 characters
    ],
)
def test_a_failed_git_diff_is_one_usage_line_with_gits_last_line(git_env, monkeypatch, stderr, last):
    repo = pr_repo(git_env)
    git_failing_on(git_env / "stub-bin", "diff", stderr)
    monkeypatch.setenv("PATH", f"{git_env / 'stub-bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", repo)
    assert caught.value.message == f"git diff against 'main' failed: {last}"
    assert caught.value.hint == "use --changed-files"


def test_a_failed_deepen_is_not_fatal(git_env, long_origin, monkeypatch):
    """bootstrap-amd.sh: `git fetch --deepen=50 ... || true`; the diff then has no merge base: run everything."""
    clone = shallow_clone(long_origin, git_env)
    git(clone, "fetch", "-q", "--depth=1", "origin", "main:refs/remotes/origin/main")
    git_failing_on(git_env / "stub-bin", "fetch", "fatal: network down")
    monkeypatch.setenv("PATH", f"{git_env / 'stub-bin'}{os.pathsep}{os.environ['PATH']}")
    changed = bootstrap.git_changed_files("origin/main", clone)
    assert isinstance(changed, bootstrap.DiffUnavailable)
    assert changed.reason == "no merge base of origin/main and HEAD, even after deepening"


def test_gits_words_that_are_not_utf8_are_replaced_not_a_crash(git_env):
    """git prints a path's bytes as they are: a name that is not UTF-8 still makes one readable line."""
    work = git_env / "work"
    work.mkdir()
    missing = os.fsencode(git_env) + b"/bad-\xff-name"
    (work / ".git").write_bytes(b"gitdir: " + missing + b"\n")
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", work)
    assert caught.value.message == (
        f"--diff-base needs a git repository: fatal: not a git repository: {git_env}/bad-\ufffd-name"
    )


def test_block_keys_follow_amd_step_slug_with_and_without_an_agent_pool():
    """amd_step_slug(): `<pool>-<label>` lower-cased, spaces and , + made dashes, ( ) % dropped; no pool, no prefix."""
    from rocmci import yamldoc
    from rocmci.pipeline import generate, source

    text = """\
steps:
- label: No Pool (x, y+z) 5%
  mirror_hardwares: [amdproduction]
  source_file_dependencies: [tests/never/]
  commands: [pytest a]
- label: With pool
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  source_file_dependencies: [tests/never/]
  commands: [pytest a]
"""
    src = source.from_document(yamldoc.parse(text, "steps.yaml"))
    steps = generate.generate(src, generate.Options(inputs=bootstrap.TemplateInputs(list_file_diff="x"))).steps[3:]
    assert [(s.get("block"), s.get("key"), s.get("label"), s["depends_on"]) for s in steps] == [
        ("Run : No Pool (x, y+z) 5%", "block-no-pool-x--y-z-5", None, "image-build-amd"),
        (None, None, ": No Pool (x, y+z) 5%", "block-no-pool-x--y-z-5"),
        ("Run mi300_1: With pool", "block-mi300_1-with-pool", None, "image-build-amd"),
        (None, None, "mi300_1: With pool", "block-mi300_1-with-pool"),
    ]


def test_a_git_that_hangs_is_stopped_with_one_usage_line(git_env, monkeypatch):
    """Every git call has a time limit (the setting git_timeout, 120 s; made 1 s here so the test is quick)."""
    repo = pr_repo(git_env)
    slow = git_env / "slow-bin"
    slow.mkdir()
    (slow / "git").write_text("#!/bin/sh\nsleep 30\n")  # no exec: the sleeper holds git's pipes; its group goes
    (slow / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    with pytest.raises(UsageError) as caught:
        bootstrap.git_changed_files("main", repo, timeout=1)
    assert time.monotonic() - started < 15
    assert caught.value.message == "git rev-parse did not finish within 1 s"
    assert caught.value.hint == (
        "raise the setting git_timeout (ROCMCI_GIT_TIMEOUT), or give the changed files with --changed-files"
    )


def test_decide_takes_a_plain_list_of_changed_paths_too():
    """generate.decide(step, inputs, changed): a list works as the indexed ChangedFiles does (same answer)."""
    from rocmci import yamldoc
    from rocmci.pipeline import generate, source

    src = source.from_document(yamldoc.parse(DECIDE_STEPS, "steps.yaml"))
    inputs = bootstrap.TemplateInputs(list_file_diff="vllm/b/x.py")
    deps = src.steps[0]
    assert generate.decide(deps, inputs, ["docs/a.md", "vllm/b/x.py"]).reason == "vllm/b/x.py matches vllm/b/"
    listed = generate.decide(deps, inputs, ["docs/a.md"])
    assert (listed.action, listed.reason) == ("block", "no changed file matches its source_file_dependencies")


def test_a_number_as_source_file_dependencies_matches_nothing():
    """The template stops on it (validate reports that); generate still decides: nothing matches, so it waits."""
    from rocmci import yamldoc
    from rocmci.pipeline import generate, source

    text = "steps:\n- label: N\n  mirror_hardwares: [amdproduction]\n  source_file_dependencies: 7\n  commands: [a]\n"
    src = source.from_document(yamldoc.parse(text, "steps.yaml"))
    inputs = bootstrap.TemplateInputs(list_file_diff="7|vllm/x.py")
    step = source.SourceStep(0, src.raw_steps[0], src.doc.where(("steps", 0)))  # kept, as validate keeps it
    decision = generate.decide(step, inputs, ["7"])
    assert (decision.action, decision.reason) == ("block", "no changed file matches its source_file_dependencies")
