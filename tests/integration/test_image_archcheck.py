"""The arch check that follows the build, against what the engine really builds (stand-in tree, BuildKit).

- a class the old check missed (a later ENV overriding DEEPEP_ROCM_ARCH in build_deepep) is refused before
  anything is built, at the ENV's line;
- a class the old check refused (the DeepEP build moved into a script under docker/ that the Dockerfile COPYs
  and runs with bash, using a bash-only substitution) builds, and the DeepEP check after the build confirms
  the requested list is what is inside.
The unfollowable class (eval) going to the evidence is tests/integration/test_image_build.py's
test_a_deepep_built_for_gfx942_under_a_gfx950_request_fails_the_build_at_the_deepep_check.
"""

from __future__ import annotations

import shutil

from tests.conftest import run_invoke
from tests.integration.test_image_build import env_for, standin  # noqa: F401 (the module's fixture)

STAGE = "FROM build_rocshmem AS build_deepep\n"
SCRIPT = """#!/bin/bash
set -euo pipefail
# DEEPEP_ROCM_ARCH comes as ';' or ',' separated; DeepEP's setup.py wants ';'
export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH//,/;}"
git clone "$1"
cd DeepEP
git checkout "$2"
python3 setup.py --variant rocm --rocm-explicit-ctx --nic "$3" --rocm-gfx942-fp8-fnuz-max 224 bdist_wheel \\
    --dist-dir=/app/deep_install
"""


def _copy(tree, tmp_path):
    out = tmp_path / "vllm"
    shutil.copytree(tree, out)
    return out, out / "docker" / "Dockerfile.rocm"


def test_a_later_env_override_is_refused_at_its_line_before_any_build(engine, standin, tmp_path):  # noqa: F811
    tree, repo = standin
    wrong, path = _copy(tree, tmp_path)
    text = path.read_text().replace(STAGE, STAGE + "ENV DEEPEP_ROCM_ARCH=gfx942\n")
    path.write_text(text)
    line = text.split("\n").index("ENV DEEPEP_ROCM_ARCH=gfx942") + 1
    checked = run_invoke("image.check", "--vllm-src", str(wrong), "--arch", "gfx950")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"docker/Dockerfile.rocm:{line}:5: error [deepep-arch-source]" in checked.stdout
    before = set(engine.cli("images", "-q", repo, check=False).stdout.split())
    done = run_invoke("image.build", "--vllm-src", str(wrong), "--arch", "gfx950", env=env_for(repo))
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rocmci: refusing to build for gfx950: docker/Dockerfile.rocm:{line}:5: error ")
    assert "Traceback" not in done.stderr
    assert set(engine.cli("images", "-q", repo, check=False).stdout.split()) == before  # nothing was built


def test_the_deepep_build_in_a_copied_bash_script_builds_what_was_asked(engine, standin, tmp_path):  # noqa: F811
    tree, repo = standin
    moved, path = _copy(tree, tmp_path)
    (moved / "docker" / "build_deepep.sh").write_text(SCRIPT)
    text = path.read_text()
    start = text.index('RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}"', text.index(STAGE))
    end = text.index("\n\n", start)
    text = text[:start] + (
        "COPY docker/build_deepep.sh /tmp/build_deepep.sh\n"
        'RUN bash /tmp/build_deepep.sh "${DEEPEP_REPO}" "${DEEPEP_BRANCH}" "${DEEPEP_NIC}"'
    ) + text[end:]
    path.write_text(text)
    checked = run_invoke("image.check", "--vllm-src", str(moved), "--arch", "gfx950")
    assert checked.returncode == 0 and "error" not in checked.stdout, checked.stdout
    done = run_invoke("image.build", "--vllm-src", str(moved), "--arch", "gfx950", "--target", "ci_base",
                      env=env_for(repo), timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ci_base = f"{repo}:ci-base-gfx950-vllm-gfx90a-gfx942-gfx950"
    assert f"checked {ci_base}: DeepEP code objects for gfx950, as requested" in done.stderr
