"""Image promises that a hand-made mutation once slipped past (issue 24); README "Mutation testing" maps each
mutation to the test here that now turns red.

The arch-flow checks read vLLM's real docker/Dockerfile.rocm (../shared/fixtures). The reuse/--force tests
build a one-line image on the real engine (marked docker) and look at what was built.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rocmci.image import build as buildmod
from rocmci.image import check as checkmod
from rocmci.image import retarget
from rocmci.image import vllm_dockerfile as vd
from rocmci.image.plan import INPUT_HASH_LABEL, BuildStep, plan_build
from tests.conftest import BUSYBOX_IMAGE
from tests.unit.test_image_plan import request as build_request

HARD_CODED = 'export PYTORCH_ROCM_ARCH="gfx942;gfx950"'
FIXED = 'export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}"'
DISPLAY = "docker/Dockerfile.rocm"


def findings(text: str, archs=("gfx942", "gfx950")) -> list:
    df = vd.parse(text, path=Path("/vllm") / DISPLAY, display=DISPLAY)
    return checkmod.check(df, checkmod.ArchRequest(archs, "--arch"))


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.fixture
def real(vllm_fixtures) -> str:
    return (vllm_fixtures / "docker" / "Dockerfile.rocm").read_text()


# --- the value the arch finding shows, and where ----------------------------------------------------------


def test_the_arch_finding_shows_the_hard_coded_value_and_both_lines(real):
    assert findings(real) == []  # the file's own list is what it hard-codes: DeepEP gets what was asked
    (finding,) = findings(real, ("gfx942",))
    export, setup = line_of(real, HARD_CODED), line_of(real, "python3 setup.py --variant rocm")
    assert (finding.file, finding.line, finding.rule) == (DISPLAY, export, "deepep-arch-source")
    assert finding.message == (
        f"DeepEP's setup.py (stage build_deepep, {DISPLAY}:{setup}) builds for gfx942;gfx950, not the requested "
        f"gfx942: PYTORCH_ROCM_ARCH is 'gfx942;gfx950' (from {DISPLAY}:{export})"
    )
    assert finding.col == real.splitlines()[export - 1].index(HARD_CODED) + len("export ") + 1


def test_the_arch_finding_shows_an_env_value_when_no_export_sets_it(real):
    text = real.replace(HARD_CODED + " \\\n && ", "").replace(
        "FROM build_rocshmem AS build_deepep\n", "FROM build_rocshmem AS build_deepep\nENV PYTORCH_ROCM_ARCH=gfx950\n"
    )
    (finding,) = findings(text)
    assert finding.line == line_of(text, "ENV PYTORCH_ROCM_ARCH=gfx950")
    assert "builds for gfx950, not the requested gfx942;gfx950: PYTORCH_ROCM_ARCH is 'gfx950'" in finding.message


# --- DEEPEP_ROCM_ARCH must be in scope where build_deepep uses it ------------------------------------------


def test_build_deepep_using_the_arg_outside_its_scope_is_a_finding(real):
    fixed = real.replace(HARD_CODED, FIXED)
    assert findings(fixed, ("gfx942",)) == []  # declared in build_rocshmem, which build_deepep is built FROM
    orphan = fixed.replace("FROM build_rocshmem AS build_deepep", "FROM base AS build_deepep")
    assert findings(orphan) == []  # empty: DeepEP's own default, which is the list asked for
    (finding,) = findings(orphan, ("gfx942",))
    assert (finding.rule, finding.line) == ("deepep-arch-source", line_of(orphan, FIXED))
    assert "PYTORCH_ROCM_ARCH is empty (setup.py's default gfx942;gfx950)" in finding.message
    redeclared = orphan.replace("FROM base AS build_deepep", "FROM base AS build_deepep\nARG DEEPEP_ROCM_ARCH")
    assert findings(redeclared, ("gfx942",)) == []


# --- --force and the input hash reach the plan -----------------------------------------------------------


@pytest.fixture
def tree(vllm_docker_tree) -> Path:
    return vllm_docker_tree


def test_force_reaches_every_planned_step(tree):
    assert {s.force for s in plan_build(build_request(tree)).steps} == {False}
    assert {s.force for s in plan_build(build_request(tree, force=True)).steps} == {True}


def _retarget(**given) -> retarget.RetargetRequest:
    values = dict(
        from_image="rocm/vllm-ci:build-1",
        from_identity="sha256:" + "a" * 64,
        archs=("gfx942",),
        pins={"DEEPEP_BRANCH": "0f63d3e9"},
        setup_flags=(),
        sources={},
        image_repo="rocmci/vllm-rocm",
    )
    values.update(given)
    return retarget.RetargetRequest(**values)


def test_retarget_hash_follows_the_from_images_identity_and_force_reaches_it():
    overlay = retarget.OVERLAY.read_text()
    same = retarget.plan_retarget(_retarget(), overlay).step
    assert retarget.plan_retarget(_retarget(), overlay).step.input_hash == same.input_hash
    rebuilt = retarget.plan_retarget(_retarget(from_identity="sha256:" + "b" * 64), overlay).step
    assert rebuilt.input_hash != same.input_hash  # the same tag, rebuilt: a new input
    assert rebuilt.labels[INPUT_HASH_LABEL] == rebuilt.input_hash
    assert (same.force, retarget.plan_retarget(_retarget(force=True), overlay).step.force) == (False, True)


# --- on the real engine: an image is reused only when its input hash matches, and --force rebuilds ---------


@pytest.mark.docker
def test_reuse_needs_the_same_input_hash_and_force_always_builds(engine, busybox_image, tmp_path):
    (tmp_path / "Dockerfile").write_text(f"FROM {BUSYBOX_IMAGE}\nRUN echo built > /built\n")
    tag = f"rocmci-test/guards:{uuid.uuid4().hex[:10]}"

    def step(input_hash: str, force: bool = False) -> BuildStep:
        return BuildStep(
            target="guard", tag=tag, dockerfile=tmp_path / "Dockerfile", context=tmp_path, build_args={},
            labels={INPUT_HASH_LABEL: input_hash}, input_hash=input_hash, network="none", push=False,
            force=force, stage=None,
        )  # fmt: skip

    said: list[str] = []
    try:
        assert buildmod.build_step(step("1111"), engine, live=False, log=said.append).built
        assert not buildmod.build_step(step("1111"), engine, live=False, log=said.append).built
        assert said == [f"{tag} is up to date ({INPUT_HASH_LABEL} 1111); nothing to build (--force rebuilds)"]
        assert buildmod.build_step(step("1111", force=True), engine, live=False, log=said.append).built
        assert buildmod.build_step(step("2222"), engine, live=False, log=said.append).built  # other inputs
        assert engine.image_labels(tag)[INPUT_HASH_LABEL] == "2222"
    finally:
        engine.cli("rmi", "-f", tag, check=False)
