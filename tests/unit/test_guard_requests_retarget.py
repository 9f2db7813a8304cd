"""image/requests: what `image.retarget` is asked to build (retarget_request) and what BASE_IMAGE and the base tier's
upstream are on the engine (base_facts), from the mutation run's survivors.

Real parts: vLLM's fixture checkout (a copy in tmp_path where its setup.py call is edited), settings through the one
registry, and rocmci's Engine talking through the real Docker SDK to the Docker-API stand-in of test_guard_images on
a unix socket, here also answering the registry's digest of a tag (`/distribution/<ref>/json`).
"""

from __future__ import annotations

import re
import threading
import urllib.parse

import pytest

from rocmci import labels as label
from rocmci import settings
from rocmci.engine import Engine
from rocmci.errors import UsageError
from rocmci.image import base, requests
from tests.conftest import SHARED_VLLM
from tests.unit.test_guard_images import _Api, _UnixServer

pytestmark = pytest.mark.skipif(not (SHARED_VLLM / "docker").is_dir(), reason=f"{SHARED_VLLM} not found")
FROM = "rocm/vllm-ci:0123abcd"
IDENTITY = "sha256:" + "1" * 64
ARCH_OK = {label.VLLM_ARCH: "gfx942;gfx950"}  # an image whose vLLM covers every arch asked for here
BASE = "rocm/vllm-dev:base"  # the fixture Dockerfile.rocm's ARG BASE_IMAGE
UPSTREAM = "rocm/dev-ubuntu-22.04:7.2.1-complete"  # the fixture Dockerfile.rocm_base's ARG BASE_IMAGE
LOCAL, MOVED, ID = ("sha256:" + c * 64 for c in "abc")


def resolved(tmp_path, flags=None, env=None, vllm=SHARED_VLLM):
    return settings.resolve(tmp_path, flags={"vllm_src": str(vllm), **(flags or {})}, env=env or {}, pyproject={})


def retarget(tmp_path, labels=None, *, flags=None, env=None, vllm=SHARED_VLLM, **given):
    s = resolved(tmp_path, {"arch": "gfx950", **(flags or {})}, env, vllm)
    kw = {"from_image": FROM, "from_identity": IDENTITY, "tag": None, "force": False, "from_labels": labels, **given}
    return requests.retarget_request(s, requests.checkout(s), **kw)


def refusal(tmp_path, labels=None, **kw) -> UsageError:
    with pytest.raises(UsageError) as err:
        retarget(tmp_path, labels, **kw)
    return err.value


# --- retarget_request: pins ------------------------------------------------------------------------------------


@pytest.fixture
def literal_nic(vllm_docker_tree):
    """vLLM's checkout with DeepEP's setup.py call naming its NIC outright (`--nic thor2`, not ${DEEPEP_NIC})."""
    path = vllm_docker_tree / "docker" / "Dockerfile.rocm"
    text = path.read_text()
    assert text.count("--nic ${DEEPEP_NIC}") == 1
    path.write_text(text.replace("--nic ${DEEPEP_NIC}", "--nic thor2"))
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if "--nic thor2" in x)
    return vllm_docker_tree, f"docker/Dockerfile.rocm:{line} (setup.py --nic)"


def test_a_literal_nic_in_deepeps_setup_call_is_the_nic_pin_and_names_its_line(tmp_path, literal_nic):
    tree, where = literal_nic
    got = retarget(tmp_path, ARCH_OK, vllm=tree)
    assert (got.pins["DEEPEP_NIC"], got.sources["DEEPEP_NIC"]) == ("thor2", where)  # not the ARG's cx7
    # Only the NIC: every other pin is still its ARG line's.
    assert got.pins["DEEPEP_REPO"] == "https://github.com/ROCm/DeepEP.git"
    assert got.setup_flags == ("--rocm-explicit-ctx", "--rocm-gfx942-fp8-fnuz-max", "224")
    assert all("setup.py --nic" not in src for arg, src in got.sources.items() if arg != "DEEPEP_NIC")
    assert got.notes == ()
    # The image's label still wins over the file, and the note says which line it won over.
    labelled = retarget(tmp_path, {**ARCH_OK, label.VLLM_DEEPEP_NIC: "cx7"}, vllm=tree)
    assert labelled.pins["DEEPEP_NIC"] == "cx7"
    assert labelled.notes[0].startswith(f"DEEPEP_NIC: the image's label {label.VLLM_DEEPEP_NIC}=cx7 wins over thor2 "
                                        f"({where}); ")  # fmt: skip


def test_a_label_that_agrees_with_the_value_it_would_replace_is_no_note(tmp_path):
    same_as_checkout = retarget(tmp_path, {**ARCH_OK, label.DEEPEP_REF: "0f63d3e9"})  # the fixture's ARG DEEPEP_BRANCH
    assert same_as_checkout.pins["DEEPEP_BRANCH"] == "0f63d3e9" and same_as_checkout.notes == ()
    same_as_flag = retarget(tmp_path, {**ARCH_OK, label.DEEPEP_REF: "5d90af8b"}, flags={"deepep_ref": "5d90af8b"})
    assert same_as_flag.sources["DEEPEP_BRANCH"].startswith("flag ") and same_as_flag.notes == ()


def test_the_note_of_a_winning_label_names_the_environment_setting_that_would_choose(tmp_path):
    s = resolved(tmp_path)
    got = retarget(tmp_path, {**ARCH_OK, label.DEEPEP_REF: "5d90af8b"})
    assert got.notes == (
        f"DEEPEP_BRANCH: the image's label {label.DEEPEP_REF}=5d90af8b wins over 0f63d3e9 ({s.origin('deepep_ref')}); "
        f"it is what {FROM} was built with (a flag or ROCMCI_DEEPEP_REF chooses)",
    )


def test_a_label_value_the_settings_rule_refuses_is_a_usage_error_naming_the_label(tmp_path):
    err = refusal(tmp_path, {**ARCH_OK, label.DEEPEP_REF: "-x"})
    assert err.message.startswith(f"setting 'deepep_ref' from image label {label.DEEPEP_REF} is not valid")


@pytest.mark.parametrize(
    ("name", "key"), [("deepep_repo", label.VLLM_DEEPEP_REPO), ("rocshmem_repo", label.ROCSHMEM_REPO)]
)
def test_a_repository_label_with_url_credentials_is_refused_naming_the_label(tmp_path, name, key):
    # The image's label becomes a build arg and a label of the new image: a token in it would be kept there.
    err = refusal(tmp_path, {**ARCH_OK, key: "https://oauth2:tok3n@github.com/ROCm/x.git"})
    assert err.message.startswith(f"{name} (image label {key}) holds credentials in its URL "
                                  "(https://***@github.com/ROCm/x.git)")  # fmt: skip
    assert "tok3n" not in err.one_line()


def test_a_one_arch_offload_flag_is_kept_and_a_multi_arch_one_is_a_usage_error(tmp_path):
    one = "--rocm-explicit-ctx --offload-arch=gfx950"
    assert retarget(tmp_path, ARCH_OK, flags={"deepep_flags": one}).setup_flags == tuple(one.split())
    from_label = retarget(tmp_path, {**ARCH_OK, label.DEEPEP_FLAGS: "--offload-arch=gfx942"})
    assert from_label.setup_flags == ("--offload-arch=gfx942",)
    # A list in one flag never reaches the overlay: the setting's own rule refuses ';' (exit 2).
    err = refusal(tmp_path, {**ARCH_OK, label.DEEPEP_FLAGS: "--offload-arch=gfx942;gfx950"})
    assert err.message.startswith(f"setting 'deepep_flags' from image label {label.DEEPEP_FLAGS} is not valid")


# --- retarget_request: the image's vLLM archs ------------------------------------------------------------------


def test_archs_the_images_vllm_lacks_are_all_named_with_what_to_do(tmp_path):
    err = refusal(tmp_path, {label.VLLM_ARCH: "gfx90a"}, flags={"arch": "gfx942,gfx950"})
    assert err.message == (
        f"{FROM} has vLLM kernels for gfx90a (label {label.VLLM_ARCH}), not for gfx942, gfx950: DeepEP rebuilt "
        "for it would sit beside a vLLM that cannot run there"
    )
    assert err.hint == "retarget an image whose vLLM list covers it, or build one with `rocmci image.build --arch`"


def test_an_unreadable_vllm_arch_label_is_refused_naming_the_label_and_the_image(tmp_path):
    err = refusal(tmp_path, {label.VLLM_PYTORCH_ARCH: "gfx942:xnack-"})
    assert err.message.startswith(f"label {label.VLLM_PYTORCH_ARCH} of {FROM} 'gfx942:xnack-' has a target feature")


def test_an_image_without_a_vllm_arch_label_is_said_naming_both_labels_looked_for(tmp_path):
    assert retarget(tmp_path, {}).notes == (
        f"{FROM} has no vLLM arch label ({label.VLLM_ARCH}, {label.VLLM_PYTORCH_ARCH}): its kernels' archs are not "
        "checked",
    )


# --- retarget_request: WORKDIR and the request itself ----------------------------------------------------------


@pytest.mark.parametrize(("given", "kept"), [("/vllm-workspace", "/vllm-workspace"), ("/my work", "/my work"),
                                             ("", "/")])  # fmt: skip
def test_the_images_workdir_is_restored_and_none_is_the_root(tmp_path, given, kept):
    assert retarget(tmp_path, ARCH_OK, from_workdir=given).workdir == kept  # a blank is a legal path character


@pytest.mark.parametrize("workdir", ["app", "/app\n/etc", "relative/" + "x" * 100])
def test_a_workdir_that_is_not_a_plain_absolute_path_is_refused(tmp_path, workdir):
    err = refusal(tmp_path, ARCH_OK, from_workdir=workdir)
    # Shown cut to 60 characters (repr: a control character stays visible and on one line).
    assert err.message == f"{FROM} has an unusable WORKDIR {workdir[:60]!r}"
    assert err.hint == "rebuild it with a plain path"


def test_the_request_carries_what_was_asked_for(tmp_path):
    flags = {"build_network": "host", "image_repo": "localhost:5000/mine", "deepep_flags": "--rocm-explicit-ctx"}
    tag = "localhost:5000/mine:retarget-gfx950"
    got = retarget(tmp_path, ARCH_OK, flags=flags, tag=tag, force=True, from_workdir="/app")
    asked = (FROM, IDENTITY, ("gfx950",), ("--rocm-explicit-ctx",), "localhost:5000/mine", tag, "host", True, "/app")
    assert (got.from_image, got.from_identity, got.archs, got.setup_flags, got.image_repo, got.tag, got.network,
            got.force, got.workdir) == asked  # fmt: skip


# --- base_facts ------------------------------------------------------------------------------------------------


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """(an Engine on the API stand-in, the images it holds by reference, the registry's digests by reference)."""
    held: dict[str, dict] = {}
    registry: dict[str, str] = {}

    class Api(_Api):
        def do_GET(self):  # noqa: N802 - http.server's name
            path = re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])
            m = re.fullmatch(r"/(images|distribution)/(.+)/json", path)
            ref = urllib.parse.unquote(m.group(2)) if m else ""
            if m and m.group(1) == "images" and ref in held:
                return self._json(200, held[ref])
            if m and m.group(1) == "distribution" and ref in registry:
                return self._json(200, {"Descriptor": {"digest": registry[ref], "size": 1}, "Platforms": []})
            if m:
                return self._json(404, {"message": f"No such image: {ref}"})
            return super().do_GET()

    sock = tmp_path / "docker.sock"
    server = _UnixServer(str(sock), Api)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    yield Engine("docker"), held, registry
    server.shutdown()
    server.server_close()


def facts(tmp_path, engine, flags=None, **kw):
    s = resolved(tmp_path, flags)
    return requests.base_facts(s, requests.checkout(s), engine, resolve=True, **kw)


def pulled(ref: str, digest: str, labels: dict[str, str] | None = None) -> dict:
    """An image inspect of an image pulled from its registry (RepoDigests of its own repository)."""
    name = ref.rsplit(":", 1)[0]
    return {"Id": ID, "RepoTags": [ref], "RepoDigests": [f"{name}@{digest}"], "Config": {"Labels": labels}}


def test_without_pull_base_image_is_the_local_copy_even_after_its_tag_moved(tmp_path, engine):
    eng, held, registry = engine
    held[BASE], registry[BASE] = pulled(BASE, LOCAL), MOVED
    local = facts(tmp_path, eng)
    assert (local.digest, local.pinnable) == (LOCAL, True)
    # --pull: the registry's digest, so the republished tag is seen before it is pulled.
    remote = facts(tmp_path, eng, from_registry=True)
    assert (remote.image, remote.digest, remote.pinnable) == (BASE, MOVED, True)


def test_with_pull_a_base_image_only_the_registry_holds_is_pinnable_by_its_digest(tmp_path, engine):
    eng, held, registry = engine
    registry[BASE] = MOVED
    local = facts(tmp_path, eng)
    assert (local.digest, local.pinnable) == (None, False)  # without --pull: not on the engine, no identity
    remote = facts(tmp_path, eng, from_registry=True)
    assert (remote.digest, remote.pinnable) == (MOVED, True)


def test_a_base_image_pinned_by_digest_is_that_digest_without_the_engine_holding_it(tmp_path, engine):
    eng, held, registry = engine
    got = facts(tmp_path, eng, {"base_image": f"{BASE}@{LOCAL}"})
    assert (got.image, got.digest, got.pinnable) == (f"{BASE}@{LOCAL}", LOCAL, True)


def test_the_base_images_rocm_base_labels_are_its_content_and_files_hash(tmp_path, engine):
    eng, held, registry = engine
    content, files = "d" * 64, "e" * 64
    held[BASE] = pulled(BASE, LOCAL, {base.CONTENT_HASH_LABEL: content, base.FILES_HASH_LABEL: files, "x": "y"})
    got = facts(tmp_path, eng)
    assert (got.content_hash, got.files_hash) == (content, files)
    # An image without them is one whose origin is unknown, not an error.
    held[BASE] = pulled(BASE, LOCAL)
    bare = facts(tmp_path, eng)
    assert (bare.digest, bare.content_hash, bare.files_hash) == (LOCAL, None, None)


def test_the_base_tier_is_the_checkouts_dockerfile_rocm_base_with_its_upstream_resolved_alike(tmp_path, engine):
    eng, held, registry = engine
    held[UPSTREAM] = pulled(UPSTREAM, LOCAL)
    registry[UPSTREAM] = MOVED
    tier = facts(tmp_path, eng).tier
    assert tier is not None and tier.path.samefile(SHARED_VLLM / base.BASE_DOCKERFILE)
    assert (tier.upstream, tier.upstream_digest, tier.upstream_pinnable) == (UPSTREAM, LOCAL, True)
    # The upstream is read the way BASE_IMAGE is: with --pull, the registry's digest.
    assert facts(tmp_path, eng, from_registry=True).tier.upstream_digest == MOVED


@pytest.mark.parametrize("pinned", [f"{BASE}@{LOCAL}", f"rocm/vllm-dev@{LOCAL}"])
def test_the_labels_of_a_base_image_pinned_by_digest_are_read_when_the_engine_holds_it(tmp_path, engine, pinned):
    # Pinned as refresh-base-image.sh pins the base tier's own BASE_IMAGE (name:tag@sha256:...), or by digest
    # alone: the content hash must still be seen, or a changed Dockerfile.rocm_base would never plan a rebuild.
    eng, held, registry = engine
    held[pinned] = pulled(BASE, LOCAL, {base.CONTENT_HASH_LABEL: "d" * 64, base.FILES_HASH_LABEL: "e" * 64})
    got = facts(tmp_path, eng, {"base_image": pinned})
    assert (got.image, got.digest, got.content_hash, got.files_hash) == (pinned, LOCAL, "d" * 64, "e" * 64)
