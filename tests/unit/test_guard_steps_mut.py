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
