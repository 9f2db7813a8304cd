"""Isolated sessions: `nox -l`. CI and newcomers run `nox -s tests`; the main job is `nox -s pipeline`.

Sessions that wrap one invoke task carry its name (`nox -s run.dp-example -- --dry-run` is
`invoke run.dp-example --dry-run` in a fresh environment); `--` arguments go only to the task they belong to.
"""

from __future__ import annotations

import shutil

import nox

nox.options.default_venv_backend = "uv" if shutil.which("uv") else "virtualenv"
nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True


def _install(session: nox.Session, *extras: str) -> None:
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests (integration needs a running Docker engine)."""
    _install(session, "test")
    session.run("pytest", *session.posargs)


# What `nox -s installed` runs against the installed wheel (`--` arguments replace it).
_INSTALLED_TESTS = ("tests/functional",)


@nox.session(venv_backend="none")
def installed(session: nox.Session) -> None:
    """The functional tests and every task's dry run against rocmci's wheel, installed in a venv outside the tree."""
    import os
    import sys
    import tempfile
    from pathlib import Path

    repo = Path(__file__).resolve().parent
    # Outside the tree (nox's own venvs live in .nox/ inside it): nothing below the checkout is importable.
    outside = Path(tempfile.mkdtemp(prefix="rocmci-installed-"))
    tree = outside / "tree"  # what an sdist holds: building in a copy writes no build/ or egg-info into the checkout
    shutil.copytree(repo / "src", tree / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, tree / name)
    venv = outside / "venv"
    session.run(sys.executable, "-m", "venv", str(venv), external=True)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # Offline: the build backend comes from the machine's package index into this venv, and the wheel is built
    # with it (--no-isolation), so no isolated build environment reaches for the network.
    session.run(*pip, "build", "setuptools>=68", "wheel", external=True)
    session.run(python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outside / "dist"), str(tree),
                external=True)  # fmt: skip
    (wheel,) = (outside / "dist").glob("rocmci-*.whl")
    session.run(*pip, f"{wheel}[test]", external=True)
    run_in = outside / "run"
    run_in.mkdir()
    session.chdir(run_in)
    tests = [str(repo / t) for t in (session.posargs or _INSTALLED_TESTS)]
    # The tests' own package (tests.*) from the checkout; rocmci only from the venv (conftest checks it).
    # Not a ROCMCI_* name: rocmci refuses environment variables of its prefix that name no setting.
    env = {"TEST_INSTALLED_ROCMCI": "1", "PYTHONPATH": str(repo), "VIRTUAL_ENV": str(venv),
           "PATH": os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])}  # fmt: skip
    try:
        session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(repo), "-c",
                    str(repo / "pyproject.toml"), *tests, env=env, external=True)  # fmt: skip
    finally:
        session.chdir(repo)
        shutil.rmtree(outside, ignore_errors=True)  # the venv and wheel are this session's alone


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, hadolint on rocmci's retarget overlay (src/rocmci/data/docker/Dockerfile.retarget), arch-flow tests."""
    if session.posargs:
        session.error("lint takes no `--` arguments; run ruff or hadolint directly for other options")
    _install(session, "lint", "test")
    session.run("ruff", "check", "src", "tests", "tasks.py", "noxfile.py", "benchmarks")
    session.run("hadolint", "--config", ".hadolint.yaml", "src/rocmci/data/docker/Dockerfile.retarget")
    session.run("pytest", "-q", "tests/unit/test_dockerfile.py")


# Flags `nox -s pipeline -- ...` accepts, and which of its two tasks each one belongs to.
_PIPELINE_SHARED = ("--source", "--mirror-hw", "--arch")  # both tasks, with a value
_PIPELINE_VALIDATE_ONLY = ("--json",)  # findings as JSON on stdout; the generated file stays YAML


def _pipeline_args(posargs: list[str]) -> tuple[list[str], list[str]]:
    """Split `--` arguments into (validate's, generate's); raise ValueError naming one that fits neither."""
    validate: list[str] = []
    generate: list[str] = []
    args = iter(posargs)
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _PIPELINE_SHARED:
            pair = [arg] if "=" in arg else [arg, next(args, "")]
            if not pair[-1]:
                raise ValueError(f"{flag} needs a value")
            validate += pair
            generate += pair
        elif arg in _PIPELINE_VALIDATE_ONLY:
            validate.append(arg)
        else:
            known = ", ".join(_PIPELINE_SHARED + _PIPELINE_VALIDATE_ONLY)
            raise ValueError(
                f"{arg!r} is not a flag of this session (it takes {known}); "
                "run `invoke pipeline.validate` or `invoke pipeline.generate` for the others"
            )
    return validate, generate


@nox.session
def pipeline(session: nox.Session) -> None:
    """Generate the AMD pipeline from .buildkite/test-amd.yaml and validate it (no GPU, no Docker)."""
    try:
        validate, generate = _pipeline_args(session.posargs)
    except ValueError as exc:
        session.error(str(exc))
    _install(session)
    session.run("invoke", "pipeline.validate", *validate)
    session.run("invoke", "pipeline.generate", "--out", "results/pipeline.yaml", *generate)


@nox.session(name="image.build", default=False)
def image_build(session: nox.Session) -> None:
    """Build the ROCm image: `nox -s image.build -- --arch gfx942 --dry-run` (a real build needs network, hours)."""
    _install(session)
    session.run("invoke", "image.build", *session.posargs)


@nox.session(name="run.dp-example", default=False)
def run_dp_example(session: nox.Session) -> None:
    """Run the DeepEP data-parallel example in the image (needs an AMD GPU host; try -- --dry-run)."""
    _install(session)
    session.run("invoke", "run.dp-example", *session.posargs)


@nox.session(name="run.moe-tests", default=False)
def run_moe_tests(session: nox.Session) -> None:
    """Run vLLM's DeepEP MoE kernel tests in the image (needs an AMD GPU host; try -- --dry-run)."""
    _install(session)
    session.run("invoke", "run.moe-tests", *session.posargs)


@nox.session(name="run.step", default=False)
def run_step(session: nox.Session) -> None:
    """Run one step of the step file as vLLM's AMD CI does (e.g. -- --step 'DeepEP MoE' --dry-run)."""
    _install(session)
    session.run("invoke", "run.step", *session.posargs)


@nox.session(name="runner-parity", default=False)
def runner_parity(session: nox.Session) -> None:
    """run.step against vLLM's runner, executed, for every step of every fixture step file (about 3 minutes)."""
    _install(session, "test")
    session.run("pytest", "-q", "tests/functional/test_runner_jobs.py", *session.posargs, env={"ROCMCI_ALL_STEPS": "1"})


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: speed and memory next to their references (see benchmarks/)."""
    # Installed as users get it (not editable, bytecode compiled), so start-up is measured fairly
    # even where PYTHONDONTWRITEBYTECODE is set.
    session.install(".[test]", env={"UV_COMPILE_BYTECODE": "1", "PIP_COMPILE": "1"})
    session.run("python", "benchmarks/run.py", *session.posargs)


# `nox -s mutants -- [AREA/MODULE ...] [tests/PATH ...]`: the modules under src/rocmci it mutates (default: all
# of [tool.mutmut] only_mutate) and the tests it runs against each mutant (default: tests/unit, tests/functional).
_MUTANTS_CHILDREN = "2"  # sized for a 2-core machine; one module takes minutes, the whole list hours
# Two runs at once (one module each) need their own scratch copies and share the cores:
# MUTANTS_SCRATCH=/tmp/mut-a MUTANTS_CHILDREN=1 nox -R -s mutants -- image/retarget
# Issue 35's modules besides pyproject's only_mutate (the dry run, vLLM's images, image features, base, requests):
# part of the default list too, so `nox -s mutants` with no arguments covers every module docs/guards.md scores.
_MUTANTS_ALSO = (
    "src/rocmci/runs/dryrun.py", "src/rocmci/runs/images.py",
    "src/rocmci/image/features.py", "src/rocmci/image/base.py", "src/rocmci/image/requests.py",
)


def _mutmut_table(text: str, modules: list[str], tests: list[str]) -> str:
    """pyproject.toml's text with [tool.mutmut] only_mutate and the test selection narrowed to what was asked."""
    import re

    def listing(items: list[str]) -> str:
        return "[" + ", ".join(f'"{item}"' for item in items) + "]"

    text = re.sub(r"^only_mutate = \[.*?\]$", f"only_mutate = {listing(modules)}", text, count=1, flags=re.M | re.S)
    return re.sub(
        r"^pytest_add_cli_args_test_selection = \[.*?\]$",
        f"pytest_add_cli_args_test_selection = {listing(tests)}", text, count=1, flags=re.M | re.S,
    )  # fmt: skip


def _module_scores(mutants_dir) -> list[str]:
    """One line per mutated module from mutmut's .meta files: its score and the names of its survivors."""
    import json

    killed_codes = {1, 3, 36, 24, -24, 152, 255, -11, -9}  # mutmut's killed, timeout and segfault exit codes
    lines = []
    for meta in sorted(mutants_dir.glob("src/**/*.py.meta")):
        codes = json.loads(meta.read_text()).get("exit_code_by_key") or {}
        tested = {name: code for name, code in codes.items() if code is not None and code not in (2, 34)}
        killed = sum(code in killed_codes for code in tested.values())
        survivors = sorted(name.rsplit(".", 1)[-1] for name, code in tested.items() if code not in killed_codes)
        module = meta.relative_to(mutants_dir / "src").as_posix().removesuffix(".py.meta")
        score = f"{100 * killed / len(tested):.1f}%" if tested else "nothing tested"
        unchecked = f" ({len(codes) - len(tested)} not checked)" if len(codes) > len(tested) else ""
        named = f"{len(survivors)} not killed: {', '.join(survivors)}"
        lines.append(f"{module}: {killed}/{len(tested)} = {score}{unchecked}; {named}")
    return lines


@nox.session(default=False)
def mutants(session: nox.Session) -> None:
    """Mutation testing (mutmut) of the modules that keep README's promises; `-- pipeline/bootstrap` for one."""
    import json
    import os
    import subprocess
    import tempfile
    import tomllib
    from pathlib import Path

    repo = Path(__file__).resolve().parent
    known = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    known = [*known, *(m for m in _MUTANTS_ALSO if m not in known)]
    tests = [a for a in session.posargs if a.startswith("tests/")] or ["tests/unit", "tests/functional"]
    modules = []
    for arg in (a for a in session.posargs if not a.startswith("tests/")):
        path = f"src/rocmci/{arg.removesuffix('.py')}.py"
        if path not in known and not any(k.endswith("/*") and path.startswith(k[:-1]) for k in known):
            session.error(f"{arg!r} is not one of the mutated modules ({', '.join(known)})")
        modules.append(path)
    _install(session, "test", "mutation")
    # A scratch copy: mutmut writes mutants/ beside the sources, and the tests find upstream's files at
    # ../shared relative to the tests' repository root, which is mutants/ there. At a short path, as a
    # checkout usually is: test_terminal's doctor table shows paths below the checkout and must fit 80 columns.
    scratch = Path(os.environ.get("MUTANTS_SCRATCH") or Path(tempfile.gettempdir()) / "rocmci-mut").resolve()
    marker = scratch / ".rocmci-mutants"  # only a folder this session made is ever removed
    if scratch.exists() and not marker.exists() and any(scratch.iterdir()):
        session.error(f"{scratch} holds files of its own (not an earlier scratch copy): choose another MUTANTS_SCRATCH")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    marker.touch()
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (repo / rel).is_file():
            (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, scratch / rel)
    (scratch / "shared").symlink_to((repo.parent / "shared").resolve())
    # A git repository, as a checkout is (`--diff-base` and the plan tests ask git about it).
    git = ["git", "-c", "user.name=mutants", "-c", "user.email=mutants@localhost", "-c", "commit.gpgsign=false"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "scratch copy for mutation testing"]):
        subprocess.run([*git, *step], cwd=scratch, check=True)
    pyproject = scratch / "pyproject.toml"
    pyproject.write_text(_mutmut_table(pyproject.read_text(), modules or known, tests))
    session.chdir(scratch)
    # The tests' child processes (`rocmci`, `invoke`, `rocmci-validate`) would import the editable install,
    # the unmutated src/: the mutated copy first on PYTHONPATH makes them run the mutant the test runs
    # (they inherit MUTANT_UNDER_TEST), and tests/mutation (sitecustomize.py, and the pytest plugin
    # mutation_relay that [tool.mutmut] loads) relays the functions they reach in the stats phase to the
    # test that started them, so such tests are run against those functions' mutants.
    pythonpath = [str(scratch / "mutants" / "src"), str(scratch / "tests" / "mutation")]
    # Made before mutmut starts: Python caches a path entry that does not exist yet as "nothing here" for
    # the life of the process, and mutmut's own process (whose forks run the in-process tests) would then
    # import the installed, unmutated rocmci although mutmut fills that folder a moment later.
    (scratch / "mutants" / "src").mkdir(parents=True)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [*pythonpath, os.environ.get("PYTHONPATH")]))}
    # The tests' temporary files where a plain `pytest` puts them: nox's TMPDIR (.nox/mutants/tmp) lies
    # inside the checkout, so a test's tmp_path would find this repository's pyproject.toml as its workspace.
    env["TMPDIR"] = tempfile.gettempdir()
    children = os.environ.get("MUTANTS_CHILDREN", _MUTANTS_CHILDREN)
    if not children.isdigit() or not 1 <= int(children) <= 16:
        session.error(f"MUTANTS_CHILDREN={children!r}: give a number of worker processes from 1 to 16")
    session.run("mutmut", "run", "--max-children", children, success_codes=[0, 1], env=env)
    session.run("mutmut", "export-cicd-stats")
    stats = json.loads((scratch / "mutants" / "mutmut-cicd-stats.json").read_text())
    # A mutant no test reaches, in-process or in a child ("no_tests"), counts as not killed: nothing guards it.
    killed = stats["killed"] + stats["timeout"] + stats["segfault"]
    judged = killed + stats["survived"] + stats["no_tests"] + stats["suspicious"]
    if not judged:
        session.error("no mutant was tested: the selected tests fail on the unmutated code (see above)")
    session.log(f"score: {killed}/{judged} = {100 * killed / max(judged, 1):.1f}% killed ({stats})")
    for line in _module_scores(scratch / "mutants"):
        session.log(line)
    session.run("mutmut", "results", success_codes=[0, 1])
