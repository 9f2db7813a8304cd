"""vLLM's own CI images as first-class run images, on the real engine (issue 20, "Done when").

Two stand-ins: one labelled as vLLM's CI labels its images (no rocmci.* label, tests staged under
/opt/vllm-ci/workspace), one with no label at all whose DeepEP code objects say its archs.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.conftest import REPO, RUN_ID, SHARED_VLLM, run_invoke
from tests.integration.helpers import STANDIN, moe, results_of, run_env


def _build(engine, dockerfile: str, base: str) -> str:
    tag = f"rocmci-test/{dockerfile.lower().replace('dockerfile.', '')}:{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [engine.client, "build", "--network", "none", "-q", "-f", str(STANDIN / dockerfile), "-t", tag,
         "--build-arg", f"BASE_IMAGE={base}", "--label", f"test.run={RUN_ID}", str(STANDIN)],
        env=engine.build_env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tag


def _containers_of(engine, image: str) -> list[str]:
    """Containers of this image, running or not. The image carries this run's id in a label outside rocmci's
    names, so a suite beside this one, whose same build would otherwise be the same image, has its own."""
    return engine.cli("ps", "-aq", "--filter", f"ancestor={image}").stdout.split()


@pytest.fixture(scope="module")
def vllm_ci_image(engine, python_image):
    tag = _build(engine, "Dockerfile.vllm-ci", python_image)
    yield tag
    engine.cli("rmi", "-f", tag, check=False)


@pytest.fixture(scope="module")
def unlabelled_image(engine, python_image):
    tag = _build(engine, "Dockerfile.codeobjects", python_image)
    yield tag
    engine.cli("rmi", "-f", tag, check=False)


def moe_text(fake_host, *args: str) -> tuple[str, ...]:
    """A dry run whose text form the test reads (with --json a dry run prints JSON)."""
    return tuple(a for a in moe(fake_host, *args) if a != "--json")


def test_a_vllm_ci_image_is_accepted_with_the_arch_from_vllms_label(engine, vllm_ci_image, fake_host, workdir):
    labels = engine.image_labels(vllm_ci_image)
    assert not [k for k in labels if k.startswith("rocmci.")]
    done = run_invoke(*moe_text(fake_host, "--dry-run", "--image", vllm_ci_image), env=run_env(vllm_ci_image, workdir))
    assert done.returncode == 0, done.stderr
    assert (
        f"# image {vllm_ci_image}: DeepEP built for gfx942;gfx950 (label vllm.rocm.deepep_rocm_arch, declared: no "
        "rocmci.evidence.deepep-arch (code objects not verified)); "
        "ROCm 7.2.1 (label vllm.rocm_base.dependency.rocm)"
    ) in done.stdout
    assert "preflight" not in done.stdout  # the fake host's gfx942 GPUs are covered: no warning at all


def test_run_step_dry_run_in_a_vllm_ci_image(engine, vllm_ci_image, fake_host, workdir):
    if not SHARED_VLLM.is_dir():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    done = run_invoke(
        "run.step", "--source", str(SHARED_VLLM / "test-amd.yaml"), "--step", "Kernels FP8 MoE Test (2xH100-2xMI300)",
        "--dry-run", "--image", vllm_ci_image, "--host-root", str(fake_host),
        env=run_env(vllm_ci_image, workdir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = f"# image {vllm_ci_image}: DeepEP built for gfx942;gfx950 (label vllm.rocm.deepep_rocm_arch, declared"
    assert shown in done.stdout


def test_staged_tests_run_in_a_vllm_ci_image(engine, vllm_ci_image, fake_host, workdir):
    """The image keeps its tests under /opt/vllm-ci/workspace: they are copied to /vllm-workspace and run."""
    done = run_invoke(
        *moe(fake_host, "--mode", "low-latency", "--image", vllm_ci_image), env=run_env(vllm_ci_image, workdir)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = results_of(done).values()
    assert (result["outcome"], result["junit"]["tests"]) == ("passed", 4)
    assert _containers_of(engine, vllm_ci_image) == []


def test_an_image_without_labels_gets_its_arch_from_its_code_objects(engine, unlabelled_image, fake_host, workdir):
    assert engine.image_labels(unlabelled_image) == {} or not any(
        k in engine.image_labels(unlabelled_image) for k in ("rocmci.arch", "vllm.rocm.deepep_rocm_arch")
    )
    args = moe_text(fake_host, "--dry-run", "--image", unlabelled_image)
    done = run_invoke(*args, env=run_env(unlabelled_image, workdir))
    assert done.returncode == 0, done.stderr
    assert f"# image {unlabelled_image}: DeepEP built for gfx942;gfx950 (code objects of 1 DeepEP libraries)" in (
        done.stdout
    )


def test_build_id_names_the_ci_image_and_a_missing_image_is_pulled(engine, fake_host, workdir):
    """--build-id N means rocm/vllm-ci:build-N; a dry run says it would pull it (no network here)."""
    done = run_invoke(*moe_text(fake_host, "--dry-run", "--build-id", "4711"), env={**run_env("unused", workdir)})
    assert "# dry run: would pull rocm/vllm-ci:build-4711" in done.stdout
    assert "rocm/vllm-ci:build-4711 \\" in done.stdout or "rocm/vllm-ci:build-4711" in done.stdout
    assert REPO.is_dir()


def test_image_inspect_shows_vllms_labels_and_rocm_version(engine, vllm_ci_image):
    done = run_invoke("image.inspect", "--tag", vllm_ci_image)
    assert done.returncode == 0, done.stderr
    rows = {line.split("  ")[0].strip(): line for line in done.stdout.splitlines() if "  " in line}
    assert "gfx942;gfx950" in rows["vLLM CI: DeepEP archs"]
    assert "7.2.1 (vllm.rocm_base.dependency.rocm)" in rows["ROCm version"]  # not metadata_version's "1"


def test_workaround_evidence_comes_from_the_tests_inside_the_image(engine, standin_image, fake_host, tmp_path):
    """The checkout says the fix is in (module clean, recipe applies it), but the image that will run
    still sets the variable in its conftest.py: the workaround applies, with the image as evidence."""
    from tests.functional.test_host_runs import vllm_tree

    if not SHARED_VLLM.is_dir():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    fixed = vllm_tree(tmp_path / "vllm", in_test_workaround=False)
    tag = f"rocmci-test/old-tests:{uuid.uuid4().hex[:8]}"
    dockerfile = (
        f"FROM {standin_image}\n"
        "RUN printf 'import os\\nos.environ.setdefault(\\n    \"ROCPROFILER_REGISTER_ENABLED\", \"0\")\\n'"
        " >> /vllm-workspace/tests/conftest.py\n"
    )
    built = subprocess.run([engine.client, "build", "--network", "none", "-q", "-t", tag, "-"], input=dockerfile,
                           env=engine.build_env, capture_output=True, text=True, check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr
    try:
        env = run_env(tag, tmp_path)
        old = run_invoke(*moe_text(fake_host, "--dry-run", "--vllm-src", str(fixed), "--image", tag), env=env)
        new = run_invoke(*moe_text(fake_host, "--dry-run", "--vllm-src", str(fixed), "--image", standin_image), env=env)
    finally:
        engine.cli("rmi", "-f", tag, check=False)
    assert old.returncode == 0 and new.returncode == 0, old.stderr + new.stderr
    applied = "applied to moe-tests [high-throughput] (ROCPROFILER_REGISTER_ENABLED=0): "
    assert f"{applied}{tag}:/vllm-workspace/tests/conftest.py:" in old.stdout
    left_out = "NOT applied (ROCPROFILER_REGISTER_ENABLED=0 not set): obsolete: "
    assert f"{left_out}{standin_image}:/vllm-workspace/tests/kernels/moe/test_deepep_moe.py (and the conftest" in (
        new.stdout
    )
