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


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, hadolint on rocmci's retarget overlay (docker/Dockerfile.retarget), and the arch-flow tests."""
    if session.posargs:
        session.error("lint takes no `--` arguments; run ruff or hadolint directly for other options")
    _install(session, "lint", "test")
    session.run("ruff", "check", "src", "tests", "tasks.py", "noxfile.py", "benchmarks")
    session.run("hadolint", "--config", "docker/hadolint.yaml", "docker/Dockerfile.retarget")
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


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: speed and memory next to their references (see benchmarks/)."""
    # Installed as users get it (not editable, bytecode compiled), so start-up is measured fairly
    # even where PYTHONDONTWRITEBYTECODE is set.
    session.install(".[test]", env={"UV_COMPILE_BYTECODE": "1", "PIP_COMPILE": "1"})
    session.run("python", "benchmarks/run.py", *session.posargs)
