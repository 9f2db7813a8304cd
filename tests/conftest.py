from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_VLLM = REPO.parent / "shared" / "fixtures" / "vllm"
PYTHON_IMAGE = "rocmci-test/debian-python:bookworm"
BUSYBOX_IMAGE = "rocmci-test/busybox:latest"
IN_CI = os.environ.get("CI") == "true"
# In CI a missing engine or base image is a failure, never a skip.
DOCKER_REQUIRED = IN_CI or os.environ.get("REQUIRE_DOCKER_TESTS") == "1"
# Tests (node ids) allowed to skip under CI=true. It must stay empty: everything README claims runs in CI.
ALLOWED_SKIPS_IN_CI: frozenset[str] = frozenset()

# This test run's own label: every image and container the integration tests make carries it (their images
# directly, containers through their image, images rocmci builds through setting extra_labels), so a test
# finds and removes what it made, and only that, on an engine other runs share.
RUN_LABEL = "rocmci.test.run"
RUN_ID = uuid.uuid4().hex
RUN_SELECTOR = f"{RUN_LABEL}={RUN_ID}"
# `nox -s installed`: the tests run against the wheel installed in a venv outside the tree, never src/.
TEST_INSTALLED = os.environ.get("TEST_INSTALLED_ROCMCI") == "1"


def installed_rocmci_problem() -> str | None:
    """Why this process's rocmci is not the installed package (None when it is), for TEST_INSTALLED_ROCMCI=1."""
    import rocmci

    where = Path(rocmci.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    if REPO in where.parents:
        return f"rocmci is imported from the source tree ({where}), not from the installed wheel"
    if site not in where.parents:
        return f"rocmci is imported from {where}, not from this venv's site-packages {site}"
    return None


def pytest_configure(config):
    if TEST_INSTALLED and (problem := installed_rocmci_problem()):
        raise pytest.UsageError(f"TEST_INSTALLED_ROCMCI=1: {problem}; run `nox -s installed`")


def interruptible() -> None:
    """preexec_fn of a child a test interrupts: SIGINT back to its default, whatever this run inherited.

    A suite started with SIGINT ignored (a background job of a script, nohup under some shells) passes the
    ignored disposition on through exec, and Python then installs no KeyboardInterrupt handler in the child:
    the test's SIGINT would do nothing and the test would wait for its bound."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_skipped: list[tuple[str, str]] = []  # (node id, reason) of every test or module that skipped


def _note_skip(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and report.nodeid not in ALLOWED_SKIPS_IN_CI:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _skipped.append((report.nodeid, reason))


def pytest_runtest_logreport(report):
    _note_skip(report)


def pytest_collectreport(report):
    _note_skip(report)  # module-level pytest.skip(allow_module_level=True)


def pytest_sessionfinish(session, exitstatus):
    if IN_CI and _skipped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if IN_CI and _skipped:
        terminalreporter.section("skipped under CI=true", red=True)
        for nodeid, reason in _skipped:
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(
            f"{len(_skipped)} skipped: nothing may skip in CI (allow-list ALLOWED_SKIPS_IN_CI in tests/conftest.py)",
            red=True,
        )
    elif _skipped:
        # Outside CI a skip is allowed, but a green run with 50 skips must not read as "everything passed".
        terminalreporter.section(f"{len(_skipped)} TESTS SKIPPED: this run did not test everything", red=True)
        for reason, count in skip_reasons(_skipped):
            terminalreporter.line(f"{count:4d} x {reason}", yellow=True)
        terminalreporter.line(
            f"{len(_skipped)} tests skipped (CI=true fails on any skip). To run them: a running Docker engine and "
            "`bash .ci/base-images`, tmux, and ../shared/fixtures beside this checkout (docs/development.md).",
            red=True,
            bold=True,
        )


def skip_reasons(skipped: list[tuple[str, str]]) -> list[tuple[str, int]]:
    """(reason, how many tests it skipped), the most frequent first; pytest's "Skipped: " prefix dropped."""
    counts: dict[str, int] = {}
    for _, reason in skipped:
        text = reason.removeprefix("Skipped: ")
        counts[text] = counts.get(text, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _unavailable(reason: str):
    if DOCKER_REQUIRED:
        pytest.fail(f"Docker tests are required here but cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine():
    from rocmci.engine import Engine
    from rocmci.errors import EngineError

    eng = Engine("auto")
    try:
        eng.server_version()
    except EngineError as exc:
        _unavailable(f"no Docker engine: {exc.one_line()}")
    return eng


def _image(engine, ref: str) -> str:
    if engine.image_labels(ref) is None:
        _unavailable(f"base image {ref} is missing: run `bash .ci/base-images`")
    return ref


@pytest.fixture(scope="session")
def busybox_image(engine) -> str:
    return _image(engine, BUSYBOX_IMAGE)


@pytest.fixture(scope="session")
def python_image(engine) -> str:
    return _image(engine, PYTHON_IMAGE)


@pytest.fixture(scope="session")
def vllm_fixtures() -> Path:
    if not SHARED_VLLM.is_dir():
        pytest.skip(f"real vLLM step files not found at {SHARED_VLLM} (../shared is laid beside the checkout in CI)")
    return SHARED_VLLM


@pytest.fixture
def vllm_docker_tree(vllm_fixtures, tmp_path) -> Path:
    """A checkout holding vLLM's real docker/ folder and the few files its stages COPY (stand-in content)."""
    shutil.copytree(vllm_fixtures / "docker", tmp_path / "docker")
    (tmp_path / "setup.py").write_text("# stand-in\n")
    for rel in ("requirements/rocm.txt", "requirements/common.txt", "csrc/a.cu"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    return tmp_path


def _address_space(limit: int):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def run_invoke(
    *args: str,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    address_space: int | None = None,
):
    """Run a task exactly as a user would, in a separate process; `address_space` bounds its memory (bytes)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=_address_space(address_space) if address_space else None,
    )
