"""`invoke workarounds --image`: image labels as evidence, on a real image."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.conftest import RUN_SELECTOR, run_invoke
from tests.integration.helpers import leftovers


@pytest.fixture
def labelled_image(engine, busybox_image):
    made = []

    def make(fixes: str) -> str:
        tag = f"rocmci-test/rocm-facts:{uuid.uuid4().hex[:8]}"
        dockerfile = f'FROM {busybox_image}\nLABEL rocmci.rocm.fixes="{fixes}" {RUN_SELECTOR}\n'
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


def test_obsolete_once_the_image_declares_the_fix(engine, labelled_image):
    fixed = labelled_image("ROCm/rocm-systems#6942")
    done = run_invoke("workarounds", "--image", fixed, "--strict")
    assert done.returncode == 1
    assert "rocprofiler-register-teardown: OBSOLETE" in done.stdout
    assert f"    evidence: label rocmci.rocm.fixes='ROCm/rocm-systems#6942' on image {fixed}" in done.stdout
    assert done.stderr.strip().startswith("rocmci: obsolete workaround(s): rocprofiler-register-teardown.")
    assert leftovers(engine) == []  # no probe container of this run's images is left


def test_applies_while_the_image_does_not(engine, labelled_image):
    unfixed = labelled_image("")
    done = run_invoke("workarounds", "--image", unfixed, "--strict", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert (row["id"], row["status"]) == ("rocprofiler-register-teardown", "applies")
    assert row["evidence"] == [f"image {unfixed}: no ROCm/rocm-systems#6942 in label rocmci.rocm.fixes"] or row[
        "evidence"
    ] == [f"image {unfixed} has no label rocmci.rocm.fixes"]


def test_a_run_leaves_out_a_workaround_the_image_makes_obsolete(engine, labelled_image, fake_host, workdir):
    from tests.integration.helpers import moe, run_env

    fixed = labelled_image("ROCm/rocm-systems#6942")
    args = [a for a in moe(fake_host, "--mode", "high-throughput", "--dry-run") if a != "--json"]  # the text form
    done = run_invoke(*args, env=run_env(fixed, workdir))
    assert done.returncode == 0, done.stderr
    assert (
        "# workaround rocprofiler-register-teardown NOT applied (ROCPROFILER_REGISTER_ENABLED=0 not set)" in done.stdout
    )
    assert "ROCPROFILER_REGISTER_ENABLED=0 \\" not in done.stdout
