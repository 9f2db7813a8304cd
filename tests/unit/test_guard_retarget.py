"""image.retarget (issue 35): pins come from the --from image's labels unless a flag or setting says otherwise, and
an arch the --from image's vLLM lacks is refused (src/rocmci/image/requests.py retarget_request).

Real parts: the labels are the ones vLLM's own ci-bake-rocm.sh writes for vLLM's real Dockerfile.rocm (sourced and
run, as test_guard_images does), the checkout is vLLM's fixture, the settings go through the one registry.
docs/guards.md maps each test to the mutation it was watched to kill.
"""

from __future__ import annotations

import pytest

from rocmci import labels as label
from rocmci import settings
from rocmci.errors import UsageError
from rocmci.image import requests
from tests.conftest import SHARED_VLLM
from tests.unit.test_guard_images import BAKE, bake_labels

pytestmark = pytest.mark.skipif(not BAKE.is_file(), reason=f"{BAKE} not found (shared fixtures beside the repo)")
FROM = "rocm/vllm-ci:0123abcd"
OLDER = "a9ea9774"  # an earlier DeepEP pin than the fixture Dockerfile's


def request(tmp_path, labels, *, flags=None, env=None):
    s = settings.resolve(tmp_path, flags={"vllm_src": str(SHARED_VLLM), **(flags or {})}, env=env or {}, pyproject={})
    co = requests.checkout(s)
    return requests.retarget_request(
        s, co, from_image=FROM, from_identity="sha256:" + "1" * 64, tag=None, force=False, from_labels=labels
    )


@pytest.fixture(scope="module")
def baked(tmp_path_factory) -> dict[str, str]:
    """The labels of a ci_base vLLM's CI builds from the fixture checkout's Dockerfile.rocm."""
    return bake_labels(tmp_path_factory.mktemp("bake"))


@pytest.fixture
def ci_labels(baked) -> dict[str, str]:
    """An image vLLM's CI built a while ago: its DeepEP pin older than the checkout's."""
    assert baked[label.VLLM_DEEPEP_COMMIT] != OLDER
    return {**baked, label.VLLM_DEEPEP_COMMIT: OLDER}


def test_pins_come_from_the_from_images_labels(tmp_path, ci_labels):
    got = request(tmp_path, ci_labels, flags={"arch": "gfx950"})
    assert got.pins["DEEPEP_BRANCH"] == OLDER
    assert got.sources["DEEPEP_BRANCH"] == f"image label {label.VLLM_DEEPEP_COMMIT}"
    for arg, key in (("DEEPEP_REPO", label.VLLM_DEEPEP_REPO), ("ROCSHMEM_BRANCH", label.VLLM_ROCSHMEM_COMMIT),
                     ("ROCSHMEM_REPO", label.VLLM_ROCSHMEM_REPO), ("DEEPEP_NIC", label.VLLM_DEEPEP_NIC)):  # fmt: skip
        assert (got.pins[arg], got.sources[arg]) == (ci_labels[key], f"image label {key}"), arg
    assert any(
        n.startswith(f"DEEPEP_BRANCH: the image's label {label.VLLM_DEEPEP_COMMIT}={OLDER} wins") for n in got.notes
    )
    # rocmci's own label, where an image carries both, is read first.
    own = request(tmp_path, {**ci_labels, label.DEEPEP_REF: "5d90af8b"}, flags={"arch": "gfx950"})
    assert (own.pins["DEEPEP_BRANCH"], own.sources["DEEPEP_BRANCH"]) == ("5d90af8b", f"image label {label.DEEPEP_REF}")


def test_a_flag_or_a_setting_wins_over_the_images_labels(tmp_path, ci_labels):
    flag = request(tmp_path, ci_labels, flags={"arch": "gfx950", "deepep_ref": "5d90af8b"})
    assert flag.pins["DEEPEP_BRANCH"] == "5d90af8b" and flag.sources["DEEPEP_BRANCH"].startswith("flag ")
    assert any(f"wins over the image's label {label.VLLM_DEEPEP_COMMIT}={OLDER}" in n for n in flag.notes)
    env = request(tmp_path, ci_labels, flags={"arch": "gfx950"}, env={"ROCMCI_DEEPEP_REF": "e84464ec"})
    assert env.pins["DEEPEP_BRANCH"] == "e84464ec" and env.sources["DEEPEP_BRANCH"] == "env ROCMCI_DEEPEP_REF"


def test_without_labels_the_checkouts_pins_are_used(tmp_path, baked):
    none = request(tmp_path, None, flags={"arch": "gfx950"})
    assert none.pins["DEEPEP_BRANCH"] == baked[label.VLLM_DEEPEP_COMMIT]  # the Dockerfile's ARG, as vLLM's bake
    assert not none.sources["DEEPEP_BRANCH"].startswith("image label")
    assert not any("vLLM arch label" in n for n in none.notes)  # nothing to say about an image not read


@pytest.mark.parametrize("key", [label.VLLM_ARCH, label.VLLM_PYTORCH_ARCH])
def test_an_arch_the_from_images_vllm_lacks_is_refused(tmp_path, ci_labels, key):
    labels = {**ci_labels, key: "gfx942"}
    with pytest.raises(UsageError, match=r"has vLLM kernels for gfx942 \(label " + key + r"\), not for gfx950"):
        request(tmp_path, labels, flags={"arch": "gfx942,gfx950"})
    assert request(tmp_path, labels, flags={"arch": "gfx942"}).archs == ("gfx942",)
    covered = request(tmp_path, {**ci_labels, key: "gfx942;gfx950"}, flags={"arch": "gfx950"})
    assert covered.archs == ("gfx950",)


def test_rocmcis_vllm_arch_label_is_read_before_vllms(tmp_path, ci_labels):
    both = {**ci_labels, label.VLLM_ARCH: "gfx950", label.VLLM_PYTORCH_ARCH: "gfx942"}
    assert request(tmp_path, both, flags={"arch": "gfx950"}).archs == ("gfx950",)


def test_an_image_without_a_vllm_arch_label_is_a_note_not_a_pass(tmp_path, ci_labels):
    got = request(tmp_path, ci_labels, flags={"arch": "gfx950"})
    assert any("has no vLLM arch label" in n for n in got.notes)
    bare = request(tmp_path, {}, flags={"arch": "gfx950"})  # an image read, with no labels at all
    assert any(f"{FROM} has no vLLM arch label" in n for n in bare.notes)
