"""Evidence after every build (issue 31): which tiers get the DeepEP code-object check, what it runs, how it judges.

The check itself through the real engine is in tests/integration/test_image_build.py.
"""

from __future__ import annotations

import json

import pytest

from rocmci import packaged
from rocmci.errors import BuildError
from rocmci.image import evidence
from rocmci.image.evidence import DeepEPCheck
from rocmci.image.plan import plan_build
from tests.unit.test_image_plan import request, tree  # noqa: F401 (tree: the fixture of vLLM's real docker/)

IN_FILE = "stage build_deepep of docker/Dockerfile.rocm"
ROCSHMEM_IN_FILE = "stage build_rocshmem of docker/Dockerfile.rocm"


def test_every_tier_holding_deepep_is_checked_against_the_requested_list(tree):  # noqa: F811
    ci_base, test = plan_build(request(tree, archs=("gfx950",))).steps
    assert ci_base.deepep_check == DeepEPCheck("gfx950", IN_FILE, rocshmem_stage=ROCSHMEM_IN_FILE)  # built there
    assert test.deepep_check == DeepEPCheck("gfx950", f"{IN_FILE}, in ci_base {ci_base.tag}",
                                            rocshmem_stage=f"{ROCSHMEM_IN_FILE}, in ci_base {ci_base.tag}")
    (given,) = plan_build(request(tree, ci_base_image="rocm/vllm-dev:ci_base")).steps
    check = given.deepep_check
    assert (check.archs, check.stage) == ("gfx942;gfx950", "the given ci_base rocm/vllm-dev:ci_base")
    assert "--ci-base" in check.fix
    (only,) = plan_build(request(tree, target="ci_base")).steps
    assert only.deepep_check == DeepEPCheck("gfx942;gfx950", IN_FILE, rocshmem_stage=ROCSHMEM_IN_FILE)
    (final,) = plan_build(request(tree, target="final")).steps  # vLLM's final stage holds no DeepEP
    assert final.deepep_check is None


def test_the_check_runs_the_packaged_verifier_on_stdin_without_network():
    check = DeepEPCheck("gfx942;gfx950", IN_FILE)
    assert evidence.argv("docker", "r/x:t", check) == [
        "docker", "run", "--rm", "-i", "--network", "none", "--label", "rocmci.managed=1", "--entrypoint", "python3",
        "r/x:t", "-", "--expect", "gfx942;gfx950",
    ]  # fmt: skip
    assert evidence.script() == packaged.VERIFIER.read_text()
    assert str(packaged.VERIFIER) in evidence.comment("r/x:t", check) and "untagged" in evidence.comment("r/x:t", check)


def answer(found: list[str], ok: bool, error: str | None = None) -> str:
    return "noise\n" + json.dumps({"ok": ok, "found": found, "libraries": ["x.so"], "error": error}) + "\n"


def test_a_mismatch_names_the_stage_and_both_lists():
    check = DeepEPCheck("gfx950", IN_FILE)
    assert evidence.judge(answer(["gfx950"], True), 0, "r/x:t", check) == ["gfx950"]
    with pytest.raises(BuildError) as raised:
        evidence.judge(answer(["gfx942"], False, "code objects are for ['gfx942']"), 1, "r/x:t", check)
    assert raised.value.message == (
        "r/x:t was built but its DeepEP code objects are for gfx942, not the requested gfx950 "
        "(DeepEP is built by stage build_deepep of docker/Dockerfile.rocm)"
    )
    assert raised.value.exit_code == 4 and "DEEPEP_ROCM_ARCH" in raised.value.hint
    # The verifier's own verdict is not the only judge: a list other than the requested one never passes.
    with pytest.raises(BuildError, match="are for gfx942;gfx950, not the requested gfx950"):
        evidence.judge(answer(["gfx942", "gfx950"], True), 0, "r/x:t", check)
    with pytest.raises(BuildError, match=r"DeepEP does not check out \(import deep_ep failed: boom\)"):
        evidence.judge(answer([], False, "import deep_ep failed: boom"), 1, "r/x:t", check)
    with pytest.raises(BuildError, match="the DeepEP check gave no answer .verifier exit 127"):
        evidence.judge("python3: not found\n", 127, "r/x:t", check)


def test_rocshmem_targets_other_than_the_requested_list_name_the_rocshmem_stage():
    check = DeepEPCheck("gfx942;gfx950", IN_FILE, rocshmem_stage=ROCSHMEM_IN_FILE)

    def with_rocshmem(found, libraries=("/opt/rocshmem/lib/librocshmem.so",), error=None) -> str:
        roc = {"libraries": list(libraries), "found": found, "error": error}
        return json.dumps({"ok": True, "found": ["gfx942", "gfx950"], "libraries": ["x.so"], "rocshmem": roc})

    assert evidence.judge(with_rocshmem(["gfx942", "gfx950"]), 0, "r/x:t", check) == ["gfx942", "gfx950"]
    assert evidence.judge(with_rocshmem([], libraries=()), 0, "r/x:t", check)  # a static build: no verdict
    with pytest.raises(BuildError) as raised:
        evidence.judge(with_rocshmem(["gfx942"]), 0, "r/x:t", check)
    assert raised.value.message == (
        "r/x:t was built but its rocSHMEM code objects are for gfx942, not the requested gfx942;gfx950 "
        "(rocSHMEM is built by stage build_rocshmem of docker/Dockerfile.rocm)"
    )
    with pytest.raises(BuildError, match="rocSHMEM's libraries could not be read .roc-obj-ls exited 1"):
        evidence.judge(with_rocshmem([], error="roc-obj-ls exited 1"), 0, "r/x:t", check)
