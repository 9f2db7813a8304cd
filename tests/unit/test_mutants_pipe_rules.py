"""What pipeline.validate says, word for word, and what --keep-going writes (issue 24, mutation testing).

Each rule's finding is the one line a user reads to fix the pipeline: where (file:line:col), which rule,
how bad, and what to do. These tests pin those lines exactly, and the boundaries the rules are written
against (Buildkite's 500 steps and 100-character keys, AMD CI's 180-minute cap), so that a changed word,
limit or condition in pipeline/rules.py or pipeline/keepgoing.py turns a test red (README "Mutation testing").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci import yamldoc
from rocmci.findings import ERROR, WARNING, Finding
from rocmci.pipeline import bootstrap, generate, inventory, keepgoing, rules, validate
from rocmci.pipeline import source as src_mod

DATA = Path(__file__).resolve().parents[1] / "data" / "pipeline"
INVENTORY = inventory.load_inventory(DATA / "agents.yaml")
TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
RANDOM = "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LzXcVbNm"  # no known prefix: a secret by its randomness alone


def with_mi300_4(inv: inventory.Inventory) -> inventory.Inventory:
    """The inventory with one more gfx942 pool, of 4 GPUs."""
    extra = inventory.Pool("mi300_4", "amd_mi300_4", "gfx942", 4, True)
    return inventory.Inventory(inv.filename, {**inv.pools, "mi300_4": extra})


def ctx(what: str = "") -> rules.Context:
    return rules.Context(INVENTORY, ("gfx942", "gfx950"), what)


def found(text: str, *rule_ids: str, context: rules.Context | None = None) -> list[str]:
    """The findings' lines for a pipeline file, those of Buildkite's schema left out."""
    report = validate.validate_pipeline_document(yamldoc.parse(text, "p.yaml"), context or ctx())
    return [f.text() for f in report.findings if f.rule != "schema" and (not rule_ids or f.rule in rule_ids)]


def step(label: str, queue: str = "amd_mi300_1", extra: str = "", timeout: int | None = 5) -> str:
    out = f"- label: {label}\n  agents: {{queue: {queue}}}\n  command: x\n"
    out += f"  timeout_in_minutes: {timeout}\n" if timeout is not None else ""
    return out + "".join(f"  {line}\n" for line in extra.splitlines())


# --- the structure rules -----------------------------------------------------------------------------------


def test_an_empty_or_null_step_is_one_error_each():
    """Promise: a step that does nothing (`{}` or `~`) is an error at its own line."""
    text = "steps:\n- {}\n" + step("fine") + "- ~\n"
    message = "error [empty-step] empty step: Buildkite accepts it but it does nothing; remove it"
    assert found(text, "empty-step") == [f"p.yaml:2:3: {message}", f"p.yaml:7:3: {message}"]


@pytest.mark.parametrize("count", [500, 501])
def test_500_steps_upload_and_501_do_not(count):
    """Promise: Buildkite refuses an upload of more than 500 steps; exactly 500 is fine."""
    text = "steps:\n" + "".join(f"- {{label: s{i}, command: x}}\n" for i in range(count))
    expected = [
        "p.yaml:1:1: error [step-limit] 501 steps; Buildkite rejects an upload of more than 500: "
        "split it into several uploads"
    ]
    assert found(text, "step-limit") == (expected if count == 501 else [])
    moved = [line.replace("p.yaml:1:1", "p.yaml:2:1") for line in expected]  # at the steps key, not the file
    assert found("env: {A: b}\n" + text, "step-limit") == (moved if count == 501 else [])


def test_a_key_used_again_points_at_the_first_use():
    """Promise: each repeated key is an error naming the line of the first step with it."""
    text = "steps:\n" + step("nokey") + "".join(step(f"s{i}", extra="key: same") for i in range(3))
    message = "error [unique-key] step key 'same' is used again (first at line 6); keys must be unique"
    assert found(text, "unique-key") == [f"p.yaml:15:3: {message}", f"p.yaml:20:3: {message}"]


def test_invalid_keys_say_why_and_a_long_key_is_shortened_in_the_message():
    """Promise: a key Buildkite refuses (a character outside its pattern, more than 100 characters, a UUID)
    is an error saying why; keys up to 100 characters are fine, and a key past 60 is shown cut."""
    keys = ["a b!", "k" * 100, "k" * 101, "12345678-1234-1234-1234-123456789abc", "x" * 59 + "!"]
    text = "steps:\n" + step("nokey") + "".join(step(f"s{i}", extra=f"key: '{k}'") for i, k in enumerate(keys))
    tail = "; use letters, digits, '-', '_' and ':' (join arch lists with '-')"
    assert found(text, "key-pattern") == [
        f"p.yaml:10:3: error [key-pattern] step key 'a b!' is not a valid Buildkite key: it contains ' ' '!'{tail}",
        f"p.yaml:20:3: error [key-pattern] step key '{'k' * 57}...' is not a valid Buildkite key: "
        f"it is too long or looks like a UUID{tail}",
        "p.yaml:25:3: error [key-pattern] step key '12345678-1234-1234-1234-123456789abc' is not a valid "
        f"Buildkite key: it is too long or looks like a UUID{tail}",
        f"p.yaml:30:3: error [key-pattern] step key '{'x' * 59}!' is not a valid Buildkite key: it contains '!'{tail}",
    ]


def test_an_unknown_dependency_suggests_the_nearest_key_only_when_there_is_one():
    """Promise: depends_on naming no step is an error at the entry, with a 'did you mean' for a near key."""
    text = "steps:\n" + step("a", extra="key: same\ndepends_on: [same, sane, zzzz]")
    assert found(text, "depends-on") == [
        "p.yaml:7:22: error [depends-on] depends_on 'sane' names no step in this pipeline; did you mean 'same'?",
        "p.yaml:7:28: error [depends-on] depends_on 'zzzz' names no step in this pipeline",
    ]


def test_each_dependency_cycle_is_reported_once_at_the_step_it_comes_back_to():
    """Promise: steps waiting on each other never start: one error per cycle, the cycle spelled out;
    a step that depends on a cycle's members, or twice on one step, is no cycle of its own."""
    text = (
        "steps:\n"
        + step("a", extra="key: a\ndepends_on: b")
        + step("b", extra="key: b\ndepends_on: [a]")
        + step("c", extra="key: c\ndepends_on: c")
        + step("d", extra="key: d\ndepends_on: [a, c, e, e]")
        + step("e", extra="key: e")
        + step("f", extra="key: f\ndepends_on: [d, e]")
    )
    assert found(text, "dependency-cycle") == [
        "p.yaml:7:3: error [dependency-cycle] dependency cycle: a -> b -> a; these steps would never start",
        "p.yaml:19:3: error [dependency-cycle] dependency cycle: c -> c; these steps would never start",
    ]


# --- queues and pools -------------------------------------------------------------------------------------


def test_queue_findings_for_each_way_a_step_can_miss_its_agents():
    """Promise: no queue, a queue naming no pool, and a slip of a known pool are errors (never scheduled);
    a well-formed unknown pool is a warning (a new pool?); the list form `queue=...` and the pipeline's
    default agents count; block steps need no queue."""
    where = f"the inventory {INVENTORY.filename}"
    text = (
        "steps:\n"
        "- label: noq\n  command: x\n  timeout_in_minutes: 5\n"
        + step("empty pool", "amd_")
        + step("slip", "amd_mi30_2")
        + step("new", "amd_mi400_8")
        + step("plain", "gpu-farm")
        + '- label: listed\n  agents: ["os=linux", "queue=amd_mi300_1"]\n  command: x\n  timeout_in_minutes: 5\n'
        + '- label: tags only\n  agents: ["os=linux"]\n  command: x\n  timeout_in_minutes: 5\n'
        + "- block: wait here\n"
        + step("a number", "5")
        + '- label: odd\n  agents: ["queue=weird=x"]\n  command: x\n  timeout_in_minutes: 5\n'
    )
    assert found(text, "unknown-queue") == [
        "p.yaml:2:3: error [unknown-queue] no agents queue: the step would fall through to the default queue; "
        "set agents: {queue: ...}",
        "p.yaml:6:3: error [unknown-queue] queue 'amd_' names no pool (a step without agent_pool): no agent serves "
        "it, the step would never be scheduled",
        f"p.yaml:10:3: error [unknown-queue] pool 'mi30_2' (queue 'amd_mi30_2') is not in {where}; did you mean "
        "mi300_2? No agent serves that queue: the step would never be scheduled",
        f"p.yaml:14:3: warning [unknown-queue] queue 'amd_mi400_8' is not in {where}: a new pool? add it there "
        "(agents: false if it is drained), or the step waits for an agent that may not exist",
        f"p.yaml:18:3: warning [unknown-queue] queue 'gpu-farm' is not in {where}: a new pool? add it there "
        "(agents: false if it is drained), or the step waits for an agent that may not exist",
        "p.yaml:25:3: error [unknown-queue] no agents queue: the step would fall through to the default queue; "
        "set agents: {queue: ...}",
        "p.yaml:30:3: error [unknown-queue] no agents queue: the step would fall through to the default queue; "
        "set agents: {queue: ...}",
        f"p.yaml:35:3: warning [unknown-queue] queue 'weird=x' is not in {where}: a new pool? add it there "
        "(agents: false if it is drained), or the step waits for an agent that may not exist",
    ]
    default = "agents: {queue: amd_mi300_1}\nsteps:\n- label: a\n  command: x\n  timeout_in_minutes: 5\n"
    assert found(default) == []


def test_a_slip_lists_at_most_two_pools_and_names_the_setting():
    """Promise: the 'did you mean' names the two nearest pools, and the inventory as the user sets it."""
    text = "steps:\n" + step("slip", "amd_mi300_3")
    assert found(text, context=ctx("setting 'inventory' from pyproject.toml")) == [
        f"p.yaml:3:3: error [unknown-queue] pool 'mi300_3' (queue 'amd_mi300_3') is not in the inventory "
        f"{INVENTORY.filename}, setting 'inventory' from pyproject.toml; did you mean mi300_2 or mi300_1? "
        "No agent serves that queue: the step would never be scheduled"
    ]
    assert rules.inventory_text(ctx("the packaged inventory")) == (
        "the inventory packaged with rocmci (setting 'inventory': this checkout has no .buildkite/agents.yaml)"
    )


def test_a_drained_pool_is_an_error_unless_the_step_is_optional():
    """Promise: a pool with no agents makes a step wait forever: an error, a warning for a step behind a
    block or with soft_fail; the hint names pools of that arch with agents and enough GPUs."""
    text = (
        "steps:\n"
        + step("drained", "amd_mi300_2")
        + step("soft", "amd_mi300_2", "soft_fail: true")
        + "- block: hold\n  key: gate\n"
        + step("gated", "amd_mi300_2", "depends_on: gate")
        + step("fine", "amd_mi300_1")
    )
    pools = {name: pool._replace(agents=name != "mi300_2") for name, pool in INVENTORY.pools.items()}
    drained = rules.Context(inventory.Inventory(INVENTORY.filename, pools), ("gfx942",))
    message = (
        "[pool-no-agents] pool mi300_2 (queue amd_mi300_2) has no agents now: the step would wait forever; "
        "pools with agents for gfx942: mi325_2"
    )
    assert found(text, "pool-no-agents", context=drained) == [
        f"p.yaml:3:3: error {message}",
        f"p.yaml:7:3: warning {message}",
        f"p.yaml:14:3: warning {message}",
    ]
    alone = "steps:\n" + step("fine", "amd_mi300_1") + step("drained", "amd_mi355_2")
    assert found(alone, "pool-no-agents") == [
        "p.yaml:7:3: error [pool-no-agents] pool mi355_2 (queue amd_mi355_2) has no agents now: the step would "
        "wait forever"
    ]
    more = rules.Context(with_mi300_4(drained.inventory), ("gfx942",))
    assert found("steps:\n" + step("drained", "amd_mi300_2"), "pool-no-agents", context=more) == [
        f"p.yaml:3:3: error {message.replace('mi325_2', 'mi325_2, mi300_4')}"
    ]


# --- GPUs and DeepEP --------------------------------------------------------------------------------------


def test_gpu_counts_the_step_asks_for_against_what_it_gets():
    """Promise: VLLM_CI_EXPECTED_GPU_COUNT must be a whole number the pool's agents have, and -tp x -dp must
    fit in it (or in the pool's GPUs when the step names no count); a $NAME or blank count is not judged."""
    text = (
        "steps:\n"
        + step("word", "amd_mi300_2", 'env: {VLLM_CI_EXPECTED_GPU_COUNT: "two"}')
        + step("many", "amd_mi300_2", "env: {VLLM_CI_EXPECTED_GPU_COUNT: 4}")
        + step("exact", "amd_mi300_2", "env: {VLLM_CI_EXPECTED_GPU_COUNT: 2}")
        + step("none", "amd_mi300_2", "env: {VLLM_CI_EXPECTED_GPU_COUNT: '0'}")
        + "- label: tp\n  agents: {queue: amd_mi300_2}\n  command: vllm serve -tp 2 -dp 2\n  timeout_in_minutes: 5\n"
        + "- label: fits\n  agents: {queue: amd_mi300_2}\n  command: vllm serve -tp 2\n  timeout_in_minutes: 5\n"
        + "- label: one\n  agents: {queue: amd_mi300_2}\n  env: {VLLM_CI_EXPECTED_GPU_COUNT: '1'}\n"
        "  command: vllm serve -dp 2\n  timeout_in_minutes: 5\n"
        + "- label: var\n  agents: {queue: amd_mi300_2}\n  env: {VLLM_CI_EXPECTED_GPU_COUNT: $$N}\n"
        "  command: vllm serve -tp 2\n  timeout_in_minutes: 5\n"
        + "- label: blank\n  agents: {queue: amd_mi300_2}\n  env: {VLLM_CI_EXPECTED_GPU_COUNT: ' '}\n"
        "  command: vllm serve -tp 3\n  timeout_in_minutes: 5\n"
        + "- label: nopool\n  agents: {queue: nowhere}\n  command: vllm serve -tp 8\n  timeout_in_minutes: 5\n"
        + "- label: huge\n  agents: {queue: amd_mi300_2}\n  commands: [vllm serve -tp 1"
        + "0" * 30
        + ", vllm serve -tp 4]\n  timeout_in_minutes: 5\n"
        + step("negative", "amd_mi300_2", "env: {VLLM_CI_EXPECTED_GPU_COUNT: -1}")
    )
    assert found(text, "gpu-count") == [
        "p.yaml:6:9: error [gpu-count] VLLM_CI_EXPECTED_GPU_COUNT must be a whole number, got 'two'",
        "p.yaml:11:9: error [gpu-count] needs 4 GPUs but an agent of mi300_2 has 2; use a pool with more GPUs",
        "p.yaml:24:3: error [gpu-count] -tp x -dp needs 4 GPUs but the step gets 2; raise num_gpus or lower -tp/-dp",
        "p.yaml:33:3: error [gpu-count] -tp x -dp needs 2 GPUs but the step gets 1; raise num_gpus or lower -tp/-dp",
        "p.yaml:43:3: error [gpu-count] -tp x -dp needs 3 GPUs but the step gets 2; raise num_gpus or lower -tp/-dp",
        "p.yaml:51:14: error [gpu-count] -tp is a 31-digit number; numbers here have at most 18 digits",
        "p.yaml:51:62: error [gpu-count] -tp x -dp needs 4 GPUs but the step gets 2; raise num_gpus or lower -tp/-dp",
        "p.yaml:57:9: error [gpu-count] VLLM_CI_EXPECTED_GPU_COUNT must be at least 0, got -1",
    ]


def test_parallel_size_is_the_largest_product_over_the_commands_joined_by_and():
    """Promise: `-tp N -dp M` asks for N*M GPUs; each `&&` part is one command, the largest one counts."""
    assert rules.parallel_size("a -tp 2 -dp 3 && b -tp 8") == 8
    assert rules.parallel_size("a -dp 3 && b --tensor-parallel-size=2 --data-parallel-size=2") == 4
    assert rules.parallel_size("serve -dp 5") == 5
    assert rules.parallel_size("serve --tensor-parallel-size 6") == 6
    assert rules.parallel_size("python my-tp-tool.py") == 0


def test_deepep_on_a_pool_of_another_arch_is_an_error_at_the_command():
    """Promise: a step running DeepEP on a pool whose arch the image's DeepEP was not built for is an error
    at the first command that uses it, naming the pool, its arch and the archs built; a pool of a built
    arch, or an unknown queue (reported by unknown-queue), is not judged here."""
    text = (
        "steps:\n"
        "- label: mi250\n  agents: {queue: amd_mi250_2}\n  commands: [echo, pytest test_deepep_moe.py, deep_ep]\n"
        "  timeout_in_minutes: 5\n"
        "- label: cpu\n  agents: {queue: amd-cpu}\n  commands: [python -m deep_ep]\n  timeout_in_minutes: 5\n"
        "- label: ok\n  agents: {queue: amd_mi300_1}\n  commands: [deepep_low_latency]\n  timeout_in_minutes: 5\n"
        "- label: far\n  agents: {queue: far}\n  commands: [deepep_high_throughput]\n  timeout_in_minutes: 5\n"
        "- label: none\n  agents: {queue: amd_mi250_1}\n  commands: [pytest]\n  timeout_in_minutes: 5\n"
    )
    tail = "but the image's DeepEP is built for gfx942;gfx950; move the step to a gfx942 or gfx950 pool"
    assert found(text, "deepep-arch") == [
        f"p.yaml:4:20: error [deepep-arch] runs DeepEP on mi250_2 (gfx90a) {tail} (DeepEP on ROCm cannot be built "
        "for gfx90a)",
        f"p.yaml:8:14: error [deepep-arch] runs DeepEP on amd-cpu (no GPU) {tail} (amd-cpu has no GPU)",
    ]
    # after steps it does not judge, on the pipeline's default queue
    later = (
        "agents: {queue: amd_mi250_2}\nsteps:\n- wait\n"
        "- {label: far, agents: {queue: far}, command: deepep_high_throughput}\n"
        "- {label: none, agents: {queue: amd_mi250_1}, command: pytest}\n"
        "- {label: ok, agents: {queue: amd_mi300_1}, command: deep_ep}\n"
        "- {label: default, command: deep_ep}\n"
    )
    assert found(later, "deepep-arch") == [
        f"p.yaml:7:20: error [deepep-arch] runs DeepEP on mi250_2 (gfx90a) {tail} (DeepEP on ROCm cannot be built "
        "for gfx90a)"
    ]


# --- interpolation and secrets ----------------------------------------------------------------------------


def test_every_string_upload_would_interpolate_is_an_error_once():
    """Promise: a $NAME that `buildkite-agent pipeline upload` would replace and nobody defines is an error at
    the string (a label, an env value, each command, a group's label, a group member); the pipeline's env,
    the upload-time variables and $$ escapes are fine; one finding per string."""
    text = (
        "env:\n  DEFINED: x\n"
        "steps:\n"
        '- label: "interp $LABELVAR"\n  agents: {queue: amd_mi300_1}\n'
        '  env: {A: "${UNDEF:-x} $UNDEF2", B: "$DEFINED $BUILDKITE_COMMIT $$ESC"}\n'
        '  commands: ["echo $CMDVAR", "echo ok"]\n  timeout_in_minutes: 5\n'
        '- group: "G $GROUPVAR"\n  steps:\n'
        '  - label: member\n    agents: {queue: amd_mi300_1}\n    command: "echo $MEMBERVAR"\n'
        "    timeout_in_minutes: 5\n"
        + step("art", extra='artifact_paths: ["out/*", "out/$ART/*"]')
        + step("stray", extra='steps: ["echo $STRAY"]')
    )

    def line(where: str, token: str, name: str) -> str:
        return (
            f"p.yaml:{where}: error [interpolation] {token} is replaced by `buildkite-agent pipeline upload` before "
            f"the job runs; write ${token} to pass it to the job, or define {name} in the pipeline's env"
        )

    assert found(text, "interpolation") == [
        line("4:3", "$LABELVAR", "LABELVAR"),
        line("6:9", "${UNDEF:-x}", "UNDEF"),
        line("7:14", "$CMDVAR", "CMDVAR"),
        line("9:3", "$GROUPVAR", "GROUPVAR"),
        line("13:5", "$MEMBERVAR", "MEMBERVAR"),
        line("19:29", "$ART", "ART"),
        line("24:11", "$STRAY", "STRAY"),
    ]
    clean = "env: {HOME: /root}\nsteps:\n" + step("a", extra='env: {A: "$HOME ${BUILDKITE_BRANCH} $$X"}')
    assert found(clean) == []


def test_the_first_undefined_name_in_a_string_is_the_one_named():
    """Promise: the finding names the variable upload would replace: ${A-x} and ${A:-x} name A."""
    assert rules._undefined("${DEF} ${TAG-latest} $OTHER", {"DEF"}) == ("${TAG-latest}", "TAG")
    assert rules._undefined("${IMG:-rocm/vllm:latest}", set()) == ("${IMG:-rocm/vllm:latest}", "IMG")
    assert rules._undefined("${BUILDKITE_COMMIT} $$ESCAPED", set(rules.UPLOAD_TIME_VARS)) is None
    assert rules._undefined("${XAXIS}", set()) == ("${XAXIS}", "XAXIS")


def test_secrets_in_env_labels_agent_tags_and_commands_are_errors_that_never_repeat_the_value():
    """Promise: a secret written into the pipeline (by name: HF_TOKEN; by shape: a GitHub token, a bearer
    token) is an error at each place, the pipeline's env included, and the message never holds the value;
    a $NAME reference, an empty value or a number under an innocent name is fine."""
    text = (
        "env:\n  HF_TOKEN: plain-secret-1\n  OTHER: plain\n"
        "steps:\n"
        f'- label: "leaky {TOKEN}"\n'
        f"  agents: {{queue: amd_mi300_1, {TOKEN}: x}}\n"
        f'  env: {{API_KEY: "$$FROM_AGENT", INNOCENT: "{TOKEN}", HF_TOKEN: plain-secret-1, NUM: 5, EMPTY_TOKEN: ""}}\n'
        f"  command: \"curl -H 'Authorization: Bearer {TOKEN}' x\"\n"
        "  timeout_in_minutes: 5\n"
        + step("clean", extra=f"env: {{PORT: 8000, SEED: {RANDOM}, SPACED: 'a {RANDOM}'}}")
        + step(RANDOM)
        + f"- group: g\n  steps:\n  - {{label: 'in {TOKEN}', command: x}}\n"
    )
    lines = found(text, "secret-in-pipeline")
    by_name = (
        "HF_TOKEN is written into the pipeline in plain text; remove it and give it to the agents as a secret "
        "or through their environment"
    )
    assert lines == [
        f"p.yaml:2:3: error [secret-in-pipeline] {by_name}",
        "p.yaml:5:3: error [secret-in-pipeline] this value looks like a GitHub token and is written into the "
        "pipeline in plain text; remove it and give it to the agents as a secret",
        "p.yaml:6:32: error [secret-in-pipeline] this name looks like a GitHub token and is written into the "
        "pipeline in plain text; remove it and give it to the agents as a secret",
        "p.yaml:7:34: error [secret-in-pipeline] the value of INNOCENT looks like a GitHub token and is written "
        "into the pipeline in plain text; remove it and give it to the agents as a secret, or refer to a "
        "variable ($NAME)",
        f"p.yaml:7:88: error [secret-in-pipeline] {by_name}",
        "p.yaml:8:3: error [secret-in-pipeline] this value looks like a bearer token and is written into the "
        "pipeline in plain text; remove it and give it to the agents as a secret",
        "p.yaml:14:21: error [secret-in-pipeline] the value of SEED looks like a long random-looking string and is "
        "written into the pipeline in plain text; remove it and give it to the agents as a secret, or refer to a "
        "variable ($NAME)",
        "p.yaml:15:3: error [secret-in-pipeline] this value looks like a long random-looking string and is written "
        "into the pipeline in plain text; remove it and give it to the agents as a secret",
        "p.yaml:21:6: error [secret-in-pipeline] this value looks like a GitHub token and is written into the "
        "pipeline in plain text; remove it and give it to the agents as a secret",
    ]
    assert not any(TOKEN in line or RANDOM in line or "plain-secret-1" in line for line in lines)
    assert found("steps:\n" + step("clean", extra="env: {HF_TOKEN: $$HF}")) == []


# --- timeouts ---------------------------------------------------------------------------------------------


def test_every_command_step_needs_a_timeout_capped_at_180_minutes_on_gpu_agents():
    """Promise: no timeout is an error; more than 180 minutes is an error on a GPU pool or an unknown queue;
    180 is fine, and a CPU pool may take longer (the template's 540-minute base image build)."""
    text = (
        "steps:\n"
        + step("none", timeout=None)
        + step("over", timeout=181)
        + step("cap", timeout=180)
        + step("cpu", "amd-cpu", timeout=540)
        + step("unknown", "elsewhere", timeout=200)
    )
    assert found(text, "timeout") == [
        "p.yaml:2:3: error [timeout] no timeout_in_minutes: a hung GPU job would hold its agent; set one (at most 180)",
        "p.yaml:8:3: error [timeout] timeout_in_minutes 181 is over the 180-minute cap of AMD CI's GPU agents",
        "p.yaml:20:3: error [timeout] timeout_in_minutes 200 is over the 180-minute cap of AMD CI's GPU agents",
    ]


# --- --keep-going ----------------------------------------------------------------------------------------

STEP_FILE = """\
steps:
- label: Gated
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  source_file_dependencies: [vllm/x]
  commands: [pytest a]
- label: Experimental
  mirror_hardwares: [amdexperimental]
  agent_pool: mi300_1
  commands: [pytest b]
- just text
- label: Runs
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  parallelism: 1.5
  commands: [pytest c]
- label: Fine
  mirror_hardwares: [amdproduction]
  agent_pool: mi300_1
  commands: [pytest d]
"""


def _generated(text: str = STEP_FILE, **inputs):
    source = src_mod.from_document(yamldoc.parse(text, "steps.yaml"))
    return source, generate.generate(source, generate.Options(inputs=bootstrap.TemplateInputs(**inputs)))


def _error(line: int, message: str = "", severity: str = ERROR) -> Finding:
    return Finding("steps.yaml", line, 3, "gpu-count", severity, message or f"problem at {line}")


def test_keep_going_holds_each_step_with_errors_behind_its_own_block_step():
    """Promise: a rendered step with errors waits for a block step (the template's own when it gates the
    step) whose label carries the first finding and whose prompt lists them all; a skipped step is not
    mentioned, a step that is not rendered is 'left out', a field Buildkite refuses is removed and said so,
    steps without errors are untouched; findings of another file, and warnings, hold nothing."""
    source, generated = _generated()
    findings = [
        _error(3),
        _error(5, "second $X"),
        _error(8),
        _error(11),
        _error(14),
        _error(18, severity=WARNING),
        Finding("other.yaml", 18, 3, "gpu-count", ERROR, "elsewhere"),
    ]
    pipeline, held = keepgoing.hold(source, generated, findings)
    assert [(h.step_index, h.title, h.how, len(h.findings)) for h in held] == [
        (0, "mi300_1: Gated", "held", 2),
        (2, "step 3", "left out", 1),
        (3, "mi300_1: Runs", "held", 1),
    ]
    members = pipeline["steps"][0]["steps"][3:]
    assert members[0] == {
        "block": "rocmci: problem at 3 (steps.yaml:3) (+1 more) - run mi300_1: Gated anyway?",
        "depends_on": generate.IMAGE_STEP_KEY,
        "key": "block-mi300_1-gated",
        "prompt": "steps.yaml:3:3: error [gpu-count] problem at 3\nsteps.yaml:5:3: error [gpu-count] second $$X",
    }
    assert members[1]["depends_on"] == "block-mi300_1-gated"
    assert members[2] == {
        "block": "rocmci: problem at 14 (steps.yaml:14) - run mi300_1: Runs anyway?",
        "prompt": "steps.yaml:14:3: error [gpu-count] problem at 14\nrocmci removed 'parallelism' from this step so "
        "that Buildkite accepts the pipeline: parallelism: 1.5 is not of type 'integer'",
        "depends_on": generate.IMAGE_STEP_KEY,
        "key": "block-mi300_1-runs",
    }
    assert members[3]["depends_on"] == "block-mi300_1-runs" and "parallelism" not in members[3]
    assert members[3]["label"] == "mi300_1: Runs" and members[3]["timeout_in_minutes"] == 180
    assert members[4]["label"] == "mi300_1: Fine" and members[4]["depends_on"] == generate.IMAGE_STEP_KEY
    assert len(members) == 5
    assert generated.pipeline["steps"][0]["steps"][3]["block"] == "Run mi300_1: Gated"  # the input is not changed
    assert keepgoing.hold(source, generated, [])[0] == generated.pipeline


def test_a_block_label_is_cut_at_300_characters_and_dollars_are_escaped():
    """Promise: the block label Buildkite shows stays within 300 characters, and a `$` in a finding reaches
    people as written (`$$`)."""
    base = len("rocmci:  (steps.yaml:3) - run T anyway?")
    fits = keepgoing._block_text("T", [_error(3, "m" * (300 - base))])
    assert len(fits) == 300 and fits.endswith("m (steps.yaml:3) - run T anyway?")
    cut = keepgoing._block_text("T", [_error(3, "m" * (301 - base))])
    full = "rocmci: " + "m" * (301 - base) + " (steps.yaml:3) - run T anyway?"
    assert len(full) == 301 and cut == full[:297] + "..."
    assert keepgoing._block_text("T", [_error(3, "$A"), _error(4), _error(5)]) == (
        "rocmci: $$A (steps.yaml:3) (+2 more) - run T anyway?"
    )


def test_a_block_key_already_taken_gets_a_free_rocmci_hold_key():
    """Promise: the block step rocmci adds never takes a key another step has, nor one Buildkite refuses."""
    source, generated = _generated(run_all="1")
    members = generated.pipeline["steps"][0]["steps"]
    members += [{"key": "block-mi300_1-runs", "command": "x"}, {"key": "rocmci-hold-3", "command": "x"}]
    pipeline, held = keepgoing.hold(source, generated, [_error(14), _error(3)])
    keys = [m.get("key") for m in pipeline["steps"][0]["steps"] if "block" in m]
    assert keys == ["block-mi300_1-gated", "rocmci-hold-3-"]
    runs = next(m for m in pipeline["steps"][0]["steps"] if m.get("label") == "mi300_1: Runs")
    assert runs["depends_on"] == "rocmci-hold-3-"
    assert [h.how for h in held] == ["held", "held"]
    used = {"k", "k-"}
    assert keepgoing._free_key("k", used) == "k--" and used == {"k", "k-", "k--"}


def test_a_template_block_with_a_key_buildkite_refuses_is_given_a_valid_one():
    """Promise: a gated step whose label makes the template's block key invalid still uploads when held."""
    text = STEP_FILE.replace("- label: Gated\n", "- label: 'Gated Step!'\n")
    source, generated = _generated(text)
    pipeline, held = keepgoing.hold(source, generated, [_error(3)])
    block, gated = pipeline["steps"][0]["steps"][3:5]
    assert block["key"] == gated["depends_on"] == "rocmci-hold-0"
    assert block["block"] == "rocmci: problem at 3 (steps.yaml:3) - run mi300_1: Gated Step! anyway?"
    assert [(h.title, h.how) for h in held] == [("mi300_1: Gated Step!", "held")]


def test_errors_are_grouped_by_the_step_that_holds_their_line():
    """Promise: a finding belongs to the step whose lines hold it; one above the first step, in another
    file, or a warning, belongs to none."""
    source, _ = _generated()
    findings = [_error(1), _error(2), _error(6), _error(7), _error(12), _error(13, severity=WARNING)]
    assert keepgoing.errors_by_step(source, findings) == {0: findings[1:3], 1: [findings[3]], 3: [findings[4]]}
    assert keepgoing.step_of_line(source, 1) is None and keepgoing.step_of_line(source, 99) == 4
    empty = src_mod.from_document(yamldoc.parse("steps: []\n", "e.yaml"))
    assert keepgoing.step_of_line(empty, 3) is None


def test_the_annotation_says_what_was_found_and_what_was_done():
    """Promise: the Buildkite annotation counts errors and warnings, names each held or left-out step,
    and lists every finding."""
    findings = [_error(3, "bad"), _error(5, "worse"), _error(9, "meh", WARNING)]
    held = [
        keepgoing.Held(0, "mi300_1: Gated", (findings[0],), "held"),
        keepgoing.Held(2, "step 3", (findings[0],), "left out"),
    ]
    assert keepgoing.annotation("steps.yaml", findings, held) == (
        "**rocmci** checked `steps.yaml`: 2 errors, 1 warning.\n"
        "\n"
        "- `mi300_1: Gated`: held behind a block step\n"
        "- `step 3`: left out of the pipeline\n"
        "\n"
        "```\n"
        "steps.yaml:3:3: error [gpu-count] bad\n"
        "steps.yaml:5:3: error [gpu-count] worse\n"
        "steps.yaml:9:3: warning [gpu-count] meh\n"
        "```\n"
    )
    assert (
        keepgoing.annotation("s.yaml", [], []) == "**rocmci** checked `s.yaml`: 0 errors, 0 warnings.\n\n\n```\n```\n"
    )


def test_a_held_pipeline_publishes_no_secret():
    """Promise: --keep-going's pipeline holds no secret: env entries the rule flags are left out, a token
    anywhere else becomes ***, and 'redacted' in keys and depends_on where Buildkite refuses '*'."""
    pipeline = {
        "env": {"HF_TOKEN": "plain-secret", "KEPT": "visible", "N": 3},
        "steps": [
            {
                "label": f"leaky {TOKEN}",
                "key": f"k-{TOKEN}",
                "depends_on": [f"d-{TOKEN}", "plain", {"step": f"s-{TOKEN}", "allow_failure": True}],
                "agents": {"queue": "amd_mi300_1", TOKEN: "x", "token": TOKEN, 7: "seven"},
                "env": {"API_KEY": "$FROM_AGENT", "INNOCENT": TOKEN, "COUNT": 2, TOKEN: "v"},
                "commands": [f"curl -H 'Authorization: token {TOKEN}' x", 5, None],
            }
        ],
    }
    out = keepgoing.without_secrets(pipeline)
    assert out == {
        "env": {"KEPT": "visible", "N": 3},
        "steps": [
            {
                "label": "leaky ***",
                "key": "k-redacted",
                "depends_on": ["d-redacted", "plain", {"step": "s-redacted", "allow_failure": True}],
                "agents": {"queue": "amd_mi300_1", "***": "x", "token": "***", 7: "seven"},
                "env": {"API_KEY": "$FROM_AGENT", "COUNT": 2, "***": "v"},
                "commands": ["curl -H 'Authorization: token ***' x", 5, None],
            }
        ],
    }
    assert pipeline["env"]["HF_TOKEN"] == "plain-secret"  # a new pipeline; the input is not changed


def test_a_pool_slip_and_a_new_pool_at_the_edges_of_the_gpu_count():
    """Promise: a well-formed name with a power-of-two GPU count from 1 up is a new pool, never a slip;
    0 GPUs, or a count of four digits or more (compared as text, never converted), can be a slip; the
    nearest counts come first, and a pool without a count before pools with one."""
    assert rules.near_pools("mi400_1", ["mi300_1"]) == []
    assert rules.near_pools("mi300_0", ["mi300_2"]) == ["mi300_2"]
    assert rules.near_pools("mi300_1024", ["mi300_102"]) == ["mi300_102"]
    assert rules.near_pools("mi300_1000", ["mi300_1001", "mi300_100"]) == ["mi300_100", "mi300_1001"]
    assert rules.near_pools("mi300_3", ["mi300_2", "mi300_x", "mi300_4"]) == ["mi300_x", "mi300_2", "mi300_4"]


def test_a_held_step_is_named_by_pool_and_label_with_no_token():
    """Promise: --keep-going names a held step '<pool>: <label>' ('?' for what it lacks, 'step N' for a step
    that is not a mapping), and a token in the label is masked: the block label is published."""
    assert keepgoing._title({"agent_pool": "mi300_1", "label": f"Leaky {TOKEN}"}, 0) == "mi300_1: Leaky ***"
    assert keepgoing._title({"label": "No pool"}, 0) == "?: No pool"
    assert keepgoing._title({"agent_pool": "mi300_1"}, 0) == "mi300_1: ?"
    assert keepgoing._title("just text", 4) == "step 5"


def test_two_held_steps_with_the_same_pool_and_label_get_different_block_keys():
    """Promise: every block step --keep-going adds has a key of its own, even for two steps the template
    names alike (the same pool and label), so Buildkite accepts the upload."""
    twice = "- label: Same\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n  commands: [pytest]\n"
    source, generated = _generated("steps:\n" + twice + twice, run_all="1")
    pipeline, held = keepgoing.hold(source, generated, [_error(3), _error(7)])
    members = pipeline["steps"][0]["steps"][3:]
    assert [(m.get("key"), m.get("depends_on")) for m in members] == [
        ("block-mi300_1-same", generate.IMAGE_STEP_KEY),
        (None, "block-mi300_1-same"),
        ("rocmci-hold-1", generate.IMAGE_STEP_KEY),
        (None, "rocmci-hold-1"),
    ]
    assert [(h.step_index, h.how) for h in held] == [(0, "held"), (1, "held")]


def test_a_slip_names_at_most_two_pools_and_other_queues_are_judged_whole():
    """Promise: 'did you mean' names the two nearest pools, not more; a queue without the amd_ prefix is
    judged as written (a slip of amd-cpu is an error, a short unknown queue a warning)."""
    three = rules.Context(with_mi300_4(INVENTORY), ("gfx942",))
    where = f"the inventory {INVENTORY.filename}"
    text = "steps:\n" + step("slip", "amd_mi300_3") + step("cpu slip", "amd-cpx") + step("short", "cpu")
    assert found(text, "unknown-queue", context=three) == [
        f"p.yaml:3:3: error [unknown-queue] pool 'mi300_3' (queue 'amd_mi300_3') is not in {where}; did you mean "
        "mi300_2 or mi300_4? No agent serves that queue: the step would never be scheduled",
        f"p.yaml:7:3: error [unknown-queue] pool 'amd-cpx' (queue 'amd-cpx') is not in {where}; did you mean "
        "amd-cpu? No agent serves that queue: the step would never be scheduled",
        f"p.yaml:11:3: warning [unknown-queue] queue 'cpu' is not in {where}: a new pool? add it there "
        "(agents: false if it is drained), or the step waits for an agent that may not exist",
    ]


def test_a_cycle_behind_a_second_dependency_and_a_repeated_edge_are_each_reported_once():
    """Promise: every dependency of a step is followed (a cycle reached only through the second entry is
    found), and a cycle reached twice (depends_on names the same step twice) is one finding."""
    text = (
        "steps:\n"
        + step("x", extra="key: x\ndepends_on: [z, y]")
        + step("y", extra="key: y\ndepends_on: x")
        + step("z", extra="key: z")
        + step("a", extra="key: a\ndepends_on: b")
        + step("b", extra="key: b\ndepends_on: [a, a]")
    )
    assert found(text, "dependency-cycle") == [
        "p.yaml:7:3: error [dependency-cycle] dependency cycle: x -> y -> x; these steps would never start",
        "p.yaml:24:3: error [dependency-cycle] dependency cycle: a -> b -> a; these steps would never start",
    ]
