"""pytest plugin mounted into workload containers: `--rocmci-shard=I/N` keeps every N-th case from I.

Applied after -k and marker selection, so shards split exactly the selected cases, disjointly.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption("--rocmci-shard", default=None, help="run shard I of N of the selected cases (I/N, from 0)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    spec = config.getoption("rocmci_shard")
    if not spec:
        return
    index, count = (int(part) for part in spec.split("/"))
    keep = [item for n, item in enumerate(items) if n % count == index]
    dropped = [item for n, item in enumerate(items) if n % count != index]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
