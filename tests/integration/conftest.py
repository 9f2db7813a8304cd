import pytest

from tests.conftest import RUN_SELECTOR


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.docker)


# Session fixtures shared by every integration module, so the stand-in image is built once per run.
from tests.integration.helpers import fake_host, registry, standin_image, workdir  # noqa: E402, F401

_left: list[str] = []  # what this run left on the engine, found by its own label after every test ended


def pytest_sessionfinish(session, exitstatus):
    """Every container and image carrying this run's label is gone once the run ends: a test that leaves one
    fails the run (it is named here and removed, so it cannot pile up on the shared engine)."""
    from rocmci.engine import Engine
    from rocmci.errors import EngineError
    from tests.integration.helpers import remove_images

    engine = Engine("auto")
    try:
        containers = engine.containers(RUN_SELECTOR)
        images = engine.cli("images", "-a", "-q", "--filter", f"label={RUN_SELECTOR}", check=False).stdout.split()
    except EngineError:
        return  # no engine: the integration tests skipped or failed on their own
    _left.extend([f"container {c}" for c in containers] + [f"image {i}" for i in images])
    for name in containers:
        engine.remove_container(name)
    remove_images(engine, RUN_SELECTOR)
    if _left and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _left:
        terminalreporter.section(f"left on the engine with label {RUN_SELECTOR}", red=True)
        terminalreporter.line(", ".join(_left) + ": removed now; the test that made them must remove them", red=True)
