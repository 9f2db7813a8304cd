"""The packaged inventory knows every pool vLLM's AMD CI has served (issue 34, item 6).

The pools come from vLLM's real step files in ../shared/fixtures/vllm (four versions, December 2025 to
August 2026) and from what vLLM's AMD CI ran in early 2026: the MI355 'B' queues amd_mi355B_{1,2,4,8},
which later versions dropped. A step file of that time must read as aimed at a known (drained) pool, not
as a slip of mi355_1; a well-formed name of another variant (mi300X_1) reads as a new pool, not a slip.
"""

from __future__ import annotations

import pytest
import yaml

from rocmci import settings as settingsmod
from rocmci.pipeline import inventory, rules, service
from tests.conftest import SHARED_VLLM

PACKAGED = inventory.load_inventory(service.packaged_inventory())
STEP_FILES = sorted(SHARED_VLLM.glob("test-amd*.yaml")) if SHARED_VLLM.is_dir() else []
MI355B = [f"mi355B_{n}" for n in (1, 2, 4, 8)]


def pools_of(path) -> set[str]:
    """Every agent_pool a step file names, in steps and in groups' steps."""
    found: set[str] = set()

    def walk(steps) -> None:
        for step in steps or ():
            if isinstance(step, dict):
                if isinstance(step.get("agent_pool"), str):
                    found.add(step["agent_pool"])
                walk(step.get("steps"))

    walk(yaml.safe_load(path.read_text())["steps"])
    return found


def validate(path, tmp_path):
    s = settingsmod.resolve(tmp_path, flags={"arch": "gfx942;gfx950"}, env={}, pyproject={})
    return service.validate_source_file(str(path), s)[1]


@pytest.fixture(scope="module")
def step_files():
    if not STEP_FILES:
        pytest.skip(f"real vLLM step files not found at {SHARED_VLLM}")
    return STEP_FILES


def test_every_pool_of_vllms_step_files_is_in_the_packaged_inventory(step_files):
    assert len(step_files) >= 4
    named = set().union(*(pools_of(p) for p in step_files))
    assert {"mi250_1", "mi300_1", "mi325_1", "mi355_1"} <= named  # the files were read
    assert named - set(PACKAGED.pools) == set()


def test_the_real_step_files_name_no_unknown_queue(step_files, tmp_path):
    for path in step_files:
        report = validate(path, tmp_path)
        unknown = [f.message for f in report.findings if f.rule == "unknown-queue"]
        assert unknown == [], path.name


def test_the_mi355b_pools_of_early_2026_are_known_and_drained():
    for name in MI355B:
        pool = PACKAGED.pools[name]
        assert (pool.queue, pool.arch, pool.gpus, pool.agents) == (f"amd_{name}", "gfx950", int(name[-1]), False)


def test_a_step_file_of_early_2026_is_not_told_it_meant_mi355_1(tmp_path):
    """A file aimed at mi355B_1 (as vLLM's were): no unknown-queue, no 'did you mean'; the drained pool is named."""
    steps = "".join(
        f"- label: Kernels on {name}\n  mirror_hardwares: [amdproduction]\n  agent_pool: {name}\n"
        f"  num_gpus: {name[-1]}\n  optional: true\n  timeout_in_minutes: 30\n  commands: [pytest -v -s kernels]\n"
        for name in MI355B
    )
    (tmp_path / "s.yaml").write_text("steps:\n" + steps)
    report = validate(tmp_path / "s.yaml", tmp_path)
    messages = [f.message for f in report.findings]
    assert not any("did you mean" in m for m in messages), messages
    assert {f.rule for f in report.findings} == {"pool-no-agents"}
    assert report.errors == 0  # optional steps wait behind a block step: warnings
    assert all("has no agents now" in m and "pools with agents for gfx950: mi355_" in m for m in messages)


@pytest.mark.parametrize(
    ("name", "slips"),
    [
        ("mi355B_1", []),  # known
        ("mi355b_1", ["mi355B_1"]),  # another case of a known pool
        ("mi300X_1", []),  # a well-formed variant of a model: maybe a new pool, not a slip of mi300_1
        ("mi325X_8", []),
        ("mi355B_3", ["mi355B_2", "mi355B_4"]),  # a GPU count no pool has: still a slip
        ("mi35B_1", ["mi355B_1", "mi355_1"]),  # a slip of either
    ],
)
def test_a_near_miss_of_a_real_pool_is_not_a_slip_of_another(name, slips):
    assert rules.near_pools(name, sorted(PACKAGED.pools))[:2] == slips
