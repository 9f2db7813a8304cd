"""Issue 31's smaller items: a dry run without an engine still plans (the base tier too) and says what it could
not check; the OCI revision label is the commit git knows, local changes in a label of their own."""

from __future__ import annotations

import shutil
import subprocess

from rocmci.image.requests import vllm_commit, vllm_dirty
from tests.conftest import REPO, run_invoke

STANDIN = REPO / "tests" / "data" / "vllm-standin"


def test_target_base_dry_run_without_an_engine_plans_the_base_tier(tmp_path):
    tree = tmp_path / "vllm"
    shutil.copytree(STANDIN, tree)
    env = {"DOCKER_HOST": f"unix://{tmp_path}/none.sock", "CI": "true"}
    done = run_invoke("image.build", "--vllm-src", str(tree), "--target", "base", "-n", env=env)
    assert done.returncode == 0, done.stderr
    assert "holds no" not in done.stderr and f"--file {tree}/docker/Dockerfile.rocm_base" in done.stdout
    assert done.stdout.splitlines()[0].startswith("# preflight: not checked: the Docker engine is not running")
    assert "vllm.rocm_base.content_hash=unknown-without-the-upstream-digest" in done.stdout
    test = run_invoke("image.build", "--vllm-src", str(tree), "-n", env=env)
    assert test.returncode == 0 and test.stdout.startswith("# preflight: not checked:")
    assert "--target ci_base" in test.stdout and "--target test" in test.stdout


def test_the_revision_is_the_commit_and_local_changes_are_their_own_label(tmp_path):
    tree = tmp_path / "vllm"
    shutil.copytree(STANDIN, tree)
    assert (vllm_commit(tree), vllm_dirty(tree)) == ("unknown (not a git checkout)", None)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tree)]
    subprocess.run([*git, "init", "-q"], check=True, timeout=60)
    subprocess.run([*git, "add", "-A"], check=True, timeout=60)
    subprocess.run([*git, "commit", "-qm", "vllm"], check=True, timeout=60)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert (vllm_commit(tree), vllm_dirty(tree)) == (head, False)
    (tree / "setup.py").write_text("# changed\n")
    assert (vllm_commit(tree), vllm_dirty(tree)) == (head, True)  # never "<sha>-dirty"
    env = {"DOCKER_HOST": f"unix://{tmp_path}/none.sock", "CI": "true"}
    dry = run_invoke("image.build", "--vllm-src", str(tree), "-n", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"org.opencontainers.image.revision={head}" in dry.stdout and "rocmci.vllm.dirty=true" in dry.stdout
