"""A real build records the ROCm fixes its checkout applies, and the workaround registry reads them back.

Stand-in checkout (tests/data/vllm-standin, copied) whose Dockerfile.rocm_base gains an instruction naming
ROCm/rocm-systems#6942; the built images are removed afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO, run_invoke
from tests.integration.test_image_tiers import env, scratch  # noqa: F401 - a copied stand-in, images removed after

BUILT = re.compile(r"^built (\S+) \((\w+)\)", re.M)
ROCMCI = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]
FIX = "ROCm/rocm-systems#6942"


def rocmci(*args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    return subprocess.run([*ROCMCI, *args], cwd=REPO, env=clean, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip


def test_built_tiers_carry_the_fix_and_make_the_workaround_obsolete(engine, python_image, scratch):  # noqa: F811
    tree, repo = scratch
    path = tree / "docker" / "Dockerfile.rocm_base"
    path.write_text(path.read_text() + f'RUN echo "{FIX} backported" > /standin-fix\n')
    settings = env(repo)  # this run's labels: a suite beside this one builds another image, never this one
    done = run_invoke("image.build", "--vllm-src", str(tree), "--target", "base", env=settings)
    assert done.returncode == 0, done.stderr[-3000:]
    base_tag = {target: tag for tag, target in BUILT.findall(done.stderr)}["base"]
    tiers = run_invoke("image.build", "--vllm-src", str(tree), env={**settings, "ROCMCI_BASE_IMAGE": base_tag})
    assert tiers.returncode == 0, tiers.stderr[-3000:]
    built = {target: tag for tag, target in BUILT.findall(tiers.stderr)}
    assert set(built) == {"ci_base", "test"}
    for tag in (base_tag, built["ci_base"], built["test"]):
        assert engine.image_labels(tag)["rocmci.rocm.fixes"] == FIX, tag

    answer = rocmci("workarounds", "--image", built["test"])
    assert answer.returncode == 0, answer.stderr
    assert "rocprofiler-register-teardown: OBSOLETE" in answer.stdout
    assert f"evidence: label rocmci.rocm.fixes='{FIX}' on image {built['test']}" in answer.stdout
