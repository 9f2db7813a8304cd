import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.docker)


# Session fixtures shared by every integration module, so the stand-in image is built once per run.
from tests.integration.helpers import fake_host, registry, standin_image, workdir  # noqa: E402, F401
