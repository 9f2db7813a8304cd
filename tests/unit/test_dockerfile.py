"""vLLM's real docker/Dockerfile.rocm (../shared/fixtures/vllm): what rocmci reads from it, and the arch-flow check."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rocmci.errors import InputError, UsageError
from rocmci.image import check as checkmod
from rocmci.image import vllm_dockerfile as vd

HARD_CODED = 'export PYTORCH_ROCM_ARCH="gfx942;gfx950"'
FIXED = 'export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}"'


@pytest.fixture
def tree(vllm_fixtures, tmp_path) -> Path:
    """A vLLM-shaped checkout: the real docker/ folder, a setup.py, and the real CI scripts."""
    shutil.copytree(vllm_fixtures / "docker", tmp_path / "docker")
    shutil.copytree(vllm_fixtures / "buildkite", tmp_path / ".buildkite")
    (tmp_path / "setup.py").write_text("# stand-in\n")
    return tmp_path


def request(archs=("gfx942", "gfx950"), vllm=("gfx90a", "gfx942", "gfx950")) -> checkmod.ArchRequest:
    return checkmod.ArchRequest(archs, "--arch", vllm, "bake", ("docker/docker-bake-rocm.hcl", 23))


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_pins_and_flags_are_read_from_vllms_file_with_their_lines(tree):
    values = vd.CheckoutValues(tree)
    dockerfile = tree / "docker" / "Dockerfile.rocm"
    value, source = values.read("ARG:DEEPEP_BRANCH")
    assert value == re.search(r'ARG DEEPEP_BRANCH="(\w+)"', dockerfile.read_text()).group(1)
    assert source.endswith(f"docker/Dockerfile.rocm:{line_of(dockerfile, 'ARG DEEPEP_BRANCH=')} (ARG DEEPEP_BRANCH)")
    assert values.read("ARG:ROCSHMEM_BRANCH")[0] == re.search(r'ROCSHMEM_BRANCH="(\w+)"', dockerfile.read_text())[1]
    assert values.read("ARG:DEEPEP_ROCM_ARCH")[0] == "gfx942;gfx950"
    assert values.read("ARG:CI_BASE_IMAGE")[0] == "rocm/vllm-dev:ci_base"
    flags, source = values.read("deepep-flags")
    assert flags == "--rocm-explicit-ctx --rocm-gfx942-fp8-fnuz-max 224"
    assert source.endswith(f":{line_of(dockerfile, 'python3 setup.py --variant rocm')} (build_deepep setup.py)")
    assert values.read("bake:PYTORCH_ROCM_ARCH")[0] == "gfx90a;gfx942;gfx950"
    assert values.read("ARG:NO_SUCH_ARG") == (None, f"unset: no ARG NO_SUCH_ARG=... in {values.shown(vd.DOCKERFILE)}")


def test_ci_base_stages_match_vllms_own_list(tree):
    """ci-bake-rocm.sh hashes these stages for ci_base; rocmci's graph walk must find the same ones."""
    script = (tree / ".buildkite" / "scripts" / "ci-bake-rocm.sh").read_text()
    theirs = set(re.search(r'DEFAULT_CI_BASE_DOCKERFILE_STAGES="([^"]+)"', script).group(1).split())
    df = vd.load(tree)
    mine = {s.name for s in df.reachable("ci_base", {"REMOTE_VLLM": "0"})}
    remote = {s.name for s in df.reachable("ci_base", {"REMOTE_VLLM": "1"})}
    assert mine | remote == theirs  # theirs lists both the local and the remote input variant
    assert "rust_toolchain_input_1" not in mine and "csrc-build" not in mine


def test_test_stage_is_tier_two_on_ci_base_image(tree):
    df = vd.load(tree)
    assert df.stage("test").base == "${CI_BASE_IMAGE}"
    names = [s.name for s in df.reachable("test", {"REMOTE_VLLM": "0"})]
    assert "ci_base" not in names and "build_deepep" not in names and "csrc-build" in names


def test_check_points_at_the_hard_coded_export_in_build_deepep(tree):
    path = tree / "docker" / "Dockerfile.rocm"
    assert checkmod.check(vd.load(tree), request()) == []  # the hard-coded list is the one asked for
    findings = checkmod.check(vd.load(tree), request(archs=("gfx942",)))
    assert [f.rule for f in findings] == ["deepep-arch-source"]
    line = line_of(path, HARD_CODED)
    col = path.read_text().splitlines()[line - 1].index("PYTORCH_ROCM_ARCH=") + 1
    assert findings[0].text().startswith(f"docker/Dockerfile.rocm:{line}:{col}: error [deepep-arch-source] ")
    assert "builds for gfx942;gfx950, not the requested gfx942" in findings[0].message
    assert findings[0].fix.startswith(FIXED)


def test_fixed_copy_is_whole(tree):
    path = tree / "docker" / "Dockerfile.rocm"
    path.write_text(path.read_text().replace(HARD_CODED, FIXED))
    df = vd.load(tree)
    assert checkmod.check(df, request()) == []
    assert checkmod.summary(df, request()).startswith("docker/Dockerfile.rocm: arch flow whole")


@pytest.mark.parametrize(
    ("old", "new", "anchor"),
    [
        ('-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', "-DCMAKE_BUILD_TYPE=Release", "build_configs/all_backends"),
        ('-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', '-DGPU_TARGETS="gfx942"', "-DGPU_TARGETS"),
        ('ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"', "# no ARG", "-DGPU_TARGETS"),
    ],
    ids=["no-gpu-targets", "hard-coded-gpu-targets", "arg-not-declared"],
)
def test_rocshmem_rules(tree, old, new, anchor):
    path = tree / "docker" / "Dockerfile.rocm"
    path.write_text(path.read_text().replace(HARD_CODED, FIXED).replace(old, new))
    findings = checkmod.check(vd.load(tree), request())
    assert findings[0].rule == "rocshmem-gpu-targets"
    assert findings[0].line == line_of(path, anchor)


def test_unsupported_arch_and_vllm_superset_and_offload(tree):
    path = tree / "docker" / "Dockerfile.rocm"
    text = path.read_text().replace(HARD_CODED, FIXED)
    offload = 'ENV ROCSHMEM_DIR=/opt/rocshmem CXXFLAGS="--offload-arch=gfx942;gfx950"'
    text = text.replace("ENV ROCSHMEM_DIR=/opt/rocshmem", offload)
    path.write_text(text)
    df = vd.load(tree)
    findings = checkmod.check(df, request(archs=("gfx90a", "gfx942"), vllm=("gfx950",)))
    by_rule = {f.rule: f for f in findings}
    assert set(by_rule) == {"deepep-unsupported-arch", "vllm-arch-superset", "offload-arch-multi"}
    assert by_rule["deepep-unsupported-arch"].line == line_of(path, 'ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"')
    assert "gfx90a (MI210/MI250/MI250X)" in by_rule["deepep-unsupported-arch"].message
    superset = by_rule["vllm-arch-superset"]
    assert (superset.file, superset.line) == ("docker/docker-bake-rocm.hcl", 23)
    assert by_rule["offload-arch-multi"].line == line_of(path, "CXXFLAGS=")


def test_deepep_supported_list_matches_deepeps_setup_py(vllm_fixtures):
    from rocmci.arch import DEEPEP_ARCHS, DEEPEP_DEFAULT_ARCHS

    setup = (vllm_fixtures.parent / "deepep" / "setup.py").read_text()
    allowed = set(re.findall(r'"(gfx\w+)"', re.search(r"allowed_arch = \{([^}]*)\}", setup).group(1)))
    default = re.findall(r'"(gfx\w+)"', re.search(r"arch_list = \[([^\]]*)\]", setup).group(1))
    assert set(DEEPEP_ARCHS) == allowed and list(DEEPEP_DEFAULT_ARCHS) == default


def test_bad_dockerfiles_are_one_line_errors(tmp_path):
    (tmp_path / "docker").mkdir()
    with pytest.raises(UsageError, match="holds no docker/Dockerfile.rocm"):
        vd.load(tmp_path)
    (tmp_path / "docker" / "Dockerfile.rocm").write_text('ARG X=1\nFROM a AS s\nARG X=2\n')
    df = vd.load(tmp_path)
    with pytest.raises(InputError, match=r"docker/Dockerfile.rocm:3: ARG X has a second default '2'") as err:
        df.arg("X")
    assert "\n" not in err.value.one_line()
    (tmp_path / "docker" / "Dockerfile.rocm").write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="cannot read"):
        vd.load(tmp_path)
