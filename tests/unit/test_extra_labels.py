"""Setting extra_labels (ROCMCI_EXTRA_LABELS): checked once, never a label rocmci or vLLM's CI owns."""

from __future__ import annotations

import pytest

from rocmci import labels
from rocmci.errors import UsageError
from rocmci.registry import BY_NAME
from rocmci.settings import convert

SETTING = BY_NAME["extra_labels"]


def test_pairs_become_labels():
    assert labels.extra("") == {}
    assert labels.extra("rocmci.test.run=abc,team=ci-1") == {"rocmci.test.run": "abc", "team": "ci-1"}


@pytest.mark.parametrize("key", [labels.MANAGED, labels.ARCH, labels.INPUT_HASH, labels.JOB, "vllm.rocm.x",
                                 "org.opencontainers.image.revision"])  # fmt: skip
def test_a_label_rocmci_or_vllm_owns_is_refused(key):
    with pytest.raises(ValueError, match="writes or reads itself"):
        labels.extra(f"{key}=1")


def test_a_key_given_twice_is_refused():
    with pytest.raises(ValueError, match="given twice"):
        labels.extra("a=1,a=2")


@pytest.mark.parametrize("raw", ["a b=1", "A=1", "-a=1", "a=1;b", "a=$(id)", "a", "a=1,", ",".join(["k=v"] * 9)])
def test_text_that_is_no_label_list_is_refused_where_it_is_read(raw):
    with pytest.raises(UsageError):
        convert(SETTING, raw, "env ROCMCI_EXTRA_LABELS")
    assert convert(SETTING, "k=v,rocmci.test.run=0f", "env ROCMCI_EXTRA_LABELS") == "k=v,rocmci.test.run=0f"


def test_every_tier_of_a_build_plan_carries_them(tmp_path):
    import shutil

    from tests.conftest import REPO, run_invoke

    tree = tmp_path / "vllm"
    shutil.copytree(REPO / "tests" / "data" / "vllm-standin", tree)
    env = {"ROCMCI_EXTRA_LABELS": "rocmci.test.run=0f1e,team=ci", "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    done = run_invoke("image.build", "--vllm-src", str(tree), "-n", env=env)
    assert done.returncode == 0, done.stderr
    tiers = done.stdout.count(" build \\\n")
    assert tiers == 2 and done.stdout.count("--label rocmci.test.run=0f1e") == tiers, done.stdout
    assert done.stdout.count("--label team=ci") == tiers
    reserved = {**env, "ROCMCI_EXTRA_LABELS": "rocmci.arch=x"}
    refused = run_invoke("image.build", "--vllm-src", str(tree), "-n", env=reserved)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "rocmci: setting 'extra_labels' (env ROCMCI_EXTRA_LABELS): 'rocmci.arch' is a label rocmci or vLLM's CI "
        "writes or reads itself; choose another key"
    ]
