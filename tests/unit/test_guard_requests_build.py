"""image/requests: what `image.build` is asked to build (build_request, pins, network, extra_build_args), the
checkout's commit and local changes (vllm_commit, vllm_dirty), and the ROCm fixes its Dockerfile.rocm_base applies
(rocm_fixes), from the mutation run's survivors.

Real parts: vLLM's fixture checkout (a writable copy in tmp_path), settings through the one registry, real git
repositories made in tmp_path (no network), small Dockerfiles parsed by rocmci's own reader, and the packaged
workaround registry. Nothing of rocmci's is replaced; git is taken away only by an empty PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from rocmci import labels as label
from rocmci import settings
from rocmci.errors import InputError, UsageError
from rocmci.image import plan as planmod
from rocmci.image import requests
from rocmci.image import vllm_dockerfile as vd
from tests.conftest import SHARED_VLLM

UNKNOWN = "unknown (not a git checkout)"
FIX = "ROCm/rocm-systems#6942"  # the one fix the packaged workaround registry names
FLAGS = "--rocm-explicit-ctx --rocm-gfx942-fp8-fnuz-max 224"  # the fixture's build_deepep setup.py flags
needs_vllm = pytest.mark.skipif(not (SHARED_VLLM / "docker").is_dir(), reason=f"{SHARED_VLLM} not found")


def git(where, *args: str) -> str:
    """git as a test sets a repository up: an identity of its own, never the caller's config for commits."""
    # Tests run from a git hook carry its GIT_DIR/GIT_INDEX_FILE: set-up must never commit into that repository.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(where), *args],
        capture_output=True, text=True, check=True, timeout=60, env=env,
    )  # fmt: skip
    return done.stdout.strip()


def committed(where, message: str = "vllm") -> str:
    """`where` as a git checkout of its files, all committed; its HEAD."""
    where.mkdir(parents=True, exist_ok=True)
    git(where, "init", "-q")
    (where / "setup.py").write_text("# stand-in\n")
    git(where, "add", "-A")
    git(where, "commit", "-qm", message)
    return git(where, "rev-parse", "HEAD")


# --- vllm_commit / vllm_dirty: the checkout's own repository only ---------------------------------------------


def test_a_plain_copy_inside_an_unrelated_repository_is_not_a_git_checkout(tmp_path):
    # A home folder or CI workspace under git must not lend its commit (or its status) to a copy of vLLM's files.
    committed(tmp_path / "home")
    copy = tmp_path / "home" / "vllm"
    copy.mkdir()
    (copy / "setup.py").write_text("# copied, never committed\n")
    assert (requests.vllm_commit(copy), requests.vllm_dirty(copy)) == (UNKNOWN, None)


@pytest.mark.parametrize("parent", ["work:a", "a:b:c"])
def test_a_copy_below_a_folder_whose_name_holds_a_colon_is_not_a_git_checkout_either(tmp_path, parent):
    # GIT_CEILING_DIRECTORIES is a ':'-separated list: such a parent is no ceiling, and git would walk past it.
    committed(tmp_path / "home")
    copy = tmp_path / "home" / parent / "vllm"
    copy.mkdir(parents=True)
    (copy / "setup.py").write_text("# copied, never committed\n")
    assert (requests.vllm_commit(copy), requests.vllm_dirty(copy)) == (UNKNOWN, None)
    head = committed(copy)  # its own repository is still read
    assert (requests.vllm_commit(copy), requests.vllm_dirty(copy)) == (head, False)


def test_a_checkout_reached_through_a_link_is_read_as_the_checkout(tmp_path):
    head = committed(tmp_path / "vllm")
    (tmp_path / "link").symlink_to(tmp_path / "vllm")
    assert (requests.vllm_commit(tmp_path / "link"), requests.vllm_dirty(tmp_path / "link")) == (head, False)


def test_git_variables_of_the_callers_environment_never_reach_git(tmp_path, monkeypatch):
    # A hook or CI step runs with GIT_DIR/GIT_WORK_TREE of its own repository: the label is still the checkout's.
    other = committed(tmp_path / "other", "another project")
    head = committed(tmp_path / "vllm")
    assert other != head
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "other" / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path / "other"))
    assert (requests.vllm_commit(tmp_path / "vllm"), requests.vllm_dirty(tmp_path / "vllm")) == (head, False)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert (requests.vllm_commit(plain), requests.vllm_dirty(plain)) == (UNKNOWN, None)


def test_a_checkout_owned_by_another_user_is_still_read(tmp_path, monkeypatch):
    """A CI agent's checkout or a bind mount owned by another uid: git refuses it as "dubious ownership" unless
    safe.directory names it, and rocmci names it for that one path. Only root can hand the checkout to another
    uid; run as another user, the test reads a checkout of its own, which git trusts anyway."""
    head = committed(tmp_path / "vllm")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.gitconfig of this machine may list safe.directory
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "54321:54321", str(tmp_path / "vllm")], check=True, timeout=60)
    assert (requests.vllm_commit(tmp_path / "vllm"), requests.vllm_dirty(tmp_path / "vllm")) == (head, False)


def test_an_untracked_file_is_a_local_change_even_where_git_status_hides_untracked_files(tmp_path):
    head = committed(tmp_path / "vllm")
    git(tmp_path / "vllm", "config", "status.showUntrackedFiles", "no")  # a user's own preference in the checkout
    assert requests.vllm_dirty(tmp_path / "vllm") is False
    (tmp_path / "vllm" / "new_kernel.cu").write_text("// not added yet\n")
    assert (requests.vllm_commit(tmp_path / "vllm"), requests.vllm_dirty(tmp_path / "vllm")) == (head, True)


def test_a_repository_without_a_commit_has_no_revision_even_with_a_file_named_head(tmp_path):
    # `git rev-parse HEAD` prints the word HEAD and exits 0 when a file of that name exists: never a revision.
    (tmp_path / "vllm").mkdir()
    git(tmp_path / "vllm", "init", "-q")
    (tmp_path / "vllm" / "HEAD").write_text("not a commit\n")
    assert (requests.vllm_commit(tmp_path / "vllm"), requests.vllm_dirty(tmp_path / "vllm")) == (UNKNOWN, True)


def test_without_git_the_checkout_is_unknown_and_its_changes_unsaid(tmp_path, monkeypatch):
    committed(tmp_path / "vllm")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # a slim CI image without git
    assert (requests.vllm_commit(tmp_path / "vllm"), requests.vllm_dirty(tmp_path / "vllm")) == (UNKNOWN, None)


@pytest.mark.parametrize("hangs", ["rev-parse --show-toplevel", "rev-parse --verify HEAD", "status --porcelain"])
def test_a_git_that_hangs_is_given_up_on_within_its_bound(tmp_path, monkeypatch, hangs):
    # A git that never answers (a stale NFS lock, a credential prompt) must not hold image.build: each call is
    # bounded, and the checkout is then as unknown as without git. The bound is lowered here to keep the test fast.
    checkout = tmp_path / "vllm"
    committed(checkout)
    real_git = shutil.which("git")
    fake = tmp_path / "bin" / "git"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *"{hangs}"*) exec /bin/sleep 5;; esac\n'
        f'exec {real_git} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    monkeypatch.setattr(requests, "GIT_TIMEOUT", 0.5)
    started = time.monotonic()
    commit, dirty = requests.vllm_commit(checkout), requests.vllm_dirty(checkout)
    assert time.monotonic() - started < 4
    head = git(checkout, "rev-parse", "HEAD")
    expected = {"rev-parse --show-toplevel": (UNKNOWN, None), "rev-parse --verify HEAD": (UNKNOWN, False)}
    assert (commit, dirty) == expected.get(hangs, (head, None))  # the call that hangs alone says nothing


# --- pins and network: the labels and build args of the settings ---------------------------------------------


def resolved(tree, flags=None, env=None, pyproject=None):
    return settings.resolve(tree, flags={"vllm_src": str(tree), **(flags or {})}, env=env or {},
                            pyproject=pyproject or {})  # fmt: skip


@needs_vllm
def test_every_pin_is_a_label_and_only_the_pins_given_on_purpose_are_build_args(vllm_docker_tree):
    s = resolved(vllm_docker_tree, flags={"base_image": "rocm/vllm-dev:base-x"},
                 env={"ROCMCI_DEEPEP_REF": "5d90af8b"}, pyproject={"rocshmem_ref": "abc1234"})  # fmt: skip
    labels, overrides = requests.pins(s)
    assert labels == {
        label.BASE_IMAGE: "rocm/vllm-dev:base-x",
        label.DEEPEP_REPO: "https://github.com/ROCm/DeepEP.git",
        label.DEEPEP_REF: "5d90af8b",
        label.DEEPEP_NIC: "cx7",
        label.ROCSHMEM_REPO: "https://github.com/ROCm/rocm-systems.git",
        label.ROCSHMEM_REF: "abc1234",
        label.DEEPEP_FLAGS: FLAGS,
    }
    # The pins read from vLLM's file are its own ARG defaults: passing them again would hide a change of the file.
    assert overrides == {
        "BASE_IMAGE": "rocm/vllm-dev:base-x",
        "DEEPEP_BRANCH": "5d90af8b",
        "ROCSHMEM_BRANCH": "abc1234",
    }


@needs_vllm
def test_no_deepep_flags_is_an_empty_flags_label(vllm_docker_tree):
    labels, _ = requests.pins(resolved(vllm_docker_tree, flags={"deepep_flags": ""}))
    assert labels[label.DEEPEP_FLAGS] == ""


@needs_vllm
@pytest.mark.parametrize(
    ("name", "env"), [("deepep_repo", "ROCMCI_DEEPEP_REPO"), ("rocshmem_repo", "ROCMCI_ROCSHMEM_REPO")]
)
def test_a_pin_with_url_credentials_is_refused_naming_the_setting_and_where_it_came_from(vllm_docker_tree, name, env):
    s = resolved(vllm_docker_tree, env={env: "https://oauth2:tok3n@github.com/ROCm/x.git"})
    with pytest.raises(UsageError) as err:
        requests.pins(s)
    assert err.value.message == (
        f"{name} (env {env}) holds credentials in its URL (https://***@github.com/ROCm/x.git); rocmci never passes "
        "them as a build arg or label, where the image would keep them"
    )
    assert "tok3n" not in err.value.one_line()


@needs_vllm
def test_the_build_network_is_the_setting_and_the_engine_default_is_none(vllm_docker_tree):
    assert requests.network(resolved(vllm_docker_tree, flags={"build_network": "host"})) == "host"
    assert requests.network(resolved(vllm_docker_tree, env={"ROCMCI_BUILD_NETWORK": "none"})) == "none"
    assert requests.network(resolved(vllm_docker_tree)) is None  # '' never becomes `--network ''`


# --- build_request: every value asked for reaches the request ------------------------------------------------


@pytest.fixture
def fixed_tree(vllm_docker_tree):
    """vLLM's checkout, committed, whose Dockerfile.rocm_base applies the fix the packaged registry names."""
    path = vllm_docker_tree / "docker" / "Dockerfile.rocm_base"
    path.write_text(path.read_text() + f'RUN echo "backport of {FIX}" > /fix\n')
    return vllm_docker_tree, committed(vllm_docker_tree)


@needs_vllm
def test_a_build_request_carries_every_value_it_was_given(fixed_tree):
    tree, head = fixed_tree
    s = resolved(tree, flags={"arch": "gfx942", "vllm_arch": "gfx942;gfx950", "build_network": "host",
                              "image_repo": "registry.example/me/vllm", "extra_labels": "team=ci"})  # fmt: skip
    co = requests.checkout(s)
    chain = planmod.Chain("registry", builder="ci (docker-container)", registry="registry.example/cache")
    got = requests.build_request(
        s, co, requests.arch_request(s, co), target="ci_base", tag="me/vllm:mine", ci_base="me/vllm:ci",
        push=True, force=True, extra_args={"max_jobs": "8"}, load=True, ci_base_digest="sha256:" + "d" * 64,
        ci_base_labels={"vllm.ci_base.content_hash": "e" * 64}, chain=chain,
    )  # fmt: skip
    labels, overrides = requests.pins(s)
    assert (got.checkout, got.dockerfile.display, got.archs, got.vllm_archs) == (
        tree,
        "docker/Dockerfile.rocm",
        ("gfx942",),
        ("gfx942", "gfx950"),
    )
    assert (got.pins, got.overrides, got.image_repo) == (labels, overrides, "registry.example/me/vllm")
    assert (got.vllm_commit, got.vllm_dirty) == (head, False)
    assert (got.target, got.tag, got.ci_base_image, got.network) == ("ci_base", "me/vllm:mine", "me/vllm:ci", "host")
    assert (got.push, got.force, got.load, got.extra_args) == (True, True, True, {"max_jobs": "8"})
    assert (got.ci_base_digest, got.ci_base_labels) == ("sha256:" + "d" * 64, {"vllm.ci_base.content_hash": "e" * 64})
    assert (got.chain, got.rocm_fixes, got.extra_labels) == (chain, (FIX,), {"team": "ci"})


@needs_vllm
def test_a_build_request_left_to_its_defaults_loads_nothing_and_pushes_nothing(vllm_docker_tree):
    s = resolved(vllm_docker_tree, flags={"arch": "gfx942"})
    co = requests.checkout(s)
    got = requests.build_request(s, co, requests.arch_request(s, co), target="test", tag=None, ci_base=None,
                                 push=False, force=False)  # fmt: skip
    assert (got.load, got.push, got.force, got.extra_args, got.chain, got.network) == (False, False, False, {}, None,
                                                                                     None)  # fmt: skip
    assert (got.ci_base_digest, got.ci_base_labels, got.rocm_fixes, got.vllm_dirty) == (None, None, (), None)


# --- extra_build_args: --build-arg NAME=VALUE ----------------------------------------------------------------

DOCKERFILE = """\
ARG GLOBAL_KNOB=1
ARG REMOTE_VLLM=0
FROM scratch AS build
ARG max_jobs
ARG nvcc_threads=2
"""


def parsed(tmp_path) -> vd.VllmDockerfile:
    return vd.parse(DOCKERFILE, path=tmp_path / "Dockerfile.rocm", display="docker/Dockerfile.rocm")


def refused(tmp_path, name: str, value: str = "1") -> UsageError:
    with pytest.raises(UsageError) as err:
        requests.extra_build_args(parsed(tmp_path), (("max_jobs", "8"), (name, value)))
    return err.value


def test_build_args_declared_globally_or_in_a_stage_pass_with_their_values(tmp_path):
    pairs = (("GLOBAL_KNOB", "2"), ("max_jobs", "8"), ("nvcc_threads", "-O2 -g ~é"))  # a blank is no control
    assert requests.extra_build_args(parsed(tmp_path), pairs) == {"GLOBAL_KNOB": "2", "max_jobs": "8",
                                                                 "nvcc_threads": "-O2 -g ~é"}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "instead"),
    [("REMOTE_VLLM", "(always 0)"), ("DEEPEP_REPO", "ROCMCI_DEEPEP_REPO"), ("BASE_IMAGE", "--base-image"),
     (vd.ARCH_ARG, "--arch")],
)  # fmt: skip
def test_a_build_arg_rocmci_passes_itself_is_refused_naming_what_sets_it(tmp_path, name, instead):
    err = refused(tmp_path, name)  # REMOTE_VLLM is declared: declared or not, it is rocmci's
    assert (err.message, err.hint) == (f"--build-arg {name} is set by rocmci", f"use {instead} instead")


def test_an_undeclared_build_arg_is_refused_with_the_closest_declared_name(tmp_path):
    err = refused(tmp_path, "nvcc_thread")
    assert (err.message, err.hint) == (
        "--build-arg nvcc_thread: docker/Dockerfile.rocm declares no ARG nvcc_thread",
        "did you mean nvcc_threads?",
    )


def test_an_undeclared_build_arg_like_no_declared_one_points_at_the_arg_lines(tmp_path):
    err = refused(tmp_path, "SCCACHE_ZONE")
    assert (err.message, err.hint) == (
        "--build-arg SCCACHE_ZONE: docker/Dockerfile.rocm declares no ARG SCCACHE_ZONE",
        "see the ARG lines of the Dockerfile",
    )


@pytest.mark.parametrize(
    ("value", "code"),
    [("8\x7f", "007F"), ("8\x1f", "001F"), ("a\tb", "0009"), ("8\n", "000A"), ("\x00", "0000"),
     ("8\x1b[2J", "001B"), ("8\x85", "0085"), ("\x80", "0080"), ("8\x9f1", "009F")],
    ids=repr,
)  # fmt: skip
def test_a_build_arg_value_with_a_control_character_is_refused(tmp_path, value, code):
    err = refused(tmp_path, "nvcc_threads", value)
    assert (err.message, err.hint) == (
        f"--build-arg nvcc_threads has the control character U+{code} in its value",
        "give the value as one line of printable text",
    )


@pytest.mark.parametrize("value", ["~", "\xa0x", "x\xa0", "caf\u00e9", ""], ids=repr)
def test_a_build_arg_value_next_to_the_control_characters_is_kept(tmp_path, value):
    # U+007E below DEL and U+00A0 past C1 are printable: the bounds of the refused ranges
    assert requests.extra_build_args(parsed(tmp_path), (("nvcc_threads", value),)) == {"nvcc_threads": value}


# --- rocm_fixes: the checkout's Dockerfile.rocm_base, read as a bounded input file -------------------------


def test_a_checkout_without_a_base_dockerfile_applies_no_fix(tmp_path):
    assert requests.rocm_fixes(tmp_path) == ()


def test_a_dangling_base_dockerfile_link_is_an_error_naming_the_file(tmp_path):
    # A link that points nowhere is a broken checkout, not one without the file: it is said, never ().
    (tmp_path / "docker").mkdir()
    path = tmp_path / "docker" / "Dockerfile.rocm_base"
    path.symlink_to(tmp_path / "gone")
    with pytest.raises(InputError) as err:
        requests.rocm_fixes(tmp_path)
    assert err.value.message == f"{path}: no such file (from docker/Dockerfile.rocm_base)"


def test_a_base_dockerfile_over_the_base_tiers_bound_is_refused(tmp_path):
    # The same 4 MiB bound as the base tier's hash (image/base.py) reads: not the 16 MiB of a generic input.
    (tmp_path / "docker").mkdir()
    path = tmp_path / "docker" / "Dockerfile.rocm_base"
    path.write_bytes(b"FROM scratch\n" + b"#" * (4 * 2**20))
    with pytest.raises(InputError) as err:
        requests.rocm_fixes(tmp_path)
    assert err.value.message == f"{path}: is larger than the limit of 4194304 bytes (from docker/Dockerfile.rocm_base)"
