"""Shared by the workload, fault and secret tests: the stand-in image, a fake GPU host, run helpers."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import DOCKER_REQUIRED, REPO
from tests.unit.test_gpus import make_node

STANDIN = REPO / "tests" / "data" / "standin"
CANARY = "hf_canary_7f3a9c2e5d"


def _build(engine, tag: str, dockerfile: Path, *args: str) -> None:
    done = subprocess.run(
        [engine.client, "build", "--network", "none", "-q", "-f", str(dockerfile), "-t", tag, *args, str(STANDIN)],
        env=engine.build_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def standin_image(engine, python_image):
    tag = f"rocmci-test/standin:{uuid.uuid4().hex[:8]}"
    _build(engine, tag, STANDIN / "Dockerfile", "--build-arg", f"BASE_IMAGE={python_image}")
    moved = f"{tag}-moved"
    _build(engine, moved, STANDIN / "Dockerfile.moved", "--build-arg", f"STANDIN_IMAGE={tag}")
    yield tag
    engine.cli("rmi", "-f", moved, tag, check=False)


@pytest.fixture(scope="session")
def fake_host(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("host")
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    make_node(nodes, 0, 0)
    (root / "dev/dri").mkdir(parents=True)
    try:
        os.mknod(root / "dev/kfd", 0o666 | 0o020000, os.makedev(1, 3))
        for i in range(4):
            make_node(nodes, i + 1, 90402, render=128 + i)
            os.mknod(root / f"dev/dri/renderD{128 + i}", 0o666 | 0o020000, os.makedev(1, 3))
    except PermissionError:
        if DOCKER_REQUIRED:
            pytest.fail("cannot make stand-in device nodes (mknod needs root)", pytrace=False)
        pytest.skip("cannot make stand-in device nodes (mknod needs root)")
    return root


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "hf").mkdir()
    return tmp_path


def run_env(image: str, workdir: Path, mode: str = "pass", **extra: str) -> dict[str, str]:
    return {
        "ROCMCI_IMAGE": image,
        "ROCMCI_RUN_NETWORK": "none",
        "ROCMCI_RESULTS_DIR": str(workdir / "results"),
        "ROCMCI_HF_CACHE": str(workdir / "hf"),
        "ROCMCI_RUN_TIMEOUT": "300",
        "STANDIN_MODE": mode,
        **extra,
    }


def moe(fake_host: Path, *args: str, mode: str = "pass") -> tuple[str, ...]:
    return ("run.moe-tests", "--host-root", str(fake_host), "--env", f"STANDIN_MODE={mode}", "--json", *args)


def leftovers(engine) -> list[str]:
    from rocmci.runs.container import leftovers as labelled

    return labelled(engine)


def results_of(done) -> dict[str, dict]:
    return {r["workload"]: r for r in json.loads(done.stdout)["results"]}
