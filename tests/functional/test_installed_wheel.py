"""rocmci as a user installs it: the built wheel, in a fresh venv, run from a folder outside the source tree.

The wheel is built from a copy of the tree (pyproject.toml, README.md, src/) with this environment's setuptools
(`python -m build --no-isolation`: no network). The fresh venv gets the wheel alone (`pip install --no-deps
--no-index`); its dependencies are lent by this test environment through a .pth path line (a plain path entry:
that environment's own .pth files, its editable rocmci among them, are not processed), so `import rocmci`
finds only the installed wheel, which the test checks first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

STANDIN = REPO / "tests" / "data" / "vllm-standin"
SHIPPED = ("rocmci/data/docker/Dockerfile.retarget", "rocmci/data/docker/retarget/verify_deepep.py")


def _run(argv: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, check=False, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the wheel, the fresh venv's python, its site-packages)."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tree / name)
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", root / "dist", tree])
    (wheel,) = (root / "dist").glob("rocmci-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-cache-dir", wheel])
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    lent = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "_rocmci_test_dependencies.pth").write_text("".join(f"{path}\n" for path in lent))
    return wheel, python, site


def _env() -> dict[str, str]:
    drop = ("ROCMCI_", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return env | {"PYTHONDONTWRITEBYTECODE": "1"}


def test_the_wheel_carries_the_overlay_and_the_verifier(installed):
    wheel, python, site = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert set(SHIPPED) <= set(names), names
    located = _run([python, "-c", "import rocmci, rocmci.packaged as p; print(rocmci.__file__); print(p.VERIFIER)"],
                   cwd=site.parent, env=_env()).stdout.split()  # fmt: skip
    assert located == [str(site / "rocmci" / "__init__.py"), str(site / SHIPPED[1])]  # the wheel's, not src/'s
    assert (site / SHIPPED[1]).read_bytes() == (REPO / "src" / SHIPPED[1]).read_bytes()


def test_an_installed_rocmci_plans_a_retarget_with_its_packaged_overlay(installed, tmp_path):
    _, python, site = installed
    checkout = tmp_path / "vllm"
    shutil.copytree(STANDIN, checkout)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env() | {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}  # a dry run needs no engine
    done = subprocess.run(
        [str(python.parent / "rocmci"), "image.retarget", "--from", "rocm/vllm-ci:x", "--arch", "gfx942", "-n",
         "--vllm-src", str(checkout)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    docker = site / "rocmci" / "data" / "docker"
    assert f"--file {docker / 'Dockerfile.retarget'}" in done.stdout
    assert f"--progress plain \\\n    {docker}\n" in done.stdout  # the overlay's context: the package's folder
    assert f"# then, inside the result, the verifier (copied from {docker / 'retarget' / 'verify_deepep.py'}):" in (
        done.stdout
    )
    assert "/opt/rocmci/verify_deepep.py \\\n    --expect gfx942" in done.stdout
    assert f"{REPO}/" not in done.stdout + done.stderr and "Traceback" not in done.stderr  # no file of this tree
    # image.build's evidence runs the same packaged verifier (fed on stdin) after each build of a DeepEP tier.
    build = subprocess.run(
        [str(python.parent / "rocmci"), "image.build", "--vllm-src", str(checkout), "-n"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert build.stdout.count(f"# then the DeepEP check (the verifier {docker / 'retarget' / 'verify_deepep.py'} ") == 2
    assert f"{REPO}/" not in build.stdout + build.stderr and "Traceback" not in build.stderr  # no file of this tree


def test_the_installed_code_object_probe_finds_its_verifier(installed):
    _, python, site = installed
    found = _run([python, "-c", "from rocmci.runs import images; print(images.VERIFY_SCRIPT.is_file())"],
                 cwd=site.parent, env=_env())  # fmt: skip
    assert found.stdout.strip() == "True"


# Every task that has a dry run, with the arguments it needs besides -n, run from the installed wheel.
STEP = "Kernels FP8 MoE Test (2xH100-2xMI300)"  # a step of vLLM's real test-amd.yaml (fixture)
DRY_RUNS: dict[str, tuple[str, ...]] = {
    "image.build": (),
    "image.retarget": ("--from", "rocm/vllm-ci:x", "--arch", "gfx942"),
    "run.bisect": ("--step", STEP, "--good", "HEAD~1", "--bad", "HEAD"),
    "run.dp-example": (),
    "run.moe-tests": (),
    "run.step": ("--step", STEP),
}


@pytest.fixture(scope="module")
def vllm_checkout(tmp_path_factory, vllm_fixtures) -> Path:
    """A vLLM-like checkout from upstream's real files, with two commits (run.bisect needs a good and a bad)."""
    root = tmp_path_factory.mktemp("vllm-checkout")
    shutil.copytree(vllm_fixtures / "docker", root / "docker")
    (root / ".buildkite").mkdir()
    shutil.copy(vllm_fixtures / "test-amd.yaml", root / ".buildkite" / "test-amd.yaml")
    shutil.copytree(vllm_fixtures / "buildkite" / "scripts", root / ".buildkite" / "scripts")
    workspace = REPO / "tests" / "data" / "standin" / "vllm-workspace"
    shutil.copytree(workspace / "tests", root / "tests")
    shutil.copytree(workspace / "examples", root / "examples")
    (root / "setup.py").write_text("# stand-in\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", "-c", "commit.gpgsign=false"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "good"], ["commit", "-qm", "bad", "--allow-empty"]):
        _run([*git, *step])
    return root


def test_every_task_with_a_dry_run_dry_runs_from_the_installed_wheel(installed, vllm_checkout, tmp_path):
    _, python, site = installed
    rocmci = str(python.parent / "rocmci")
    env = _env() | {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}  # a dry run needs no engine
    listed = _run([rocmci, "--list"], cwd=vllm_checkout, env=env).stdout.split("\n")
    tasks = [line.split()[0] for line in listed if line.strip()]
    with_dry_run = {t for t in tasks if "--dry-run" in _run([rocmci, t, "-h"], cwd=vllm_checkout, env=env).stdout}
    assert with_dry_run == set(DRY_RUNS), "a task gained or lost --dry-run: update DRY_RUNS"
    for task, args in DRY_RUNS.items():
        done = subprocess.run([rocmci, task, *args, "-n"], cwd=vllm_checkout, env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, f"{task}: {done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr and "dry run" in done.stderr, f"{task}: {done.stderr[-2000:]}"
        assert str(REPO / "src") not in done.stdout + done.stderr, f"{task} reached the source tree"
