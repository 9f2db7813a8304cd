"""run.step's workloads (src/rocmci/runs/steps.py), beyond test_guard_runstep: a no_plugin step refused in a
container with the flag that runs it, and each workload is of kind "step" (what workaround scopes and the
dry run's step form key on) and asks the preflight's DeepEP arch check only when its commands use DeepEP.
Survivors of mutmut on steps.py."""

from __future__ import annotations

import pytest

from rocmci.errors import UsageError
from rocmci.runs import steps as st


def step(command: str = st.RUNNER, tests: str = "pytest -v -s tests/kernels", **kw) -> st.Step:
    fields = dict(label="mi300_2: Kernels", source_label="Kernels", key="mi300_2-kernels", origin="steps.yaml:3",
                  native=False, gpus=2, parallelism=None, working_dir="/vllm-workspace/tests", command=command,
                  env={"VLLM_TEST_COMMANDS": f"cd /vllm-workspace/tests && {tests}"})  # fmt: skip
    return st.Step(**{**fields, **kw})


def test_a_no_plugin_step_in_a_container_is_refused_with_the_flag_that_runs_it():
    with pytest.raises(UsageError) as err:
        st.workloads(step(command="bash run-on-agent.sh"), None, host=False)
    assert err.value.message == "step 'mi300_2: Kernels' runs on the agent itself (no_plugin), not in an image"
    assert err.value.hint == "run it with --no-container"
    [work] = st.workloads(step(command="bash run-on-agent.sh"), None, host=True)
    assert work.argv == ("/bin/bash", "-c", "bash run-on-agent.sh")


@pytest.mark.parametrize(
    "tests, deepep",
    [
        ("pytest -v tests/kernels/moe/test_deepep_moe.py", True),
        ("python3 -c 'import deep_ep'", True),
        ("pytest -v -s tests/kernels/attention", False),
    ],  # fmt: skip
)
def test_each_job_is_a_step_workload_that_asks_the_arch_check_only_for_deepep(tests, deepep):
    works = st.workloads(step(tests=tests, parallelism=2), None, host=False)
    assert [w.name for w in works] == ["step mi300_2: Kernels job 0/2", "step mi300_2: Kernels job 1/2"]
    for work in works:
        assert work.kind == "step"
        assert work.needs_deepep is deepep


@pytest.mark.parametrize("raw, count", [(None, None), ("", None), (False, None), (1, 1), ("2", 2), (256, 256)])
def test_a_parallelism_of_1_to_256_is_a_count_and_none_blank_or_false_is_none(raw, count):
    assert st.parallelism(step(parallelism=raw)) == count
    assert st.jobs(step(parallelism=raw), None) == ([None] if count is None else list(range(count)))


@pytest.mark.parametrize("raw", [0, 257, True, "1.5", "x" * 60, [2]])
def test_any_other_parallelism_is_one_line_naming_the_step_and_the_fix(raw):
    with pytest.raises(UsageError) as err:
        st.parallelism(step(parallelism=raw))
    text = str(raw).strip()
    assert err.value.message == (
        f"step 'mi300_2: Kernels' (steps.yaml:3) has parallelism {text[:40]!r}: not a count of jobs 1..256"
    )
    assert err.value.hint == "fix it in the step file (`rocmci pipeline.validate` shows what Buildkite makes of it)"


@pytest.mark.parametrize("native, how", [(False, "docker run by the runner"), (True, "native pod")])
def test_the_dry_run_shows_the_generated_step_first(native, how):
    s = step(native=native, env={"VLLM_TEST_COMMANDS": "cd /t && pytest", "NUM_GPUS": "2"})
    assert st.about(s) == (
        f"step 'mi300_2: Kernels' from steps.yaml:3 ({how})",
        f"generated command: {st.RUNNER}",
        "working_dir: /vllm-workspace/tests",
        "generated env:",
        "  VLLM_TEST_COMMANDS=cd /t && pytest",
        "  NUM_GPUS=2",
    )


def test_a_parallel_job_of_a_step_without_parallelism_is_refused_with_the_fix():
    assert st.jobs(step(), 0) == [None]
    with pytest.raises(UsageError) as err:
        st.jobs(step(), 1)
    assert (err.value.message, err.value.hint) == (
        "step 'mi300_2: Kernels' has no parallelism",
        "leave out --parallel-job",
    )


def named(*labels: str) -> list[st.Step]:
    return [step(label=f"mi300_1: {lab}", source_label=lab, key=f"k{i}") for i, lab in enumerate(labels)]


def refusal(steps: list[st.Step], query: str) -> tuple[str, str]:
    with pytest.raises(UsageError) as err:
        st.find(steps, query, "test-amd.yaml")
    return err.value.message, err.value.hint


def test_a_query_naming_several_steps_lists_six_of_them_and_counts_the_rest():
    twice = named("Kernels", "Kernels", "Other")
    assert refusal(twice, "Kernels") == (
        "2 steps of test-amd.yaml are labelled 'Kernels'",
        "name one of them: 'mi300_1: Kernels', 'mi300_1: Kernels'",
    )
    six = named(*(f"DeepEP {c}" for c in "abcdef"))
    message, hint = refusal(six, "deepep")
    assert message == "6 steps of test-amd.yaml have 'deepep' in their label"
    assert hint == "name one of them: " + ", ".join(f"'mi300_1: DeepEP {c}'" for c in "abcdef")
    seven = named(*(f"DeepEP {c}" for c in "abcdefg"))
    assert (
        refusal(seven, "deepep")[1]
        == "name one of them: " + ", ".join(f"'mi300_1: DeepEP {c}'" for c in "abcdef") + " and 1 more"
    )
    eight = named(*(f"DeepEP {c}" for c in "abcdefgh"))
    assert refusal(eight, "deepep")[1].endswith("'mi300_1: DeepEP f' and 2 more")


def test_an_unknown_step_gets_the_three_closest_names():
    steps = named("Kernels MoE 1", "Kernels MoE 12", "Kernels MoE 123", "Kernels MoE 1234", "Entrypoints")
    assert refusal(steps, "Kernel MoE") == (
        "no step 'Kernel MoE' in test-amd.yaml",
        "did you mean 'Kernels MoE 1' or 'Kernels MoE 12' or 'Kernels MoE 123'?",
    )


MIRRORED = """\
steps:
- label: Prod
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  commands:
  - pytest a.py
- label: Gated
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  source_file_dependencies: [vllm/never_changed]
  commands:
  - pytest g.py
- label: Exp
  agent_pool: mi300_1
  mirror_hardwares: [amdexperimental]
  commands:
  - pytest e.py
"""


def test_every_step_of_the_mirror_is_generated_ungated_with_its_line_and_image(tmp_path):
    from rocmci.pipeline import source

    path = tmp_path / "test-amd.yaml"
    path.write_text(MIRRORED)
    src = source.load_source(path, "test-amd.yaml")
    prod = st.generated_steps(src, "amdproduction", "img:CI")
    # run_all: a step gated on files no change touched is generated all the same.
    assert [(s.source_label, s.origin) for s in prod] == [("Prod", "test-amd.yaml:2"), ("Gated", "test-amd.yaml:7")]
    assert all(s.env["VLLM_CI_FALLBACK_IMAGE"] == "img:CI" for s in prod)
    assert [s.data["depends_on"] for s in prod] == ["image-build-amd"] * 2  # no block step before Gated
    exp = st.generated_steps(src, "amdexperimental", "img:CI")
    assert [(s.source_label, s.origin) for s in exp] == [("Exp", "test-amd.yaml:13")]
    assert refusal(prod, "zzzz") == ("no step 'zzzz' in test-amd.yaml", "run `rocmci pipeline.plan` to list the steps")
