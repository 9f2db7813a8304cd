"""Stand-in behaviours that need pytest hooks: collect nothing, or crash after passing.

At start it prints what the process sees (its environment, argv, devices), so tests can check what
reached it and that rocmci's output redacts secrets it was handed.
"""

import atexit
import json
import os
import signal
import sys

MODE = os.environ.get("STANDIN_MODE", "pass")


def pytest_configure(config):
    print("standin argv: " + json.dumps(sys.argv))
    print("standin env: " + json.dumps(dict(sorted(os.environ.items()))))
    dri = sorted(os.listdir("/dev/dri")) if os.path.isdir("/dev/dri") else []
    print(f"standin devices: kfd={os.path.exists('/dev/kfd')} dri={','.join(dri)} pid={os.getpid()}")


def pytest_collection_modifyitems(config, items):
    if MODE == "empty":
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


def pytest_unconfigure(config):
    if MODE == "teardown-crash":
        # Like the ROCm HSA runtime at interpreter exit: the report is written, then SIGSEGV.
        atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
