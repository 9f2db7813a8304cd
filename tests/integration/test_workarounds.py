"""`invoke workarounds --image`: the removal condition is checked against a real image."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.conftest import run_invoke


@pytest.fixture
def rocm_image(engine, busybox_image):
    made = []

    def make(fixes: str) -> str:
        tag = f"rocmci-test/rocm-facts:{uuid.uuid4().hex[:8]}"
        dockerfile = (
            f"FROM {busybox_image}\n"
            "RUN mkdir -p /opt/rocm/.info && echo 7.1.0-55 > /opt/rocm/.info/version\n"
            f'LABEL rocmci.rocm.fixes="{fixes}"\n'
        )
        done = subprocess.run(
            [engine.client, "build", "--network", "none", "-q", "-t", tag, "-"],
            input=dockerfile,
            env=engine.build_env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        made.append(tag)
        return tag

    yield make
    engine.cli("rmi", "-f", *made, check=False)


def test_a_workaround_is_stale_once_the_image_carries_the_fix(engine, rocm_image):
    fixed = rocm_image("ROCm/rocm-systems#6942")
    done = run_invoke("workarounds", "--image", fixed, "--strict")
    assert done.returncode == 1
    assert "STALE: the image declares ROCm/rocm-systems#6942" in done.stdout
    assert f"image {fixed}: ROCm 7.1.0-55" in done.stdout
    assert "stale workaround(s): rocprofiler-register-teardown, deepep-test-worker-os-exit" in done.stderr
    assert engine.containers("rocmci.managed=1") == []  # the version probe container is gone


def test_still_needed_without_the_fix(engine, rocm_image):
    unfixed = rocm_image("")
    done = run_invoke("workarounds", "--image", unfixed, "--strict", "--json")
    assert done.returncode == 0, done.stderr
    assert {row["id"]: row["status"] for row in json.loads(done.stdout)} == {
        "rocprofiler-register-teardown": "active",
        "deepep-test-worker-os-exit": "tracked (vllm)",
    }
