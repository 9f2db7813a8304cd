"""`image.build --build-arg`: the arch check follows the build with the values the build gets (service.build hands
extra_build_args to the check). Real parts: `rocmci image.build --dry-run` in process on the stand-in checkout,
with a Dockerfile whose DeepEP line reads its list from an ARG of its own; no engine is reached (DOCKER_HOST names
no socket), so a dry run that passes the check says so in a note and exits 0."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import REPO
from tests.unit import test_mutants_cli as _cli

_outside_any_workspace, rocmci = _cli._outside_any_workspace, _cli.rocmci  # fixtures
pytestmark = pytest.mark.usefixtures("_outside_any_workspace")
EXPORT = 'export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}"'


@pytest.fixture
def tree(tmp_path, monkeypatch):
    root = tmp_path / "vllm"
    shutil.copytree(REPO / "tests" / "data" / "vllm-standin", root)
    dockerfile = root / "docker" / "Dockerfile.rocm"
    text = dockerfile.read_text()
    assert EXPORT in text
    text = text.replace(EXPORT, 'export PYTORCH_ROCM_ARCH="${DEEPEP_TARGETS}"')
    text = text.replace('ARG DEEPEP_NIC="cx7"\n', 'ARG DEEPEP_NIC="cx7"\nARG DEEPEP_TARGETS="gfx942;gfx950"\n')
    dockerfile.write_text(text)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    return root


def test_a_build_arg_the_deepep_line_reads_is_seen_by_the_arch_check(tree, rocmci):
    argv = ("image.build", "--vllm-src", str(tree), "--arch", "gfx950", "--dry-run")
    code, _, err = rocmci(*argv)
    assert code == 1 and "refusing to build for gfx950" in err and "deepep-arch-source" in err, err
    code, out, err = rocmci(*argv, "--build-arg", "DEEPEP_TARGETS=gfx950")
    assert code == 0, err
    assert "DEEPEP_TARGETS=gfx950" in out and "refusing" not in err
    code, _, err = rocmci(*argv, "--build-arg", "DEEPEP_TARGETS=gfx942")  # the value given, not its name, decides
    assert code == 1 and "refusing to build for gfx950" in err, err
