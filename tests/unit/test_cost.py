"""Cost (issue 32, class 7): checking a workaround registry reads each Dockerfile once and checks each distinct
condition once, whatever the registry's size; the one-pass search answers exactly as the per-line rule does."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmci import fixes
from rocmci.runs import workarounds as wa

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None,
                    derandomize=True)  # fmt: skip


def _entry(i: int, fix: str) -> wa.Workaround:
    dockerfile = wa.Condition("vllm_dockerfile_applies", path="docker/Dockerfile.rocm_base", fix=fix, where=f"w:{i}")
    tests = wa.Condition("vllm_tests_do_not_set", path="tests/t.py", variable="X", where=f"w:{i}")
    return wa.Workaround(
        id=f"w-{i}", applied_by="rocmci", sets={}, platform="rocm", workloads=("moe-tests",), tests=(), why="", refs=(),
        remove_when=(wa.Condition("all_of", parts=(tests, dockerfile), where=f"w:{i}"),),
    )  # fmt: skip


def test_a_big_registry_reads_the_dockerfile_once_and_each_distinct_condition_once(tmp_path, monkeypatch):
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile.rocm_base").write_text(
        "FROM x\n# ROCm/rocm-systems#7003 in a comment does not count\nRUN git apply 7001.diff  # rocm-systems#7002\n"
        "RUN curl https://github.com/ROCm/rocm-systems/pull/7001.diff | git apply\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("import os\n")
    built, reads = [], []
    real_instructions, real_read = fixes.Instructions, wa._read
    monkeypatch.setattr(fixes, "Instructions", lambda text: built.append(1) or real_instructions(text))
    monkeypatch.setattr(wa, "_read", lambda src, rel: reads.append(rel) or real_read(src, rel))
    registry = [_entry(i, f"ROCm/rocm-systems#{7000 + i % 50}") for i in range(2000)]
    checks = wa.check_all(registry, wa.Sources(vllm_src=tmp_path))
    assert (len(built), reads) == (1, ["docker/Dockerfile.rocm_base"])
    obsolete = {c.workaround.id for c in checks if c.status == wa.OBSOLETE}
    assert obsolete == {f"w-{i}" for i in range(2000) if i % 50 == 1}  # 7001 only: 7002/7003 are comments
    first = next(c for c in checks if c.workaround.id == "w-1")
    assert "Dockerfile.rocm_base:4: an instruction applies ROCm/rocm-systems#7001" in first.evidence[0]


WORDS = st.sampled_from(["rocm-systems#12", "rocm-systems#123", "ROCM-SYSTEMS/pull/12", "rocm-systems/issues/12",
                         "#", " #", "\t#", "x", " ", "\r", "\u0130", "12", "RUN ", "\n", "rocm-systems#1"])  # fmt: skip


@SETTINGS
@given(st.lists(WORDS, max_size=30), st.sampled_from(["ROCm/rocm-systems#12", "ROCm/rocm-systems#1"]))
def test_the_one_pass_search_answers_as_the_per_line_rule(words, fix):
    text = "".join(words)
    expected = None
    for number, raw in enumerate(fixes.dockerfile_lines(text), 1):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        for marker in (" #", "\t#"):
            cut = line.find(marker)
            if cut != -1:
                line = line[:cut]
        if fixes.names_fix(line, fix):
            expected = number
            break
    assert fixes.dockerfile_names_fix(text, fix) == expected
