from __future__ import annotations

from pathlib import Path

import pytest

from rocmci import settings
from rocmci.errors import InputError, UsageError

DOCKERFILE = """\
ARG BASE_IMAGE=rocm/vllm-dev:base
ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"
ARG ROCSHMEM_REPO=https://example.invalid/rocm-systems.git
ARG ROCSHMEM_BRANCH=f0acb0c6
ARG DEEPEP_REPO=https://example.invalid/DeepEP.git
ARG DEEPEP_BRANCH=5d90af8b
ARG DEEPEP_NIC=cx7
ARG VLLM_REPO=https://example.invalid/vllm.git
ARG VLLM_BRANCH=abc123
FROM ${BASE_IMAGE} AS base
ARG DEEPEP_ROCM_ARCH
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile.rocm").write_text(DOCKERFILE)
    (tmp_path / "pyproject.toml").write_text('[tool.rocmci]\nmirror_hw = "amdexperimental"\narch = "gfx942"\n')
    return tmp_path


def test_dockerfile_defaults_carry_their_line(workspace):
    s = settings.resolve(workspace, env={}, pyproject={})
    assert s.arch == "gfx942;gfx950"
    assert s.origin("arch") == "docker/Dockerfile.rocm:2 (ARG DEEPEP_ROCM_ARCH)"
    assert s.deepep_ref == "5d90af8b"
    assert s.origin("mirror_hw") == "default"


def test_precedence_default_pyproject_env_flag(workspace):
    s = settings.resolve(workspace, env={})
    assert (s.arch, s.origin("arch")) == ("gfx942", "pyproject.toml [tool.rocmci]")
    assert s.mirror_hw == "amdexperimental"

    s = settings.resolve(workspace, env={"ROCMCI_ARCH": "gfx950", "ROCMCI_MIRROR_HW": "amdmi355"})
    assert (s.arch, s.origin("arch")) == ("gfx950", "env ROCMCI_ARCH")
    assert s.origin("mirror_hw") == "env ROCMCI_MIRROR_HW"

    s = settings.resolve(workspace, env={"ROCMCI_ARCH": "gfx950"}, flags={"arch": "gfx942;gfx950", "image": None})
    assert (s.arch, s.origin("arch")) == ("gfx942;gfx950", "flag --arch")
    assert s.origin("image") == "default"  # a flag left at None was not given


def test_int_setting_is_converted_and_checked(workspace):
    s = settings.resolve(workspace, env={"ROCMCI_RUN_TIMEOUT": "90"}, pyproject={})
    assert s.run_timeout == 90
    with pytest.raises(UsageError, match="run_timeout.*must be an integer"):
        settings.resolve(workspace, env={"ROCMCI_RUN_TIMEOUT": "ninety"}, pyproject={})
    with pytest.raises(UsageError, match="must be a string"):
        settings.resolve(workspace, env={}, pyproject={"arch": 942})


def test_unknown_setting_names_a_close_match(workspace):
    with pytest.raises(UsageError, match=r"unknown setting 'mirror_hardware'.*did you mean 'mirror_hw'\?") as err:
        settings.resolve(workspace, env={}, pyproject={"mirror_hardware": "x"})
    assert err.value.exit_code == 2
    with pytest.raises(UsageError, match=r"ROCMCI_ARHC.*did you mean 'ROCMCI_ARCH'\?"):
        settings.resolve(workspace, env={"ROCMCI_ARHC": "gfx942"}, pyproject={})
    with pytest.raises(UsageError, match="unknown setting 'zzz' in flags"):
        settings.resolve(workspace, env={}, pyproject={}, flags={"zzz": 1})


def test_a_second_default_for_an_arg_is_an_error(workspace):
    path = workspace / "docker" / "Dockerfile.rocm"
    path.write_text(DOCKERFILE + 'ARG DEEPEP_ROCM_ARCH="gfx90a"\n')
    with pytest.raises(InputError, match=r"Dockerfile.rocm:12: ARG DEEPEP_ROCM_ARCH has a second default"):
        settings.resolve(workspace, env={}, pyproject={})


def test_missing_dockerfile_leaves_its_settings_unset_until_needed(tmp_path):
    s = settings.resolve(tmp_path, env={}, pyproject={})
    assert s.arch is None and s.origin("arch") == "unset: docker/Dockerfile.rocm not found"
    with pytest.raises(UsageError, match=r"setting 'arch' has no value.*pass --arch, set ROCMCI_ARCH"):
        s.require("arch")
    # Overriding a Dockerfile-backed setting means the file is never needed.
    assert settings.resolve(tmp_path, env={"ROCMCI_ARCH": "gfx942"}, pyproject={}).require("arch") == "gfx942"


def test_workspace_is_found_from_a_subfolder(workspace):
    sub = workspace / "a" / "b"
    sub.mkdir(parents=True)
    assert settings.find_workspace(sub) == workspace


def test_bad_pyproject_is_an_input_error(workspace):
    (workspace / "pyproject.toml").write_text("[tool.rocmci\n")
    with pytest.raises(InputError, match="invalid TOML"):
        settings.resolve(workspace, env={})
