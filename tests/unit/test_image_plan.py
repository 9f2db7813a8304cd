"""The build plan (pure) against vLLM's real Dockerfile, the refusal rule, and BuildKit progress parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.errors import UsageError
from rocmci.image import check as checkmod
from rocmci.image import context, requests
from rocmci.image import vllm_dockerfile as vd
from rocmci.image.build import ProgressParser
from rocmci.image.plan import BuildRequest, image_tag, plan_build
from tests.conftest import REPO

STANDIN = REPO / "tests" / "data" / "vllm-standin"
HARD_CODED = 'export PYTORCH_ROCM_ARCH="gfx942;gfx950"'


@pytest.fixture
def tree(vllm_docker_tree) -> Path:
    return vllm_docker_tree


def request(tree: Path, **overrides) -> BuildRequest:
    values = dict(
        checkout=tree,
        dockerfile=vd.load(tree),
        archs=("gfx942", "gfx950"),
        vllm_archs=("gfx90a", "gfx942", "gfx950"),
        pins={"rocmci.deepep.ref": "0f63d3e9"},
        overrides={},
        image_repo="rocmci/vllm-rocm",
        vllm_commit="abc",
    )
    values.update(overrides)
    return BuildRequest(**values)


def test_test_target_is_tiered_on_ci_base_like_vllms_scripts(tree):
    plan = plan_build(request(tree))
    base, test = plan.steps
    assert (base.target, test.target) == ("ci_base", "test")
    argv = test.argv("/usr/bin/docker")
    assert argv[:8] == ["/usr/bin/docker", "build", "--file", str(tree / "docker/Dockerfile.rocm"), "--target", "test",
                        "--tag", "rocmci/vllm-rocm:test-gfx942-gfx950-vllm-gfx90a-gfx942-gfx950"]
    for arg in ("DEEPEP_ROCM_ARCH=gfx942;gfx950", "ARG_PYTORCH_ROCM_ARCH=gfx90a;gfx942;gfx950", "REMOTE_VLLM=0",
                f"CI_BASE_IMAGE={base.tag}"):
        assert argv[argv.index(arg) - 1] == "--build-arg"
    assert f"rocmci.input-hash={test.input_hash}" in argv and "rocmci.deepep.ref=0f63d3e9" in argv
    assert argv[-1] == str(tree) and f"CI_BASE_IMAGE={base.tag}" not in base.argv("docker")


def test_a_given_ci_base_is_not_built(tree):
    plan = plan_build(request(tree, ci_base_image="rocm/vllm-dev:ci_base"))
    assert [s.target for s in plan.steps] == ["test"]
    assert plan.steps[0].build_args["CI_BASE_IMAGE"] == "rocm/vllm-dev:ci_base"
    assert [s.target for s in plan_build(request(tree, target="final")).steps] == ["final"]


def test_input_hash_follows_copied_files_and_args_only(tree):
    first = plan_build(request(tree)).steps
    (tree / "docs.md").write_text("not copied by ci_base")
    again = plan_build(request(tree)).steps
    assert again[0].input_hash == first[0].input_hash  # ci_base copies named files only
    assert again[1].input_hash != first[1].input_hash  # test copies the whole tree (ONBUILD COPY ./ vllm/)
    (tree / "requirements/rocm.txt").write_text("changed")
    assert plan_build(request(tree)).steps[0].input_hash != first[0].input_hash
    other_arch = plan_build(request(tree, archs=("gfx950",))).steps
    assert other_arch[0].input_hash != first[0].input_hash and other_arch[1].input_hash != again[1].input_hash


def test_context_sources_of_ci_base(tree):
    df = vd.load(tree)
    stages = df.reachable("ci_base", {"REMOTE_VLLM": "0"})
    assert context.sources(df, stages, df.defaults()) == (
        "requirements/common.txt", "requirements/rocm.txt", "requirements/test/rocm.txt", "rust-toolchain.toml",
        "tests/vllm_test_utils", "tools/install_protoc.sh", "tools/install_torchcodec_rocm.sh",
    )


def test_dockerignore_keeps_files_out_of_the_hash(tmp_path):
    (tmp_path / "a").write_text("1")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "x").write_text("1")
    before = context.digest(tmp_path, (".",))
    (tmp_path / ".dockerignore").write_text("build\n")
    ignored = context.digest(tmp_path, (".",))
    (tmp_path / "build" / "x").write_text("2")
    assert context.digest(tmp_path, (".",)) == ignored != before


def test_unknown_target_and_unsupported_arch(tree):
    with pytest.raises(UsageError, match="choose one of base, ci_base, test, final"):
        plan_build(request(tree, target="everything"))
    with pytest.raises(UsageError, match="cannot target gfx90a"):
        plan_build(request(tree, archs=("gfx90a", "gfx942")))


def test_tag_says_target_and_archs():
    assert image_tag("r/x", "ci_base", ("gfx942",), None) == "r/x:ci-base-gfx942"
    assert image_tag("r/x", "test", ("gfx942",), ("gfx942",)) == "r/x:test-gfx942"


def _refusal(tree, archs):
    co = requests.Checkout(tree, vd.load(tree))
    req = checkmod.ArchRequest(archs, "--arch", ("gfx90a", "gfx942", "gfx950"), "bake")
    return requests.refusal(co, req, checkmod.check(co.dockerfile, req))


def test_non_default_list_is_refused_only_while_the_flow_is_broken(tree):
    assert _refusal(tree, ("gfx942", "gfx950")) is None  # the default builds what vLLM builds
    refused = _refusal(tree, ("gfx942",))
    assert refused is not None and refused.exit_code == 1
    assert "refusing to build for gfx942: docker/Dockerfile.rocm:505:12: error [deepep-arch-source]" in refused.message
    path = tree / "docker/Dockerfile.rocm"
    path.write_text(path.read_text().replace(HARD_CODED, 'export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}"'))
    assert _refusal(tree, ("gfx942",)) is None


def test_standin_tree_has_vllms_stage_names_and_arg_names(vllm_fixtures):
    real, standin = vd.load(vllm_fixtures.parent / "vllm"), vd.load(STANDIN)
    names = {"build_rocshmem", "build_deepep", "ci_base", "test", "final", "csrc-build", "build_vllm", "export_vllm"}
    assert names <= {s.name for s in real.stages} and names <= {s.name for s in standin.stages}
    for arg in ("DEEPEP_ROCM_ARCH", "DEEPEP_BRANCH", "DEEPEP_REPO", "DEEPEP_NIC", "ROCSHMEM_BRANCH", "CI_BASE_IMAGE",
                "BASE_IMAGE", "REMOTE_VLLM"):
        assert real.arg(arg).stage == standin.arg(arg).stage, arg
    assert standin.stage("test").base == real.stage("test").base == "${CI_BASE_IMAGE}"
    assert vd.deepep_setup_call(standin).flags == vd.deepep_setup_call(real).flags


def test_progress_parser_names_the_failing_step_and_counts_cached_ones():
    parser = ProgressParser()
    for line in [
        "#3 [internal] load build context",
        "#3 DONE 0.1s",
        "#4 [final 2/3] RUN make",
        "#4 CACHED",
        "#6 [final 1/3] COPY a b",
        "#6 DONE 0.0s",
        "#5 [final 3/3] RUN exit 3",
        "#5 0.20 about to fail",
        "#5 ERROR: executor failed running [/bin/sh -c exit 3]: exit code: 3",
    ]:
        parser.feed(line)
    assert parser.counts() == (1, 1)
    error = parser.failure(1, None)
    assert error.message == (
        "build failed at [final 3/3] RUN exit 3: executor failed running [/bin/sh -c exit 3]: exit code: 3"
    )
    assert error.hint == "last lines: about to fail"


def test_a_pin_in_vllms_dockerfile_obeys_the_same_rule_as_a_flag(tree):
    """A value read from vLLM's file reaches a docker command line too: the registry's rule holds for it."""
    from rocmci.settings import resolve

    dockerfile = tree / "docker" / "Dockerfile.rocm"
    pinned = 'ARG DEEPEP_REPO="https://github.com/ROCm/DeepEP.git"'
    text = dockerfile.read_text()
    assert pinned in text
    dockerfile.write_text(text.replace(pinned, 'ARG DEEPEP_REPO="--upload-pack=x"'))
    s = resolve(flags={"vllm_src": str(tree)})
    with pytest.raises(UsageError, match=r"deepep_repo.*Dockerfile\.rocm:496.*starts with '-'"):
        requests.pins(s)
