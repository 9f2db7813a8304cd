"""The arch check that follows the build, against what the engine really builds (stand-in tree, BuildKit).

- a class the old check missed (a later ENV overriding DEEPEP_ROCM_ARCH in build_deepep) is refused before
  anything is built, at the ENV's line;
- a class the old check refused (the DeepEP build moved into a script under docker/ that the Dockerfile COPYs
  and runs with bash, using a bash-only substitution) builds, and the DeepEP check after the build confirms
  the requested list is what is inside.
And one case of each other class issue 31 names, missed (refused at its line, nothing built) or refused by the
old check (built, the evidence confirming gfx950). The unfollowable class (eval) going to the evidence is
tests/integration/test_image_build.py's
test_a_deepep_built_for_gfx942_under_a_gfx950_request_fails_the_build_at_the_deepep_check.
"""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import run_invoke
from tests.integration.test_image_build import env_for, standin  # noqa: F401 (the module's fixture)
from tests.integration.test_image_tiers import case_label

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


# Issue 31's other classes on the stand-in, each through the real `image.build` for gfx950. `edit` turns the
# stand-in's Dockerfile.rocm into the class; `at` is a text on the line the refusal must name.
DEEPEP_RUN = 'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" \\'
SECOND_STAGE = (
    "FROM build_rocshmem AS build_deepep_942\n"
    'RUN export PYTORCH_ROCM_ARCH="gfx942" \\\n'
    " && python3 setup.py --variant rocm bdist_wheel --dist-dir=/app/deep_install\n\n"
)
MISSED = {
    "reassigned-in-the-run": (
        lambda t: t.replace(DEEPEP_RUN, "RUN DEEPEP_ROCM_ARCH=gfx942 && " + DEEPEP_RUN.removeprefix("RUN ")),
        "RUN DEEPEP_ROCM_ARCH=gfx942",
    ),
    "a-second-deepep-stage-that-ci_base-installs": (
        lambda t: t.replace("FROM base AS mori_base\n", SECOND_STAGE + "FROM base AS mori_base\n").replace(
            "from=build_deepep,src=/app/deep_install", "from=build_deepep_942,src=/app/deep_install"),
        'RUN export PYTORCH_ROCM_ARCH="gfx942"',
    ),
    "bash-only-substitution-under-sh": (
        lambda t: t.replace(DEEPEP_RUN, 'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH//,/;}" \\'),
        "${DEEPEP_ROCM_ARCH//,/;}",
    ),
    "single-quoted-literal": (
        lambda t: t.replace(DEEPEP_RUN, "RUN export PYTORCH_ROCM_ARCH='${DEEPEP_ROCM_ARCH}' \\"),
        "PYTORCH_ROCM_ARCH='${DEEPEP_ROCM_ARCH}'",
    ),
}


@pytest.mark.parametrize("case", sorted(MISSED))
def test_each_missed_class_is_refused_at_its_line_before_any_build(engine, standin, tmp_path, case):  # noqa: F811
    tree, repo = standin
    wrong, path = _copy(tree, tmp_path)
    edit, at = MISSED[case]
    text = edit(path.read_text())
    assert text != path.read_text(), "the edit did not apply to the stand-in"
    path.write_text(text)
    line = next(n for n, row in enumerate(text.split("\n"), 1) if at in row)
    before = set(engine.cli("images", "-q", "--filter", f"label={case_label(repo)}", check=False).stdout.split())
    done = run_invoke("image.build", "--vllm-src", str(wrong), "--arch", "gfx950", env=env_for(repo))
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rocmci: refusing to build for gfx950: docker/Dockerfile.rocm:{line}:"), last
    assert "Traceback" not in done.stderr and "built " not in done.stderr
    after = set(engine.cli("images", "-q", "--filter", f"label={case_label(repo)}", check=False).stdout.split())
    assert after == before  # nothing was built


BUILDS = {
    # A later ARG default loses to the build argument rocmci passes: the build is right, so it is not refused.
    "a-later-arg-default": lambda t: t.replace(STAGE, STAGE + "ARG DEEPEP_ROCM_ARCH=gfx942\n"),
    # rocSHMEM's GPU_TARGETS through an env file the build writes and sources.
    "gpu-targets-from-a-generated-env-file": lambda t: t.replace(
        "ENV ROCSHMEM_DIR=/opt/rocshmem\n",
        'ENV ROCSHMEM_DIR=/opt/rocshmem\nRUN echo "GPU_TARGETS=${DEEPEP_ROCM_ARCH}" > /opt/rocshmem-arch.env\n',
    ).replace(" && git checkout ${ROCSHMEM_BRANCH} \\",
              " && git checkout ${ROCSHMEM_BRANCH} && . /opt/rocshmem-arch.env \\")
    .replace('-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', '-DGPU_TARGETS="${GPU_TARGETS}"'),
}


@pytest.mark.parametrize("case", sorted(BUILDS))
def test_each_class_the_old_check_refused_builds_what_was_asked(engine, standin, tmp_path, case):  # noqa: F811
    tree, repo = standin
    moved, path = _copy(tree, tmp_path)
    text = BUILDS[case](path.read_text())
    assert text != path.read_text(), "the edit did not apply to the stand-in"
    path.write_text(text)
    done = run_invoke("image.build", "--vllm-src", str(moved), "--arch", "gfx950", "--target", "ci_base",
                      env=env_for(repo), timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ci_base = f"{repo}:ci-base-gfx950-vllm-gfx90a-gfx942-gfx950"
    # The evidence, read inside the result: DeepEP's code objects (and rocSHMEM's libraries) are gfx950's.
    assert f"checked {ci_base}: DeepEP code objects for gfx950, as requested" in done.stderr
