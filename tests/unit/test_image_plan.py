from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.errors import UsageError
from rocmci.image.build import ProgressParser
from rocmci.image.plan import BuildRequest, image_tag, input_hash, plan_build

ARGS = {"DEEPEP_BRANCH": "5d90af8b", "ROCSHMEM_BRANCH": "f0acb0c6", "BASE_IMAGE": "rocm/vllm-dev:base"}


def request(**overrides) -> BuildRequest:
    values = dict(
        dockerfile=Path("docker/Dockerfile.rocm"),
        context=Path("docker"),
        archs=("gfx942", "gfx950"),
        build_args=dict(ARGS),
        image_repo="rocmci/vllm-rocm",
    )
    values.update(overrides)
    return BuildRequest(**values)


def test_plan_passes_the_arch_list_as_one_argument():
    plan = plan_build(request(), "FROM x\n")
    argv = plan.argv("docker")
    assert argv[:2] == ["docker", "build"]
    i = argv.index("DEEPEP_ROCM_ARCH=gfx942;gfx950")
    assert argv[i - 1] == "--build-arg"
    assert f"ROCMCI_INPUT_HASH={plan.input_hash}" in argv
    assert plan.tag == "rocmci/vllm-rocm:deepep-5d90af8b-gfx942-gfx950"
    assert argv[-1] == "docker" and "--progress" in argv


def test_input_hash_follows_every_input():
    base = plan_build(request(), "FROM x\n").input_hash
    assert plan_build(request(), "FROM x\n").input_hash == base
    assert plan_build(request(), "FROM y\n").input_hash != base
    assert plan_build(request(archs=("gfx942",)), "FROM x\n").input_hash != base
    assert plan_build(request(build_args={**ARGS, "DEEPEP_BRANCH": "0f63d3e9"}), "FROM x\n").input_hash != base
    assert plan_build(request(target="deepep"), "FROM x\n").input_hash != base
    assert input_hash("a", {"K": "v", "ROCMCI_INPUT_HASH": "1"}, "t") == input_hash("a", {"K": "v"}, "t")


def test_unsupported_arch_is_refused_by_the_planner_too():
    with pytest.raises(UsageError, match="cannot target gfx90a"):
        plan_build(request(archs=("gfx90a", "gfx942")), "")


def test_vllm_archs_may_add_but_not_drop():
    plan = plan_build(request(vllm_archs=("gfx90a", "gfx942", "gfx950")), "")
    assert plan.build_args["VLLM_PYTORCH_ROCM_ARCH"] == "gfx90a;gfx942;gfx950"
    assert plan.tag.endswith("-vllm-gfx90a-gfx942-gfx950")
    with pytest.raises(UsageError, match="lacks gfx950"):
        plan_build(request(vllm_archs=("gfx942",)), "")


def test_local_vllm_source_changes_context_and_hash(tmp_path):
    plan = plan_build(request(vllm_src=tmp_path, vllm_src_revision="abc-dirty"), "")
    assert plan.context == tmp_path and plan.build_args["VLLM_SOURCE"] == "local"
    other = plan_build(request(vllm_src=tmp_path, vllm_src_revision="abc"), "")
    assert other.input_hash != plan.input_hash


def test_unknown_target_names_the_choices():
    with pytest.raises(UsageError, match="choose one of final, rocshmem"):
        plan_build(request(target="everything"), "")


def test_tag_is_safe_for_odd_refs():
    assert image_tag("r/x", "feature/branch name", ("gfx942",), None) == "r/x:deepep-feature-bran-gfx942"


def test_progress_parser_names_the_failing_step():
    parser = ProgressParser()
    for line in [
        "#4 [final 2/3] RUN make",
        "#4 sha256:abc",
        "#4 0.10 compiling",
        "#5 [final 3/3] RUN exit 3",
        "#5 0.20 about to fail",
        "#5 ERROR: executor failed running [/bin/sh -c exit 3]: exit code: 3",
    ]:
        parser.feed(line)
    error = parser.failure(1, None)
    assert (
        error.message
        == "build failed at [final 3/3] RUN exit 3: executor failed running [/bin/sh -c exit 3]: exit code: 3"
    )
    assert error.hint == "last lines: about to fail"
