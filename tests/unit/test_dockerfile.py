"""docker/Dockerfile.rocm: one arch list, and it reaches rocSHMEM and DeepEP alike."""

from __future__ import annotations

import re

from rocmci.image.dockerfile import arg_defaults, logical_lines
from tests.conftest import REPO

DOCKERFILE = REPO / "docker" / "Dockerfile.rocm"


def stages() -> dict[str, list[str]]:
    """Instructions of each stage, by stage name; '' holds those before the first FROM."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for _, instruction in logical_lines(DOCKERFILE.read_text()):
        words = instruction.split()
        if words[0].upper() == "FROM":
            current = words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else words[1]
            out[current] = []
        out[current].append(instruction)
    return out


def run_lines(stage: str) -> list[str]:
    return [i for i in stages()[stage] if i.startswith("RUN")]


def declares(stage: str, name: str) -> bool:
    return any(re.fullmatch(rf"ARG {name}(=.*)?", i) for i in stages()[stage])


def test_default_arch_list_is_declared_once():
    decl = arg_defaults(DOCKERFILE)["DEEPEP_ROCM_ARCH"]
    assert decl.default == "gfx942;gfx950" and decl.stage is None


def test_arch_reaches_rocshmem_gpu_targets():
    (build,) = [r for r in run_lines("rocshmem") if "all_backends" in r]
    assert "bash ../scripts/build_configs/all_backends" in build
    assert '-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"' in build
    assert "-DUSE_EXTERNAL_MPI=OFF" in build
    for flag in ("BUILD_FUNCTIONAL_TESTS", "BUILD_UNIT_TESTS", "BUILD_EXAMPLES", "BUILD_CTESTS"):
        assert f"-D{flag}=OFF" in build
    assert declares("rocshmem", "DEEPEP_ROCM_ARCH")


def test_arch_reaches_deepep_pytorch_rocm_arch():
    (build,) = [r for r in run_lines("deepep") if "setup.py" in r]
    assert 'PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}"' in build
    assert '--variant rocm --nic "${DEEPEP_NIC}"' in build
    assert declares("deepep", "DEEPEP_ROCM_ARCH")


def test_vllm_defaults_to_the_same_list():
    (build,) = [r for r in run_lines("vllm-build") if "setup.py" in r]
    assert 'PYTORCH_ROCM_ARCH="${VLLM_PYTORCH_ROCM_ARCH:-${DEEPEP_ROCM_ARCH}}"' in build


def test_no_other_arch_list_is_hard_coded():
    hits = []
    for number, line in enumerate(DOCKERFILE.read_text().splitlines(), start=1):
        if not line.lstrip().startswith("#") and re.search(r"gfx\d", line):
            hits.append(number)
    assert hits == [arg_defaults(DOCKERFILE)["DEEPEP_ROCM_ARCH"].line]


def test_every_stage_that_uses_an_arg_declares_it():
    for stage, instructions in stages().items():
        if not stage:
            continue
        body = " ".join(i for i in instructions if not i.startswith(("ARG", "FROM")))
        for name in set(re.findall(r"\$\{(\w+)", body)):
            if name in ("LD_LIBRARY_PATH",):
                continue  # comes from the base image's environment
            assert declares(stage, name), f"stage {stage} uses ${{{name}}} without ARG {name}"


def test_labels_record_what_is_inside():
    final = " ".join(stages()["final"])
    for label in ("rocmci.arch", "rocmci.deepep.ref", "rocmci.rocshmem.ref", "rocmci.base-image", "rocmci.input-hash"):
        assert f"{label}=" in final
