"""Isolated sessions: `nox -l`. CI and newcomers run `nox -s tests`; the main job is `nox -s pipeline`."""

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
    """ruff, hadolint on docker/Dockerfile.rocm, and the Dockerfile arch-flow test."""
    _install(session, "lint", "test")
    session.run("ruff", "check", "src", "tests", "tasks.py", "noxfile.py", "benchmarks")
    session.run("hadolint", "--config", "docker/hadolint.yaml", "docker/Dockerfile.rocm")
    session.run("pytest", "-q", "tests/unit/test_dockerfile.py")


@nox.session
def pipeline(session: nox.Session) -> None:
    """Generate the AMD pipeline from .buildkite/test-amd.yaml and validate it (no GPU, no Docker)."""
    _install(session)
    session.run("invoke", "pipeline.validate", *session.posargs)
    session.run("invoke", "pipeline.generate", "--out", "results/pipeline.yaml", *session.posargs)


@nox.session(default=False)
def build(session: nox.Session) -> None:
    """Build the ROCm image: `nox -s build -- --arch gfx942 --dry-run` (real build needs network and hours)."""
    _install(session)
    session.run("invoke", "image.build", *session.posargs)


@nox.session(default=False)
def dp_example(session: nox.Session) -> None:
    """Run the DeepEP data-parallel example in the image (needs an AMD GPU host; try -- --dry-run)."""
    _install(session)
    session.run("invoke", "run.dp-example", *session.posargs)


@nox.session(default=False)
def moe_tests(session: nox.Session) -> None:
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
