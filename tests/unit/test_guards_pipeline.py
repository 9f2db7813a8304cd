"""Pipeline promises that a hand-made mutation once slipped past (issue 24); README "Mutation testing" maps
each mutation to the test here that now turns red.

The bootstrap differential runs ci-infra's real bootstrap-amd.sh with its external commands (git, curl, jq,
buildkite-agent, minijinja-cli) replaced by stub executables at the front of PATH: the script's own bash
decides run_all / nightly / docs-only / list_file_diff, and the stub minijinja-cli records the -D inputs it
was given. rocmci's bootstrap.decide() must give the same inputs for the same changed files and environment.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmci import settings, yamldoc
from rocmci.findings import ERROR, WARNING, Finding
from rocmci.pipeline import bootstrap, citemplate, conformance, generate, inventory, keepgoing, rules, service, validate
from rocmci.pipeline import source as src_mod
from tests.conftest import REPO

SHARED = REPO.parent / "shared" / "fixtures"
BOOTSTRAP = SHARED / "ci-infra" / "buildkite" / "bootstrap-amd.sh"
TEMPLATE = SHARED / "ci-infra" / "buildkite" / "test-template-amd.j2"
BLANK_LINES = REPO / "tests" / "data" / "pipeline" / "conformance" / "blank-lines.yaml"
needs_ci_infra = pytest.mark.skipif(
    not BOOTSTRAP.is_file(), reason=f"{BOOTSTRAP} not found (the shared fixtures sit beside the repository)"
)

STEPS = """\
steps:
- label: Kernels
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_2
  num_gpus: 2
  commands: [pytest kernels]
- label: Only warned about
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  commands: [pytest warned]
"""


def image_steps(opts: generate.Options) -> dict[str, dict]:
    src = src_mod.from_document(yamldoc.parse(STEPS, "steps.yaml"))
    group = generate.generate(src, opts).pipeline["steps"][0]["steps"]
    return {step["key"]: step for step in group[:3]}


# --- ROCM_BASE_REFRESH_SKIP / _FORCE: each reaches its own template input ---------------------------------


@pytest.mark.parametrize(
    ("env", "skip", "force", "minutes"),
    [
        ({"ROCMCI_BASE_REFRESH_FORCE": "1"}, "0", "1", 540),
        ({"ROCMCI_BASE_REFRESH_SKIP": "1"}, "1", "0", 15),
        ({"ROCMCI_BASE_REFRESH_SKIP": "1", "ROCMCI_BASE_REFRESH_FORCE": "1"}, "1", "1", 15),
        ({}, "0", "0", 540),
    ],
)
def test_refresh_skip_and_force_settings_reach_their_own_inputs(tmp_path, env, skip, force, minutes):
    s = settings.resolve(tmp_path, env=env, pyproject={})
    opts, decision = service.options(s, (), False, False, env={})
    assert (decision.inputs.rocm_base_refresh_skip, decision.inputs.rocm_base_refresh_force) == (skip, force)
    refresh = image_steps(opts)["refresh-rocm-base-amd"]
    assert refresh["env"]["ROCM_BASE_REFRESH_SKIP"] == skip
    assert refresh["env"]["ROCM_BASE_REFRESH_FORCE"] == force
    assert refresh["timeout_in_minutes"] == minutes  # the template's 15 when skipped, else 540


# --- the arch the user set reaches both image steps ------------------------------------------------------


@pytest.mark.parametrize("how", ["env", "flag", "pyproject"])
def test_a_configured_arch_reaches_both_image_steps(tmp_path, how):
    given = "gfx942;gfx950"
    s = settings.resolve(
        tmp_path,
        env={"ROCMCI_ARCH": given} if how == "env" else {},
        flags={"arch": given} if how == "flag" else None,
        pyproject={"arch": given} if how == "pyproject" else {},
    )
    opts, _ = service.options(s, (), False, False, env={})
    steps = image_steps(opts)
    assert steps["ensure-ci-base-amd"]["env"]["DEEPEP_ROCM_ARCH"] == given
    assert steps["image-build-amd"]["env"]["DEEPEP_ROCM_ARCH"] == given
    assert "DEEPEP_ROCM_ARCH" not in steps["refresh-rocm-base-amd"]["env"]  # the base has no DeepEP


def test_the_default_arch_leaves_the_image_steps_as_the_template_writes_them(tmp_path):
    s = settings.resolve(tmp_path, env={}, pyproject={})
    opts, _ = service.options(s, (), False, False, env={})
    assert opts.deepep_arch is None
    assert not any("DEEPEP_ROCM_ARCH" in step["env"] for step in image_steps(opts).values())


# --- depends_on: every entry of a list is checked --------------------------------------------------------


def test_a_dangling_depends_on_after_the_first_entry_is_an_error():
    text = """\
steps:
- key: a
  command: "true"
- key: b
  command: "true"
  depends_on:
  - a
  - nope-not-here
- key: c
  command: "true"
  depends_on: [a, {step: b}, {step: gone}]
"""
    ctx = rules.Context(inventory.load_inventory(REPO / "tests" / "data" / "pipeline" / "agents.yaml"), ("gfx942",))
    found = validate.validate_pipeline_document(yamldoc.parse(text, "p.yaml"), ctx).findings
    dangling = sorted((f.line, f.message.split(" names")[0]) for f in found if f.rule == "depends-on")
    assert dangling == [(8, "depends_on 'nope-not-here'"), (11, "depends_on 'gone'")]


# --- --keep-going holds steps with errors, never steps with only warnings --------------------------------


def test_keep_going_holds_only_steps_with_errors():
    source = src_mod.from_document(yamldoc.parse(STEPS, "steps.yaml"))
    generated = generate.generate(source, generate.Options(inputs=bootstrap.TemplateInputs(run_all="1")))
    findings = [
        Finding("steps.yaml", 3, 3, "gpu-count", ERROR, "an error in Kernels"),
        Finding("steps.yaml", 9, 3, "timeout", WARNING, "only a warning"),
    ]
    assert keepgoing.errors_by_step(source, findings) == {0: [findings[0]]}
    pipeline, held = keepgoing.hold(source, generated, findings)
    assert [(h.step_index, h.how) for h in held] == [(0, "held")]
    members = pipeline["steps"][0]["steps"]
    blocks = [m for m in members if "block" in m]
    assert len(blocks) == 1 and "an error in Kernels" in blocks[0]["block"]
    warned = next(m for m in members if m.get("label") == "mi300_1: Only warned about")
    assert warned["depends_on"] == generate.IMAGE_STEP_KEY  # runs as the template would run it


# --- whitespace-only lines: both sides of the differential fold them as bootstrap's sed does -------------


def _sed(text: str) -> str:
    """bootstrap-amd.sh's own filter, the real sed."""
    done = subprocess.run(
        ["sed", "/^[[:space:]]*$/d"], input=text, capture_output=True, text=True, check=True,
        env={**os.environ, "LC_ALL": "C.UTF-8"},
    )  # fmt: skip
    return done.stdout


@needs_ci_infra
@pytest.mark.parametrize("mirror_hw", ["amdproduction", "amdexperimental"])
def test_whitespace_only_lines_are_folded_as_bootstraps_sed_folds_them(mirror_hw):
    inputs = bootstrap.TemplateInputs(run_all="1", mirror_hw=mirror_hw)
    context = citemplate.load_context(BLANK_LINES)
    raw = citemplate._environment("t.j2", TEMPLATE.read_text()).render_template(
        "t.j2", **{**context, **inputs.variables()}
    )
    assert re.search(r"\n[ \t]+\n", raw), "the fixture must paste whitespace-only lines into the render"
    reference = citemplate.render_text(TEMPLATE.read_text(), context, inputs, "t.j2")
    assert reference == _sed(raw)  # the reference side: exactly what sed leaves
    source = src_mod.load_source(BLANK_LINES, BLANK_LINES.name)
    generated = generate.generate(source, generate.Options(inputs=inputs, origin_env=False))
    ours = citemplate.parse_pipeline(service.render(generated.pipeline, "yaml", BLANK_LINES.name), "rocmci")
    comparison = conformance.compare(citemplate.parse_pipeline(reference, "ci-infra"), ours)
    assert not comparison.differences, comparison.summary(examples=10)
    commands = [s["env"].get("VLLM_TEST_COMMANDS", "") for _, s in conformance.flatten_steps(ours) if "env" in s]
    assert any('python3 -c "import sys print(sys.argv) "' in c for c in commands), commands


# --- bootstrap-amd.sh itself, run with its external commands stubbed ------------------------------------

_STUBS = {
    # git: the repository bootstrap-amd.sh sees. STUB_DIFF holds `git diff --name-only`'s output;
    # an empty STUB_MERGE_BASE makes `git merge-base` fail (bootstrap then runs everything).
    "git": """\
case "$1" in
  merge-base) [ -n "$STUB_MERGE_BASE" ] && echo "$STUB_MERGE_BASE" || exit 1 ;;
  diff) cat "$STUB_DIFF" ;;
  rev-parse) [ "$2" = "--is-shallow-repository" ] && echo false ; exit 0 ;;
  *) exit 0 ;;
esac
""",
    # curl: the PR's labels from the GitHub API (one a line); the template download gets an empty file.
    "curl": """\
for a in "$@"; do case "$a" in *api.github.com*) printf '%s' "$STUB_LABELS"; exit 0 ;; esac; done
prev=""; for a in "$@"; do [ "$prev" = "-o" ] && : > "$a"; prev="$a"; done
exit 0
""",
    "jq": 'cat; [ -n "$STUB_LABELS" ] && echo\n',
    "buildkite-agent": 'echo "$*" >> "$STUB_AGENT_LOG"\n',
    # minijinja-cli: the -D inputs, NUL-separated, for the test to read back.
    "minijinja-cli": """\
prev=""; for a in "$@"; do [ "$prev" = "-D" ] && printf '%s\\0' "$a" >> "$STUB_RENDER"; prev="$a"; done
echo "steps: []"
""",
}


@pytest.fixture(scope="module")
def stub_bin(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stubs")
    for name, body in _STUBS.items():
        path = folder / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(0o755)
    (folder / "cargo").mkdir()
    (folder / "cargo" / "env").write_text("")
    return folder


def run_bootstrap(stub_bin: Path, tmp: Path, changed, env: dict[str, str]) -> tuple[dict[str, str] | None, str]:
    """(the -D inputs bootstrap-amd.sh gave minijinja-cli, or None when it skipped; the agent's log)."""
    tmp.mkdir()
    (tmp / ".buildkite").mkdir()
    diff = tmp / "diff.txt"
    diff.write_text("".join(f"{p}\n" for p in changed or ()))
    run_env = {
        "PATH": f"{stub_bin}:{os.environ['PATH']}",
        "HOME": str(tmp),
        "CARGO_HOME": str(stub_bin / "cargo"),
        "STUB_DIFF": str(diff),
        "STUB_MERGE_BASE": "" if changed is None else "1234abcd",
        "STUB_RENDER": str(tmp / "render"),
        "STUB_AGENT_LOG": str(tmp / "agent.log"),
        "STUB_LABELS": "",
        "BUILDKITE_BRANCH": "feature/x",
        "BUILDKITE_PULL_REQUEST": "false",
        "BUILDKITE_PIPELINE_SLUG": "ci",
        **env,
    }
    done = subprocess.run(["bash", str(BOOTSTRAP)], cwd=tmp, env=run_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    log = (tmp / "agent.log").read_text() if (tmp / "agent.log").exists() else ""
    if not (tmp / "render").exists():
        return None, log
    pairs = (tmp / "render").read_text().split("\0")[:-1]
    return dict(p.split("=", 1) for p in pairs), log


def script_patterns(name: str) -> list[str]:
    """An array of bootstrap-amd.sh, read from the file (so a pattern upstream adds is tested at once)."""
    body = re.search(rf"^{name}=\(\n(.*?)^\)", BOOTSTRAP.read_text(), re.M | re.S)
    assert body, f"{name}=( ... ) not found in {BOOTSTRAP}"
    return re.findall(r'"([^"]+)"', body.group(1))


def _cases() -> dict[str, tuple]:
    """name -> (changed files or None, bootstrap-amd.sh's environment, rocmci's Request fields)."""
    cases: dict[str, tuple] = {
        "docs only": (["docs/a.md", "README.md", "mkdocs.yaml", "vllm/x/notes.md"], {}, {}),
        "docs only, disabled": (["docs/a.md"], {"DOCS_ONLY_DISABLE": "1"}, {"docs_only_disable": True}),
        "docs and code": (["docs/a.md", "vllm/config.py"], {}, {}),
        "docs folder, not markdown": (["docs/conf.py", "docs/api/index.rst"], {}, {}),
        "markdown, not docs": (["vllm/README.md", "CHANGELOG.md"], {}, {}),
        "nothing changed": ([], {}, {}),
        "ordinary": (["vllm/distributed/utils.py", "tests/kernels/moe/test_x.py"], {}, {}),
        "carriage returns": (["vllm/a.py\r", "tests/b.py\r"], {}, {}),
        "cpu kernels only": (["csrc/cpu/attention.cpp", "cmake/cpu_extension.cmake"], {}, {}),
        "cpu and gpu kernels": (["csrc/cpu/attention.cpp", "csrc/attention/x.cu"], {}, {}),
        "near misses": (["setup.cfg", "csrc", "cmakefile", "requirements/cuda.txt", "docker/Dockerfile"], {}, {}),
        "base dockerfile": (["docker/Dockerfile.rocm_base"], {}, {}),
        "base and rocm dockerfiles": (["docker/Dockerfile.rocm_base", "docker/Dockerfile.rocm"], {}, {}),
        "no merge base": (None, {}, {}),
        "RUN_ALL=1": (["vllm/a.py"], {"RUN_ALL": "1"}, {"run_all": True}),
        "NIGHTLY=1": (["vllm/a.py"], {"NIGHTLY": "1"}, {"nightly": True}),
        "fastcheck": (["vllm/a.py"], {"BUILDKITE_PIPELINE_SLUG": "fastcheck"}, {"pipeline_slug": "fastcheck"}),
        "mirror hw": (["vllm/a.py"], {"AMD_MIRROR_HW": "amdexperimental"}, {"mirror_hw": "amdexperimental"}),
        "refresh skip": (["vllm/a.py"], {"ROCM_BASE_REFRESH_SKIP": "1"}, {"base_refresh_skip": True}),
        "refresh force": (["vllm/a.py"], {"ROCM_BASE_REFRESH_FORCE": "1"}, {"base_refresh_force": True}),
        "main branch": (["vllm/a.py"], {"BUILDKITE_BRANCH": "main"}, {"branch": "main"}),
        "run-all label": (
            ["vllm/a.py"],
            {"BUILDKITE_PULL_REQUEST": "42", "STUB_LABELS": "ready-run-all-tests"},
            {"labels": ("ready-run-all-tests",), "pull_request": True},
        ),
        "run-all label outside a PR": (["vllm/a.py"], {"STUB_LABELS": "ready-run-all-tests"}, {}),
        "PR without labels": (["vllm/a.py"], {"BUILDKITE_PULL_REQUEST": "42"}, {"pull_request": True}),
        "no-fail-fast label": (
            ["vllm/a.py"],
            {"BUILDKITE_PULL_REQUEST": "42", "STUB_LABELS": "bug\nci-no-fail-fast"},
            {"labels": ("bug", "ci-no-fail-fast"), "pull_request": True},
        ),
    }
    for pattern in script_patterns("patterns") + script_patterns("nightly_patterns"):
        cases[f"pattern {pattern}"] = ([pattern], {}, {})
        cases[f"under pattern {pattern}"] = ([f"{pattern}x/y"], {}, {})
    for pattern in script_patterns("ignore_patterns"):
        cases[f"ignored {pattern}"] = ([f"{pattern}/z.cpp"], {}, {})
    return cases


CASES = _cases() if BOOTSTRAP.is_file() else {}


@needs_ci_infra
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is needed to run bootstrap-amd.sh")
@pytest.mark.parametrize("case", sorted(CASES))
def test_bootstrap_decisions_equal_bootstrap_amd_sh(stub_bin, tmp_path, case):
    changed, env, fields = CASES[case]
    theirs, log = run_bootstrap(stub_bin, tmp_path / "run", changed, env)
    request = bootstrap.Request(
        **{
            "changed": None if changed is None else tuple(changed),
            "branch": "feature/x",
            "merge_base": "HEAD" if changed is None else "1234abcd",
            **fields,
        }
    )
    ours = bootstrap.decide(request)
    if theirs is None:
        assert ours.skip is not None, f"bootstrap-amd.sh skipped the pipeline, rocmci did not: {log}"
        assert "CI skipped" in log  # its docs-only annotation
        return
    assert ours.skip is None, f"rocmci skipped ({ours.skip}), bootstrap-amd.sh rendered {theirs}"
    assert ours.inputs.variables() == theirs


@needs_ci_infra
def test_rocmci_patterns_are_the_scripts_patterns():
    """The tables themselves, next to the behaviour above: the same patterns in the same order."""
    assert list(bootstrap.RUN_ALL_PATTERNS) == script_patterns("patterns")
    assert list(bootstrap.RUN_ALL_IGNORED) == script_patterns("ignore_patterns")
    assert script_patterns("nightly_patterns") == ["$ROCM_BASE_DOCKERFILE"]
    assert bootstrap.NIGHTLY_PATTERNS == (bootstrap.ROCM_BASE_DOCKERFILE,)
    assert f'ROCM_BASE_DOCKERFILE="{bootstrap.ROCM_BASE_DOCKERFILE}"' in BOOTSTRAP.read_text()
