"""Inputs of 10^6 characters or lines through the patterns and loops that read outside text (issue 22).

Each input is built to make a backtracking pattern restart at every position, or a nested loop run its full
product; each test asserts the answer (not a time) and runs under a generous hang guard of 20 s. Secrets'
shapes have their own cases in test_secrets.py; workarounds' patterns are the runs tests' business.
"""

from __future__ import annotations

import signal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocmci import arch
from rocmci.errors import UsageError
from rocmci.pipeline import bootstrap, generate, rules, service
from rocmci.pipeline.bootstrap import TemplateInputs
from rocmci.pipeline.source import SourceStep

MILLION = 10**6


@pytest.fixture(autouse=True)
def hang_guard():
    def hung(signum, frame):
        raise AssertionError("no answer within 20 s on a 10^6-sized input: quadratic or worse")

    old = signal.signal(signal.SIGALRM, hung)  # re checks for signals while it matches: the alarm interrupts it
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_ci_image_with_many_variables_is_answered():
    # Before: the variable's name and the text after it shared letters, so a failed match tried every split of
    # every $VAR: 'x' + '$AAAA' * 25 + '!' did not finish (exponential).
    assert service._CI_IMAGE.fullmatch("x" + "$AAAA" * 25 + "!") is None
    assert service._CI_IMAGE.fullmatch("x" + "$AAAAb" * (MILLION // 6) + "!") is None
    assert service._CI_IMAGE.fullmatch("x" + "$AAAAb" * (MILLION // 6))
    for good in ("rocm/vllm-ci:build-$BUILDKITE_BUILD_ID", "r/i:${BUILDKITE_COMMIT}-rocm", "r/i:$A$B_c.d"):
        assert service._CI_IMAGE.fullmatch(good), good
    for bad in ("r/i:$lower", "-r/i", "r/i tag", "r/i:${A"):
        assert not service._CI_IMAGE.fullmatch(bad) or bad == "r/i:${A", bad  # '${A' unclosed stays allowed


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (" -tp" + " " * MILLION + "x", 0),
        (" -tp 2" * (MILLION // 6), 2),
        ("python x.py -tp 2 -dp 4 " + "&&" * (MILLION // 2), 8),
        ("-dp=" + "-dp=" * (MILLION // 4), 0),
        (" --tensor-parallel-size " + "1" * 18 + " -dp 1", int("1" * 18)),
    ],
    ids=["spaces", "many-tp", "many-parts", "dp-equals", "18-digits"],
)
def test_parallel_size_on_a_million_characters(text, size):
    assert rules.parallel_size(text) == size


def test_parallel_size_refuses_a_long_number_by_its_flag():
    with pytest.raises(UsageError, match=r"^--data-parallel-size is a 1000000-digit number"):
        rules.parallel_size("vllm serve --data-parallel-size " + "7" * MILLION)


def test_interpolation_and_pool_names_on_a_million_characters():
    assert len(list(rules.INTERPOLATION.finditer("${" * (MILLION // 2)))) == 1
    assert len(list(rules.INTERPOLATION.finditer("a$" * (MILLION // 2)))) == MILLION // 2 - 1  # every "$a"
    assert rules.near_pools("mi" + "1" * MILLION + "!", ["mi300_1"]) == []
    assert rules.near_pools("mi300_" + "4" * MILLION, ["mi300_4"]) == []  # not a GPU count: no traceback
    assert rules.near_pools("mi300_3", ["mi300_4"]) == ["mi300_4"]


def test_arch_lists_on_a_million_characters_and_their_errors_stay_short():
    assert arch.parse_arch_list("gfx942;" * (MILLION // 7)) == ("gfx942",)
    for text in ("gfx942;" * (MILLION // 7) + "!", "gfx99999;" * (MILLION // 9), "gfx942:xnack-" * 1000):
        with pytest.raises(UsageError) as err:
            arch.parse_arch_list(text)
        assert len(err.value.one_line()) < 300


def step(deps, dind=None):
    data = {"label": "s", "mirror_hardwares": ["amdproduction"], "source_file_dependencies": deps}
    if dind is not None:
        data["dind"] = dind
    return SourceStep(0, data, "f.yaml:1:1")


def naive_first(changed, prefix):
    return next((f for f in changed if f and f[: len(prefix)] == prefix), None)


@settings(max_examples=300, derandomize=True, database=None)
@given(
    st.lists(st.text(alphabet="ab/", max_size=4), max_size=12),
    st.lists(st.text(alphabet="ab/", max_size=3), min_size=1, max_size=4),
)
@example(["", "a", "ab", "b"], [""])
@example(["b/a", "a/b", "a/"], ["a/", "a"])
def test_the_changed_files_index_finds_what_the_scan_found(changed, prefixes):
    index = generate.ChangedFiles(changed)
    for prefix in prefixes:
        assert index.first_with_prefix(prefix) == naive_first(changed, prefix)
        assert (prefix in index) == (prefix in changed)
    assert list(index) == changed


def test_a_million_changed_files_are_decided_for_every_step():
    # Before: steps x dependencies x files (110 s for vLLM's file and 1,000,000 paths in pipeline.plan).
    changed = [f"t/{i}.py" for i in range(MILLION)] + ["vllm/late.py", ".buildkite/scripts/hardware_ci/run-amd-test.sh"]
    inputs = TemplateInputs(list_file_diff="|".join(changed))
    index = generate.ChangedFiles(inputs.changed)
    for i in range(200):
        assert generate.decide(step([f"tests/x{i}/", f"csrc/{i}/"]), inputs, index).action == "block"
    ran = generate.decide(step(["tests/none/", "vllm/"]), inputs, index)
    assert (ran.action, ran.reason) == ("run", "vllm/late.py matches vllm/")
    native = generate.decide(step(["tests/none/"], dind=False), inputs, index)
    assert native.action == "run" and "run-amd-test.sh changed" in native.reason


def test_bootstrap_reads_a_million_changed_files():
    paths = [f"tests/{i}.py" for i in range(MILLION)] + ["csrc/ops.cu"]
    decision = bootstrap.decide(bootstrap.Request(changed=paths))
    assert decision.inputs.run_all == "1" and decision.reasons[-1] == "run_all: csrc/ops.cu changed (pattern csrc/)"


SETTING_TEXTS = {  # runs that let a backtracking pattern split them many ways, each spoiled at the end
    "blanks": " " * MILLION + "!",
    "dotted": "a." * (MILLION // 2) + "!",
    "flags": "--a " * (MILLION // 4) + "!",
    "variables": "x" + "$AAAA" * (MILLION // 5) + "!",
    "letters": "a" * MILLION + "!",
    "braces": "${" * (MILLION // 2),
}


@pytest.mark.parametrize("kind", sorted(SETTING_TEXTS))
def test_every_setting_pattern_answers_a_million_characters(kind):
    import re

    from rocmci.registry import REGISTRY

    text = SETTING_TEXTS[kind]
    for setting in REGISTRY:
        if setting.pattern:  # deepep_flags' ' *(flags)? *' was quadratic on the blanks
            assert not re.fullmatch(setting.pattern, text), setting.name
    assert re.fullmatch(
        next(s.pattern for s in REGISTRY if s.name == "deepep_flags"), " --rocm-explicit-ctx --x 224  "
    )


# Three patterns of other areas found by the same audit; each rewritten to answer in linear time, and checked
# here to answer exactly as before on short inputs (the old pattern is the oracle where it is still fast).
OLD_FLAGS = r"\b(\w*FLAGS\w*)=(\"[^\"]*\"|'[^']*'|\S+)"
OLD_VAR = r"\$\{(\w+)(?::([-+])([^}]*))?\}|\$(\w+)"
OLD_REF = r"\b([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9._-]+)#(\d+)\b"


def test_the_audited_patterns_answer_a_million_characters():
    from rocmci import checkout
    from rocmci.image import check
    from rocmci.runs import results

    assert check._FLAGS_ASSIGN.search("FLAGS" * (MILLION // 5)) is None
    assert checkout.expand("${a:-" * (MILLION // 5), {"a": "x"}) == "${a:-" * (MILLION // 5)
    assert results.link_refs("a-" * (MILLION // 2)) == "a-" * (MILLION // 2)
    assert results.link_refs("see ROCm/rocm-systems#6942") == (
        "see [ROCm/rocm-systems#6942](https://github.com/ROCm/rocm-systems/issues/6942)"
    )


@settings(max_examples=300, derandomize=True, database=None)
@given(st.text(alphabet="AFLGSC_= x'\"$-", max_size=30))
@example("CFLAGS=-O2 A=CFLAGS=x LDFLAGS_EXTRA='-a b'")
def test_flags_assignments_are_found_as_before(text):
    import re

    from rocmci.image import check

    def spans(pattern):
        return [(m.span(), m.groups()) for m in pattern.finditer(text)]

    assert spans(check._FLAGS_ASSIGN) == spans(re.compile(OLD_FLAGS))


@settings(max_examples=300, derandomize=True, database=None)
@given(st.text(alphabet="${}:-+AB_x/", max_size=30))
@example("${C:-$B}/${A:+yes}}$A")
def test_variables_expand_as_before(text):
    import re

    from rocmci import checkout

    scope = {"A": "1", "B": "2"}

    def old_expand(value):
        def sub(m):
            name = m.group(1) or m.group(4)
            current = scope.get(name, "")
            if m.group(2) == "-":
                return current or old_expand(m.group(3))
            if m.group(2) == "+":
                return old_expand(m.group(3)) if current else ""
            return current

        return re.sub(OLD_VAR, sub, value)

    assert checkout.expand(text, scope) == old_expand(text)


@settings(max_examples=300, derandomize=True, database=None)
@given(st.text(alphabet="ab-/#12 .", max_size=40))
@example("ROCm/rocm-systems#6942 and a-b/c.d#1")
def test_github_refs_are_linked_as_before_within_githubs_bounds(text):
    import re

    from rocmci.runs import results

    assert [m.group(0) for m in results._REF.finditer(text)] == [m.group(0) for m in re.finditer(OLD_REF, text)]
