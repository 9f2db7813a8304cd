from __future__ import annotations

import os
import re
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
    s = settings.resolve(workspace, env={"ROCMCI_VLLM_SRC": str(workspace)}, pyproject={})
    assert s.arch == "gfx942;gfx950"
    assert s.origin("arch").endswith("docker/Dockerfile.rocm:2 (ARG DEEPEP_ROCM_ARCH)")
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
        settings.resolve(workspace, env={"ROCMCI_VLLM_SRC": str(workspace)}, pyproject={})


def test_without_a_vllm_checkout_pins_are_unset_and_arch_is_deepeps_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = settings.resolve(tmp_path, env={}, pyproject={})
    assert s.vllm_src == "" and s.origin("vllm_src").startswith("unset: the current folder is not a vLLM checkout")
    assert (s.arch, s.origin("arch")) == ("gfx942;gfx950", "default: DeepEP setup.py's list (no vLLM checkout)")
    with pytest.raises(UsageError, match=r"setting 'deepep_ref' has no value.*pass --vllm-src PATH"):
        s.require("deepep_ref")
    # Overriding a checkout-backed setting means the checkout is never needed.
    assert settings.resolve(tmp_path, env={"ROCMCI_DEEPEP_REF": "abc"}, pyproject={}).require("deepep_ref") == "abc"
    with pytest.raises(UsageError, match=r"vllm_src '/nonexistent' \(env ROCMCI_VLLM_SRC\) holds no docker/Dockerfile"):
        settings.resolve(tmp_path, env={"ROCMCI_VLLM_SRC": "/nonexistent"}, pyproject={})


def test_the_current_folder_is_the_checkout_when_it_is_one(workspace, monkeypatch):
    (workspace / "setup.py").write_text("")
    monkeypatch.chdir(workspace)
    s = settings.resolve(workspace, env={}, pyproject={})
    assert s.vllm_src == str(workspace) and s.origin("vllm_src") == "default: the current folder is a vLLM checkout"
    assert (s.deepep_ref, s.origin("deepep_ref")) == ("5d90af8b", "docker/Dockerfile.rocm:6 (ARG DEEPEP_BRANCH)")


def test_workspace_is_found_from_a_subfolder(workspace):
    sub = workspace / "a" / "b"
    sub.mkdir(parents=True)
    assert settings.find_workspace(sub) == workspace


def test_bad_pyproject_is_an_input_error(workspace):
    (workspace / "pyproject.toml").write_text("[tool.rocmci\n")
    with pytest.raises(InputError, match="invalid TOML"):
        settings.resolve(workspace, env={})


# --- conversion and validation at parse time (issue 13) -------------------------------------------


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("run_timeout = inf", "setting 'run_timeout' from pyproject.toml [tool.rocmci] must be an integer, got inf"),
        ("run_timeout = nan", "must be an integer, got nan"),
        ("run_timeout = 2.9", "must be an integer, got 2.9"),
        ("run_timeout = true", "must be an integer, got True"),
        ("run_timeout = '90'", None),  # text that is a whole number, as from the environment
        ("arch = 942", "setting 'arch' from pyproject.toml [tool.rocmci] must be a string, got int 942"),
        ('deepep_nic = "cx7\\nrm -rf /"', "contains the control character '\\n'"),
    ],
)
def test_pyproject_values_are_checked_with_the_key(workspace, toml, message):
    (workspace / "pyproject.toml").write_text(f"[tool.rocmci]\n{toml}\n")
    if message is None:
        assert settings.resolve(workspace, env={}).run_timeout == 90
        return
    with pytest.raises(UsageError) as err:
        settings.resolve(workspace, env={})
    assert message in err.value.one_line() and err.value.exit_code == 2


@pytest.mark.parametrize("toml", ["tool = 1", "tool = 'x'", "[tool]\nrocmci = 1", "tool = [1]"])
def test_pyproject_tool_of_the_wrong_type_is_one_line(workspace, toml):
    (workspace / "pyproject.toml").write_text(toml + "\n")
    with pytest.raises(InputError, match=r"pyproject.toml: .*must be a table") as err:
        settings.read_pyproject(workspace)
    assert "\n" not in err.value.one_line()


def test_invalid_toml_names_line_and_column(workspace):
    (workspace / "pyproject.toml").write_text('[tool.rocmci]\narch = "gfx942"\nrun_timeout = \n')
    with pytest.raises(InputError, match=r"pyproject.toml:3:15: invalid TOML: Invalid value$"):
        settings.read_pyproject(workspace)


def test_pyproject_that_is_not_a_regular_file_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").mkdir()
    with pytest.raises(InputError, match="pyproject.toml: is a directory, not a regular file"):
        settings.read_pyproject(tmp_path)
    (tmp_path / "pyproject.toml").rmdir()
    os.mkfifo(tmp_path / "pyproject.toml")
    with pytest.raises(InputError, match="is a FIFO"):
        settings.read_pyproject(tmp_path)


@pytest.mark.parametrize(
    "text",
    ["2.9", "inf", "-inf", "nan", "1e3", "0x10", "9_0", "١٠", "", " ", "9" * 5000, "True", "90s"],
)
def test_env_int_text_must_be_plain_ascii_digits(workspace, text):
    with pytest.raises(UsageError, match=r"setting 'run_timeout' from env ROCMCI_RUN_TIMEOUT must be an integer"):
        settings.resolve(workspace, env={"ROCMCI_RUN_TIMEOUT": text}, pyproject={})


def test_env_int_accepts_signs_and_spaces(workspace):
    assert settings.resolve(workspace, env={"ROCMCI_RUN_TIMEOUT": " +90 "}, pyproject={}).run_timeout == 90


def test_bounds_and_rules_declared_on_a_setting_apply_to_every_layer():
    timeout = settings.Setting("t", "h", kind=int, min=1, max=86400)
    for where in ("env ROCMCI_T", "flag --t", "pyproject.toml [tool.rocmci]"):
        assert settings.convert(timeout, "60", where) == 60
        with pytest.raises(UsageError, match=rf"setting 't' from {re.escape(where)} must be at least 1, got -5"):
            settings.convert(timeout, "-5", where)
        with pytest.raises(UsageError, match="must be at most 86400, got 100000000"):
            settings.convert(timeout, 100000000, where)
    nic = settings.Setting("nic", "h", choices=("cx7", "thor2", "io"))
    with pytest.raises(UsageError, match=r"is not one of the known values, got 'cx8'.*did you mean 'cx7'\?"):
        settings.convert(nic, "cx8", "env ROCMCI_NIC")
    repo = settings.Setting("repo", "h", pattern=r"[a-z0-9][a-z0-9._/-]*", pattern_hint="e.g. rocmci/vllm-rocm")
    for bad in ("", "a b", "x;y", "--privileged"):
        with pytest.raises(UsageError, match=r"is not valid.*e.g. rocmci/vllm-rocm"):
            settings.convert(repo, bad, "env ROCMCI_REPO")


def test_booleans_are_strict():
    flag = settings.Setting("b", "h", kind=bool)
    assert [settings.convert(flag, v, "env") for v in (True, "true", "TRUE", "1", False, "false", " 0 ")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    for bad in ("yes", "no", "on", "2", "", 1, None):
        with pytest.raises(UsageError, match="must be true or false"):
            settings.convert(flag, bad, "env")


@pytest.mark.parametrize("var", ["ROCMCI_Arch", "rocmci_arch", "Rocmci_Arch"])
def test_env_names_in_another_case_are_refused_with_the_exact_name(workspace, var):
    with pytest.raises(UsageError, match=rf"environment variable {var} is not upper case.*did you mean 'ROCMCI_ARCH'"):
        settings.resolve(workspace, env={var: "gfx950"}, pyproject={})


def test_env_typos_in_any_case_get_a_suggestion(workspace):
    with pytest.raises(UsageError, match=r"rocmci_arhc.*did you mean 'ROCMCI_ARCH'\?"):
        settings.resolve(workspace, env={"rocmci_arhc": "gfx950"}, pyproject={})
    # Other variables are none of rocmci's business.
    assert settings.resolve(workspace, env={"ROCM_PATH": "/opt/rocm", "XROCMCI_A": "1"}, pyproject={})


def test_control_characters_are_refused_from_env_and_flags(workspace):
    cases = (({"ROCMCI_DEEPEP_NIC": "cx7\nio"}, {}), ({}, {"mirror_hw": "amd\0production"}))
    cases += (({"ROCMCI_DEEPEP_NIC": "cx7\x85io"}, {}), ({}, {"mirror_hw": "amd\x9f"}), ({}, {"mirror_hw": "\x7f"}))
    for env, flags in cases:  # C0, DEL and C1 (U+0085, a line break to YAML)
        with pytest.raises(UsageError, match="contains the control character"):
            settings.resolve(workspace, env=env, flags=flags, pyproject={})


def test_describe_names_the_origin(workspace):
    s = settings.resolve(workspace, env={"ROCMCI_SOURCE": "x.yaml"}, pyproject={})
    assert s.describe("source") == "setting 'source' (env ROCMCI_SOURCE)"


def test_a_symlink_loop_as_a_path_setting_resolves_without_raising(workspace):
    loop = workspace / "loop.yaml"
    loop.symlink_to(loop)
    s = settings.resolve(workspace, env={"ROCMCI_INVENTORY": "loop.yaml"}, pyproject={})
    from rocmci import yamldoc

    with pytest.raises(InputError, match=r"loop.yaml: is a symlink loop \(from setting 'inventory'"):
        yamldoc.load(s.path("inventory"), what=s.describe("inventory"))


# --- finding the vLLM checkout and the workspace from any folder -------------------------------------------


def test_the_checkout_is_found_from_any_folder_inside_it(workspace, monkeypatch):
    (workspace / "setup.py").write_text("")
    deep = workspace / "tests" / "kernels" / "moe"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    s = settings.resolve(env={}, pyproject={})
    assert s.workspace == workspace  # its [tool.rocmci] pyproject, found upwards
    assert s.vllm_src == str(workspace)
    assert s.origin("vllm_src") == "default: the vLLM checkout holding the current folder"
    assert settings.find_checkout(deep) == workspace


def test_a_checkout_without_tool_rocmci_is_its_own_workspace(workspace, tmp_path):
    """A vLLM clone kept inside another project that has [tool.rocmci]: settings are the checkout's."""
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "pyproject.toml").write_text('[tool.rocmci]\nmirror_hw = "amdexperimental"\n')
    vllm = outer / "vllm"
    (vllm / "docker").mkdir(parents=True)
    (vllm / "docker" / "Dockerfile.rocm").write_text(DOCKERFILE)
    (vllm / "setup.py").write_text("")
    (vllm / "pyproject.toml").write_text('[project]\nname = "vllm"\n')
    (vllm / "vllm").mkdir()
    assert settings.find_workspace(vllm / "vllm") == vllm
    assert settings.find_workspace(outer) == outer  # outside the clone: the enclosing workspace as before
    (vllm / "pyproject.toml").write_text('[project]\nname = "vllm"\n[tool.rocmci]\nmirror_hw = "amdmi355"\n')
    assert settings.find_workspace(vllm / "vllm") == vllm
    assert settings.resolve(vllm, env={}).origin("mirror_hw") == "pyproject.toml [tool.rocmci]"


def test_settings_show_none_and_blank_alike_and_booleans_as_written(workspace, monkeypatch):
    from rocmci import host

    assert host.shown_value(None) == host.shown_value("") == "(not set)"
    assert (host.shown_value(False), host.shown_value(True), host.shown_value(3600)) == ("false", "true", "3600")
    monkeypatch.chdir(workspace)
    (workspace / "setup.py").write_text("")
    rows = {name: (value, source) for name, value, source in host.settings_rows(settings.resolve(env={}))}
    assert rows["deepep_ref"] == ("5d90af8b", "docker/Dockerfile.rocm:6 (ARG DEEPEP_BRANCH)")  # checkout path once
    assert rows["image"][0] == "(not set)" and rows["base_refresh_skip"][0] == "false"
