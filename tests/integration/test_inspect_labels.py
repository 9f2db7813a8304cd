"""image.inspect never prints a credential found in an image's labels (issue 32, class 1): a real image on the
real engine, with a secret-named label, a password in an scp-like git address and in an ssh URL."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

CANARY = "hunter2canary9f"
PROGRAM = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]


@pytest.fixture
def labelled_image(engine, busybox_image, tmp_path):
    tag = f"rocmci-test/inspect-labels:{uuid.uuid4().hex[:12]}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {busybox_image}\n"
        f'LABEL rocmci.test.owner="test_inspect_labels" GITHUB_TOKEN="{CANARY}" '
        f'org.example.password="{CANARY}" rocmci.deepep.repo="bob:{CANARY}@github.com:ROCm/DeepEP.git" '
        f'rocmci.rocshmem.repo="ssh://bob:{CANARY}@host/rocm-systems" rocmci.arch="gfx942"\n'
    )
    done = subprocess.run([engine.client, "build", "--network", "none", "-q", "-t", tag, str(tmp_path)],
                          env=engine.build_env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    yield tag
    subprocess.run([engine.client, "rmi", "-f", tag], capture_output=True, timeout=120, check=False)


@pytest.mark.parametrize("as_json", [False, True])
def test_inspect_masks_credentials_in_labels(labelled_image, tmp_path, as_json):
    done = subprocess.run([*PROGRAM, "image.inspect", "--tag", labelled_image, *(["--json"] if as_json else [])],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert CANARY not in done.stdout + done.stderr
    if as_json:
        labels = json.loads(done.stdout)["labels"]
        assert labels["GITHUB_TOKEN"] == labels["org.example.password"] == "***"
        assert labels["rocmci.deepep.repo"] == "bob:***@github.com:ROCm/DeepEP.git"
        assert labels["rocmci.rocshmem.repo"] == "ssh://***@host/rocm-systems"
        assert labels["rocmci.arch"] == "gfx942"
