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
