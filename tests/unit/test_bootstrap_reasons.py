"""bootstrap.decide names a few matching files per reason and counts the rest: a million matching files make
a handful of reason lines, not a million, and the same decision."""

from __future__ import annotations

from rocmci.pipeline import bootstrap

MILLION = 10**6


def test_a_million_matching_files_make_a_few_reason_lines_and_the_same_decision():
    paths = [f"csrc/k{i}.cu" for i in range(MILLION)] + [f"docker/Dockerfile.rocm_base.{i}" for i in range(MILLION)]
    decision = bootstrap.decide(bootstrap.Request(changed=paths, labels=(), pull_request=True))
    shown = bootstrap.REASONS_SHOWN
    lines = len(decision.reasons)  # counted first: a failure then shows a number, not two million lines
    assert lines == 2 * shown + 3
    assert decision.reasons == (
        *(f"run_all: csrc/k{i}.cu changed (pattern csrc/)" for i in range(shown)),
        *(f"nightly: docker/Dockerfile.rocm_base.{i} changed (pattern docker/Dockerfile.rocm_base)"
          for i in range(shown)),
        f"nightly: and {MILLION - shown:,} more changed files like these",
        f"run_all: and {MILLION - shown:,} more changed files like these",
        "fail_fast true: a PR without the label ci-no-fail-fast",
    )  # fmt: skip
    inputs = decision.inputs
    assert (inputs.run_all, inputs.nightly, inputs.list_file_diff, inputs.vllm_use_precompiled) == (
        "1", "1", "run_all", "0",
    )  # fmt: skip


def test_few_matching_files_are_each_named_and_nothing_is_counted():
    paths = ["vllm/a.py", *(f"csrc/{i}.cu" for i in range(bootstrap.REASONS_SHOWN)), "csrc/cpu/x.cpp"]
    decision = bootstrap.decide(bootstrap.Request(changed=paths))
    assert decision.reasons == tuple(f"run_all: csrc/{i}.cu changed (pattern csrc/)" for i in range(5))
    assert (decision.inputs.run_all, decision.inputs.nightly) == ("1", "0")


def test_a_nightly_file_after_many_run_all_files_still_sets_nightly():
    paths = [f"csrc/{i}.cu" for i in range(1000)] + ["docker/Dockerfile.rocm_base"]
    decision = bootstrap.decide(bootstrap.Request(changed=paths))
    assert (decision.inputs.run_all, decision.inputs.nightly) == ("1", "1")
    assert decision.reasons[-2:] == (
        "nightly: docker/Dockerfile.rocm_base changed (pattern docker/Dockerfile.rocm_base)",
        "run_all: and 995 more changed files like these",
    )
