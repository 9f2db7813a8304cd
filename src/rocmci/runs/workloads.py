"""vLLM's DeepEP workloads as plans (argv, env, GPUs needed), and the preflight that guards them."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rocmci import arch as archmod
from rocmci.errors import PreflightError, UsageError
from rocmci.gpus import Gpu
from rocmci.report import plural
from rocmci.runs.workarounds import Workaround, env_for

WORKSPACE = "/vllm-workspace"
DP_EXAMPLE = "examples/offline_inference/data_parallel.py"
DP_EXAMPLE_MOVED = "examples/features/data_parallel/data_parallel_offline.py"  # since April 2026
MOE_TEST_FILE = "tests/kernels/moe/test_deepep_moe.py"
MOE_MODES = {
    "high-throughput": "test_deep_ep_moe and not low_latency",
    "low-latency": "test_low_latency_deep_ep_moe",
}
MOE_GPUS = 2  # multi_gpu_test(num_gpus=2) in vLLM's test module
RESULTS_MOUNT = "/rocmci-results"
BASE_PORT = 29500
# What vLLM's runner (.buildkite/scripts/hardware_ci/run-amd-test.sh) sets for every test process,
# in both its Docker and its native in-pod path: an empty arch list, so nothing JIT-compiles for the
# image's wide build list, and the workspace on PYTHONPATH, so spawned workers import like the parent.
RUNNER_ENV = {"PYTORCH_ROCM_ARCH": ""}
# Orchestration variables the runner unsets before it starts the tests (clear_ci_orchestration_env):
# they describe the CI job, and vLLM must not see them. Checked against the fixture in the tests.
ORCHESTRATION_VARS = (
    "VLLM_TEST_GROUP_NAME",
    "VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE",
    "VLLM_CI_ARTIFACT_STEP",
    "VLLM_TEST_CACHE",
    "VLLM_CI_EXECUTION_MODE",
    "VLLM_CI_WORKSPACE",
    "VLLM_CI_REQUIRE_WORKSPACE_MOUNT",
    "VLLM_TEST_COMMANDS",
    "VLLM_CI_BRANCH",
    "ROCM_BASE_DOCKERFILE",
    "CI_BASE_DOCKERFILE",
    "VLLM_CI_DOCKER_DISABLED",
    "VLLM_CI_DIAGNOSTICS_DIR",
    "VLLM_CI_EXPECTED_GPU_COUNT",
    "VLLM_CI_K8S_POD_NAME",
    "VLLM_CI_K8S_NAMESPACE",
    "VLLM_CI_K8S_NODE_NAME",
    "VLLM_CI_RESULTS_ROOT",
    "VLLM_ALLOW_DEPRECATED_BEAM_SEARCH",
)
PYTEST_NO_TESTS = 5  # the runner's handle_pytest_exit turns this into success
GPU_HANG_EXIT = 134  # SIGABRT from a ROCm/KFD GPU hang: the pipeline retries the job once on it


@dataclass(frozen=True)
class Workload:
    name: str  # shown in reports, e.g. "moe-tests high-throughput"
    kind: str  # "dp-example" or "moe-tests": what workaround scopes name
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    gpus: int = 1
    junit: str | None = None  # file name of the JUnit XML in the results folder
    workarounds: tuple[str, ...] = ()
    group: str | None = None  # shards of one run share a group and are reported as one

    @property
    def sharded(self) -> bool:
        return "rocmci_shard" in self.argv

    def command_line(self) -> str:
        """The workload as a shell line, e.g. VLLM_LOGGING_LEVEL=DEBUG python3 examples/...; for people, not shells."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def dp_example(
    *, model: str, tp: int, dp: int, max_model_len: int, backend: str, example: str, extra: Sequence[str] = ()
) -> Workload:
    """The example's command line; values arrive checked and defaulted (cli/flags.py)."""
    argv = (
        "python3",
        example,
        f"--model={model}",
        f"-tp={tp}",
        f"-dp={dp}",
        f"--max-model-len={max_model_len}",
        f"--all2all-backend={backend}",
        *extra,
    )
    return Workload("dp-example", "dp-example", argv, {"VLLM_LOGGING_LEVEL": "DEBUG"}, gpus=tp * dp)


def moe_tests(
    *,
    modes: Sequence[str],
    registry: Sequence[Workaround],
    keyword: str | None = None,
    extra: Sequence[str] = (),
    shards: int = 1,
    results_path: str = RESULTS_MOUNT,
    obsolete: frozenset[str] = frozenset(),
    color: bool = False,
) -> list[Workload]:
    """One pytest run per mode and shard, so a workaround scoped to one mode never leaks into the other.

    Workarounds named in `obsolete` (their removal condition is met) are left out. `color`: the output is
    streamed to a colour terminal, so pytest colours it although its own stdout is a pipe.
    """
    out = []
    for mode in modes:
        if mode not in MOE_MODES:
            raise UsageError(f"unknown mode {mode!r}", hint=f"choose {', '.join(MOE_MODES)} or both")
        expression = MOE_MODES[mode] if not keyword else f"({MOE_MODES[mode]}) and ({keyword})"
        env, ids = env_for(list(registry), "moe-tests", mode, set(obsolete))
        for index in range(shards):
            suffix = f"-shard{index}" if shards > 1 else ""
            junit = f"junit-moe-{mode}{suffix}.xml"
            sharding = ("-p", "rocmci_shard", f"--rocmci-shard={index}/{shards}") if shards > 1 else ()
            argv = (
                "python3",
                "-m",
                "pytest",
                "-v",
                "-s",
                MOE_TEST_FILE,
                "-k",
                expression,
                *sharding,
                *(("--color=yes",) if color else ()),
                f"--junitxml={results_path}/{junit}",
                *extra,
            )
            name = f"moe-tests {mode}" + (f" shard {index}/{shards}" if shards > 1 else "")
            out.append(Workload(name, "moe-tests", argv, dict(env), MOE_GPUS, junit, tuple(ids), mode))
    return out


def expand_modes(mode: str) -> tuple[str, ...]:
    """--mode (a checked choice) as the modes to run, one after the other."""
    return tuple(MOE_MODES) if mode == "both" else (mode,)


def choose_gpus(
    available: Sequence[Gpu], wanted: Sequence[int] | None, per_run: int, runs: int
) -> list[list[Gpu]]:
    """Disjoint GPU sets, one per run; `wanted` holds distinct GPU indices (default: the first ones)."""
    if wanted:
        by_index = {g.index: g for g in available}
        missing = [i for i in wanted if i not in by_index]
        if missing:
            raise PreflightError(f"no GPU {missing[0]} on this host (found {len(available)})")
        pool = [by_index[i] for i in wanted]
    else:
        pool = list(available)
    need = per_run * runs
    if len(pool) < need:
        raise PreflightError(
            f"{plural(runs, 'run')} of {plural(per_run, 'GPU')}: together they need {need} GPUs, "
            f"this host offers {len(pool)}",
            hint="use fewer --shards or a bigger host",
        )
    return [pool[i * per_run : (i + 1) * per_run] for i in range(runs)]


def check_archs(gpus: Sequence[Gpu], image_archs: str | None, image: str) -> None:
    """The image's DeepEP must be built for every GPU the run uses."""
    if not image_archs:
        raise PreflightError(f"image {image} has no rocmci.arch label", hint="build it with `invoke image.build`")
    built = set(archmod.parse_arch_list(image_archs, what="image label rocmci.arch"))
    for gpu in gpus:
        if gpu.arch not in built:
            raise PreflightError(
                f"GPU {gpu.index} is {archmod.describe(gpu.arch)} but image {image} is built for {image_archs}",
                hint=f"build an image for it (`invoke image.build --arch native`) or pick GPUs of {image_archs}",
            )


def shard_env(index: int) -> dict[str, str]:
    """Distinct rendezvous ports per shard: shards on one host share its network namespace."""
    port = BASE_PORT + 100 * index
    return {"MASTER_PORT": str(port), "VLLM_PORT": str(port + 10)}


def runner_env(workspace: str, plugins: str | None = None) -> dict[str, str]:
    """The environment vLLM's runner gives a test process, plus rocmci's shard plugin when one is used."""
    return {**RUNNER_ENV, "PYTHONPATH": ":".join(filter(None, [workspace, plugins]))}


def visible_env(gpus: Sequence[Gpu]) -> dict[str, str]:
    """Host mode: only the chosen GPUs visible. ROCR filters by KFD index first; HIP and CUDA then index
    what is left from 0, so they are set too, or an inherited value would pick from the wrong list."""
    if not gpus:
        return {}
    relative = ",".join(str(n) for n in range(len(gpus)))
    return {
        "ROCR_VISIBLE_DEVICES": ",".join(str(g.index) for g in gpus),
        "HIP_VISIBLE_DEVICES": relative,
        "CUDA_VISIBLE_DEVICES": relative,
    }


def host_env(inherited: Mapping[str, str]) -> dict[str, str]:
    """The host environment a host-mode workload inherits: without the CI job's orchestration variables."""
    return {k: v for k, v in inherited.items() if k not in ORCHESTRATION_VARS}


def expected_gpu_count(env: Mapping[str, str]) -> int | None:
    """VLLM_CI_EXPECTED_GPU_COUNT, which vLLM's pipeline sets for every step (the GPUs of the agent's pod)."""
    raw = env.get("VLLM_CI_EXPECTED_GPU_COUNT")
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise UsageError(f"invalid VLLM_CI_EXPECTED_GPU_COUNT={raw!r}", hint="it must be a whole number of GPUs")
    return int(raw)
