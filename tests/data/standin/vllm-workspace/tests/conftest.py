"""Stand-in behaviours that need pytest hooks: collect nothing, or crash after passing."""

import atexit
import os
import signal

MODE = os.environ.get("STANDIN_MODE", "pass")


def pytest_collection_modifyitems(config, items):
    if MODE == "empty":
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


def pytest_unconfigure(config):
    if MODE == "teardown-crash":
        # Like the ROCm HSA runtime at interpreter exit: the report is written, then SIGSEGV.
        atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
