"""vLLM's DeepEP workloads as plans (argv, env, GPUs needed), and the preflight that guards them."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rocmci import arch as archmod
from rocmci.errors import PreflightError, UsageError
from rocmci.gpus import Gpu
from rocmci.report import plural
from rocmci.values import parse_int
from rocmci.workaround_registry import Workaround, env_for

WORKSPACE = "/vllm-workspace"
DP_EXAMPLE = "examples/offline_inference/data_parallel.py"
DP_EXAMPLE_MOVED = "examples/features/data_parallel/data_parallel_offline.py"  # since April 2026
MOE_TEST_FILE = "tests/kernels/moe/test_deepep_moe.py"
# Upstream runs the whole module in one pytest; rocmci runs it as two complementary halves so a
# workaround scoped to one never reaches the other. Together they select every test of the module, so
# a test the module gains is never dropped (the low-latency tests are the ones named low_latency).
MOE_MODES = {
    "high-throughput": "not low_latency",
    "low-latency": "low_latency",
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
# run-amd-test.sh's defaults (`: "${NAME:=default}"`): the host's value when it has one, else these.
# PYTEST_TIMEOUT stops a hung test (pytest-timeout reads it); PYTHONFAULTHANDLER dumps stacks on a crash.
RUNNER_DEFAULTS = {
    "HF_HUB_DOWNLOAD_TIMEOUT": "300",
    "HF_HUB_ETAG_TIMEOUT": "60",
    "PYTHONFAULTHANDLER": "1",
    "PYTEST_TIMEOUT": "2400",
}
# The PYTEST_ADDOPTS the runner appends unless already there: stack dumps of a test hung for 25 minutes
# and the slowest tests listed. (Its --color and --timeout-method are not: see README.)
PYTEST_ADDOPTS = (("--durations=", "--durations=25"), ("--durations-min=", "--durations-min=1.0"),
                  ("faulthandler_timeout=", "-o faulthandler_timeout=1500"))  # fmt: skip
HF_MOUNT = "/root/.cache/huggingface"
STAGED_WORKSPACE = "/opt/vllm-ci/workspace"  # where vLLM's CI image keeps the tests; the runner copies it
# pytest keeps only the last -k: one in --extra (or in the step's command) would silently replace the
# mode's and run the other mode's tests under this mode's workarounds, so it is and-ed into the mode's.
KEYWORD_OPTIONS = ("-k", "--keyword")
# The step's own JUnit path is dropped for rocmci's. One in --extra is passed on: pytest then writes only
# there, and the run fails for want of its report (a report elsewhere proves nothing about this run).
JUNIT_OPTIONS = ("--junitxml", "--junit-xml")


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
    needs_deepep: bool = True  # preflight checks the image's DeepEP archs against the GPUs
    about: tuple[str, ...] = ()  # what the dry run shows first (run.step: the generated step)

    @property
    def sharded(self) -> bool:
        return "rocmci_shard" in self.argv

    def command_line(self) -> str:
        """The workload as a shell line, e.g. VLLM_LOGGING_LEVEL=DEBUG python3 examples/...; for people, not shells."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def dp_example(
    *, model: str, tp: int, dp: int, max_model_len: int, backend: str, example: str, extra: Sequence[str] = (),
    flags: tuple[str, str] = ("-tp", "-dp"), env: Mapping[str, str] | None = None,
) -> Workload:  # fmt: skip
    """The example's command line; values arrive checked and defaulted (cli/flags.py).

    `flags`: the example's own spelling of the parallel sizes (older examples take --tp-size/--dp-size);
    `env`: the variables the step file's command sets for it (the seed: VLLM_LOGGING_LEVEL=DEBUG).
    """
    argv = (
        "python3",
        example,
        f"--model={model}",
        f"{flags[0]}={tp}",
        f"{flags[1]}={dp}",
        f"--max-model-len={max_model_len}",
        f"--all2all-backend={backend}",
        *extra,
    )
    chosen = {"VLLM_LOGGING_LEVEL": "DEBUG"} if env is None else dict(env)
    return Workload("dp-example", "dp-example", argv, chosen, gpus=tp * dp)


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
    test_file: str = MOE_TEST_FILE,
    options: Sequence[str] = ("-v", "-s"),
) -> list[Workload]:
    """One pytest run per mode and shard, so a workaround scoped to one mode never leaks into the other.

    Workarounds named in `obsolete` (their removal condition is met) are left out. `color`: the output is
    streamed to a colour terminal, so pytest colours it although its own stdout is a pipe.
    """
    extra_keywords, extra = split_keywords(extra)
    keywords = [k for k in (keyword, *extra_keywords) if k]
    out = []
    for mode in modes:
        if mode not in MOE_MODES:
            raise UsageError(f"unknown mode {mode!r}", hint=f"choose {', '.join(MOE_MODES)} or both")
        expression = " and ".join(f"({k})" for k in (MOE_MODES[mode], *keywords)) if keywords else MOE_MODES[mode]
        env, ids = env_for(list(registry), "moe-tests", mode, set(obsolete))
        for index in range(shards):
            suffix = f"-shard{index}" if shards > 1 else ""
            junit = f"junit-moe-{mode}{suffix}.xml"
            sharding = ("-p", "rocmci_shard", f"--rocmci-shard={index}/{shards}") if shards > 1 else ()
            argv = (
                "python3",
                "-m",
                "pytest",
                *options,
                test_file,
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


def split_keywords(extra: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the -k expressions in --extra, the other words): the run passes one -k, the mode's and-ed with these."""
    keywords: list[str] = []
    rest: list[str] = []
    words = iter(extra)
    for word in words:
        name, eq, value = word.partition("=")
        if word in KEYWORD_OPTIONS:
            following = next(words, None)
            if following is None:
                raise UsageError(f"--extra ends with {word} and no expression", hint="use -k EXPR, e.g. -k fp8")
            keywords.append(following)
        elif name == "--keyword" and eq:
            keywords.append(value)
        elif word.startswith("-k") and not word.startswith("--"):
            keywords.append(word[2:])
        else:
            rest.append(word)
    return keywords, rest


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
            hint="use fewer --shards or a bigger host" if runs > 1 else "use a host with more GPUs, or ask for fewer",
        )
    return [pool[i * per_run : (i + 1) * per_run] for i in range(runs)]


def check_archs(gpus: Sequence[Gpu], image_archs: str | None, image: str, source: str = "") -> None:
    """The image's DeepEP must be built for every GPU the run uses; `source` says where the list was read."""
    if not image_archs:
        raise PreflightError(
            f"image {image} does not say which GPUs its DeepEP is built for ({source or 'no arch label'})",
            hint="build it with `rocmci image.build`, or pass --skip-preflight if you know it fits",
        )
    built = set(archmod.parse_arch_list(image_archs, what=f"image {source or 'arch label'}"))
    for gpu in gpus:
        if gpu.arch not in built:
            raise PreflightError(
                f"GPU {gpu.index} is {archmod.describe(gpu.arch)} but image {image} is built for {image_archs}",
                hint=f"build an image for it (`rocmci image.build --arch native`) or pick GPUs of {image_archs}",
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
    try:  # ASCII digits, bounded: '²'.isdigit() is true but int('²') fails, 5,000 digits exceed int()'s limit
        return parse_int(raw, "VLLM_CI_EXPECTED_GPU_COUNT", low=0)
    except UsageError as exc:
        raise UsageError(exc.message, hint="set it to the number of GPUs of this pod, e.g. 8") from None


def pytest_addopts(inherited: str) -> str:
    """The runner's PYTEST_ADDOPTS: what the host set, plus each default whose option is not there yet."""
    out = inherited.strip()
    for marker, option in PYTEST_ADDOPTS:
        if marker not in f" {out} ":
            out = f"{out} {option}".strip()
    return out


def runner_defaults(inherited: Mapping[str, str]) -> dict[str, str]:
    """What the runner exports for every test process, in both its Docker and its native path."""
    env = {name: inherited.get(name) or default for name, default in RUNNER_DEFAULTS.items()}
    env["PYTEST_ADDOPTS"] = pytest_addopts(inherited.get("PYTEST_ADDOPTS", ""))
    return env


def job_id(inherited: Mapping[str, str], fallback: str) -> str:
    """The runner's container_job_id: the Buildkite job (or parallel job), made safe for a path."""
    raw = inherited.get("BUILDKITE_JOB_ID") or inherited.get("BUILDKITE_PARALLEL_JOB") or fallback
    return "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in raw)


def container_env(job: str, inherited: Mapping[str, str]) -> dict[str, str]:
    """The -e values of the runner's `docker run`: per-job TMPDIR and caches, HF settings, test defaults."""
    cache = f"/tmp/vllm-buildkite-{job}/cache"
    return {
        **runner_defaults(inherited),
        "HF_HOME": HF_MOUNT,
        "TMPDIR": f"/tmp/vllm-{job[:8]}/tmp",
        "TIKTOKEN_RS_CACHE_DIR": f"{HF_MOUNT}/tiktoken-rs-cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",
        "TRITON_CACHE_DIR": f"{cache}/triton",
        "VLLM_CACHE_ROOT": f"{cache}/vllm",
        "XDG_CACHE_HOME": f"{cache}/xdg",
    }


def parallel_env(job: int | None, count: int | None) -> dict[str, str]:
    """BUILDKITE_PARALLEL_JOB(_COUNT) for one shard of a step with parallelism, as Buildkite sets them."""
    if job is None or not count:
        return {}
    return {"BUILDKITE_PARALLEL_JOB": str(job), "BUILDKITE_PARALLEL_JOB_COUNT": str(count)}


# The runner's CONTAINER_PREFLIGHT without its import check (see README): the staged tests copied to the
# workspace when the image has them (vLLM's CI images do, rocmci's own keep the tree in place), and the
# per-job folders made.
PREFLIGHT = (
    f"if [ -d {STAGED_WORKSPACE} ]; then mkdir -p {WORKSPACE} && cp -a {STAGED_WORKSPACE}/. {WORKSPACE}/; fi"
    ' && mkdir -p "$TMPDIR" "$TIKTOKEN_RS_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR"'
    ' "$VLLM_CACHE_ROOT" "$XDG_CACHE_HOME"'
)


def in_container(argv: Sequence[str]) -> tuple[str, ...]:
    """A workload's argv behind the runner's preflight; its arguments stay argv, never shell text."""
    return ("/bin/sh", "-c", PREFLIGHT + ' && exec "$@"', "rocmci", *argv)
