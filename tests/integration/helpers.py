"""Shared by the workload, fault and secret tests: the stand-in image, a fake GPU host, run helpers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import DOCKER_REQUIRED, REPO, RUN_LABEL, RUN_SELECTOR
from tests.unit.test_gpus import make_node

STANDIN = REPO / "tests" / "data" / "standin"
CANARY = "hf_canary_7f3a9c2e5d"


STANDIN_WORKSPACE = STANDIN / "vllm-workspace"
# What the runner's preflight imports, as empty packages with metadata (im.version needs a dist-info).
PACKAGES = {
    "torch": ("utils/model_zoo",),
    "transformers": ("models/nomic_bert/__init__",),
    "ray": ("dag/__init__",),
    "sympy": ("physics/__init__",),
    "markupsafe": ("_speedups",),
    "vllm": (),
}


def build_runner_ci_image(engine, python_image: str, context: Path, label: str, extra: str = "") -> str:
    """A stand-in for vLLM's CI image as the runner uses it: vLLM's staged workspace, /opt/vllm-ci/commit.txt,
    importable stand-ins for the packages the runner's preflight checks, a stand-in pytest-timeout plugin
    (the runner's PYTEST_ADDOPTS name its --timeout-method), and `label` (KEY=VALUE) for cleanup."""
    site = context / "site"
    for name, modules in PACKAGES.items():
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
        for module in modules:
            path = site / name / f"{module}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
            (path.parent / "__init__.py").touch()
        meta = site / f"{name}-0.0.0.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
    (site / "pytest_timeout.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--timeout-method')\n    parser.addoption('--timeout')\n"
    )
    plugin = site / "pytest_timeout-0.0.0.dist-info"
    plugin.mkdir()
    (plugin / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest-timeout\nVersion: 0.0.0\n")
    (plugin / "entry_points.txt").write_text("[pytest11]\ntimeout = pytest_timeout\n")
    shutil.copytree(STANDIN_WORKSPACE, context / "workspace")  # the stand-in DeepEP test module, as CI stages it
    key, value = label.split("=", 1)
    (context / "Dockerfile").write_text(
        f"FROM {python_image}\n"
        "COPY site/ /usr/local/lib/python3.11/dist-packages/\n"
        "COPY workspace/ /opt/vllm-ci/workspace/\n"
        "RUN ln -s /usr/bin/python3 /usr/local/bin/python && echo 1234567890abcdef > /opt/vllm-ci/commit.txt\n"
        f'LABEL {key}={value} {RUN_SELECTOR} rocmci.arch="gfx942;gfx950"\n' + extra
    )
    tag = f"rocmci-test/runner-ci:{uuid.uuid4().hex[:8]}"
    done = subprocess.run([engine.client, "build", "--network", "none", "-q", "-t", tag, str(context)],
                          env=engine.build_env, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tag


def _build(engine, tag: str, dockerfile: Path, *args: str) -> None:
    done = subprocess.run(
        [engine.client, "build", "--network", "none", "-q", "-f", str(dockerfile), "-t", tag, "--label", RUN_SELECTOR,
         *args, str(STANDIN)],
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
    """This run's containers still there: rocmci's label and this run's (inherited from the run's images).

    Never rocmci's label alone: other runs and engineers share the engine, and their containers are theirs."""
    from rocmci.labels import MANAGED

    mine = set(engine.containers(RUN_SELECTOR))
    return [name for name in engine.containers(f"{MANAGED}=1") if name in mine]


def case_labels() -> tuple[str, str]:
    """(KEY=VALUE of a label unique to one test, ROCMCI_EXTRA_LABELS giving it and the run's label)."""
    case = f"{RUN_LABEL}.case={uuid.uuid4().hex}"
    return case, f"{RUN_SELECTOR},{case}"


def remove_images(engine, selector: str, rounds: int = 5) -> list[str]:
    """Remove every image carrying label `selector` (KEY=VALUE), tagged or not; return those still there.

    Children before parents: a parent with a child left is refused by the engine, so up to `rounds` passes."""
    left: list[str] = []
    for _ in range(rounds):
        found = engine.cli("images", "-a", "-q", "--no-trunc", "--filter", f"label={selector}", check=False)
        left = found.stdout.split()
        if not left:
            return []
        engine.cli("rmi", "-f", *dict.fromkeys(left), check=False, timeout=120)
    return engine.cli("images", "-a", "-q", "--filter", f"label={selector}", check=False).stdout.split()


def results_of(done) -> dict[str, dict]:
    return {r["workload"]: r for r in json.loads(done.stdout)["results"]}


@contextlib.contextmanager
def serve_registry(folder: Path):
    """Debian's docker-registry on a free 127.0.0.1 port, storing below `folder`; stopped afterwards."""
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    if not os.path.exists(binary):
        pytest.skip("docker-registry is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = folder / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"localhost:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def registry(tmp_path):
    with serve_registry(tmp_path) as address:
        yield address
