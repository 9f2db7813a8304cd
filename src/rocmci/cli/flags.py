"""Every flag of every task: its help, its one parser and its one default.

Task functions declare each flag with `None` (or `False` for a switch) and hand what they got to
`parse`, which returns typed values (tuples of GPU indices, env pairs, bounded ints, choices, image
references). A flag whose value is a setting is parsed by the settings registry (settings.convert),
so its default lives there; every other flag's default lives here. tests/unit/test_flags.py checks
that each task's flags are in this table, with help, and that no task repeats a default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from rocmci import values as v
from rocmci.errors import UsageError

# vLLM's --all2all-backend choices (vllm/config/parallel.py All2AllBackend) when no checkout says
# otherwise; with a checkout, runs/service.py also refuses one the checkout's vLLM does not list.
BACKENDS = ("naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "allgather_reducescatter",
            "flashinfer_all2allv", "mori")  # fmt: skip
MODES = ("high-throughput", "low-latency", "both")
WORKLOADS = ("moe-tests", "dp-example")
FORMATS = ("yaml", "json")
TARGETS = ("test", "ci_base", "final", "base")
PURPOSES = ("build", "run", "pipeline")
ONLY = ("run", "blocked", "skipped")
# Upper bounds are sanity caps checked before anything is allocated; the host's real GPU count is
# checked by preflight (runs), which names both numbers.
MAX_GPUS_PER_HOST = 64
MAX_TIMEOUT = 7 * 24 * 3600


class Flag(NamedTuple):
    help: str
    parse: Callable[[str, Any], Any] | None = None  # (flag text, raw) -> typed value; None: kept as given
    default: Any = None
    setting: str | None = None  # the value is this setting: parsed and defaulted by the settings registry
    switch: bool = False  # a boolean flag (present or not)


def _int(low: int, high: int):
    return lambda flag, raw: v.bounded_int(flag, raw, low, high)


def _choice(choices):
    return lambda flag, raw: v.choice(flag, raw, choices)


_path = v.path_text
MAX_LABEL = 100  # GitHub's own limit on a label's name is 50 characters


def _labels(flag: str, items) -> tuple[str, ...]:
    """PR label names: printable text, bounded (they are printed by pipeline.plan and compared as text)."""
    from rocmci.errors import UsageError

    for name in items:
        if not name.strip() or len(name) > MAX_LABEL or not name.isprintable():
            hint = f"printable text of 1 to {MAX_LABEL} characters"
            raise UsageError(f"{flag} {v.shown(name)} is not a label name", hint=hint)
    return tuple(items)


_SOURCE = "vLLM-style step file (default: the 'source' setting, .buildkite/test-amd.yaml)"
FLAGS: dict[str, Flag] = {
    # Output and modes shared by many tasks: one name and one meaning everywhere.
    "json": Flag("print JSON instead of text", switch=True),
    "dry_run": Flag("print exactly what would run (commands, environment); run nothing, no engine needed", switch=True),
    "force": Flag("build even when an image with the same input hash exists", switch=True),
    "strict": Flag("fail where vLLM's runner passes: an obsolete workaround, no tests collected", switch=True),
    "vllm_src": Flag("vLLM checkout (default: the one holding the current folder; setting vllm_src)",
                     setting="vllm_src"),  # fmt: skip
    # Settings given as flags.
    "arch": Flag("GPU archs for rocSHMEM and DeepEP, e.g. 'gfx942;gfx950' (default: vLLM's DEEPEP_ROCM_ARCH)",
                 setting="arch"),  # fmt: skip
    "vllm_arch": Flag("archs vLLM itself is built for (default: vLLM's bake file); must cover --arch",
                      setting="vllm_arch"),  # fmt: skip
    "mirror_hw": Flag("mirror_hardwares value a step must list (default: setting mirror_hw)", setting="mirror_hw"),
    "branch": Flag("branch the pipeline is for (default: setting branch, else $BUILDKITE_BRANCH)", setting="branch"),
    "deepep_ref": Flag("DeepEP commit instead of vLLM's DEEPEP_BRANCH", setting="deepep_ref"),
    "rocshmem_ref": Flag("rocm-systems commit instead of vLLM's ROCSHMEM_BRANCH", setting="rocshmem_ref"),
    "base_image": Flag("base image instead of vLLM's BASE_IMAGE", setting="base_image"),
    "network": Flag("build network: none, host or default (setting build_network)", setting="build_network"),
    "image": Flag("image to run in or read labels from (default: setting image, else the tag image.build makes)",
                  v.image_ref),  # fmt: skip
    # Its default is the run_timeout setting (read by runs/service.py); bounded here so the message names --timeout.
    "timeout": Flag("seconds before the run is stopped (default: setting run_timeout)", _int(1, MAX_TIMEOUT)),
    # Pipeline.
    "source": Flag(_SOURCE, _path),
    "pipeline": Flag("an existing Buildkite pipeline file to validate instead (list or mapping form)", _path),
    "changed_files": Flag("file listing the changed paths, one per line", _path),
    "diff_base": Flag("git ref to diff HEAD against for the changed paths (REF...HEAD)", v.git_ref),
    "run_all": Flag("run every step: no block steps for unaffected steps (RUN_ALL=1)", switch=True),
    "nightly": Flag("nightly run: optional steps run too (NIGHTLY=1)", switch=True),
    "label": Flag("a label of the PR (repeatable; default: $BUILDKITE_PULL_REQUEST_LABELS on a PR build), e.g. "
                  "ready-run-all-tests, ci-no-fail-fast", _labels, default=()),  # fmt: skip
    "only": Flag("show only the steps that run, are blocked, or are skipped (not on the mirror)",
                 _choice(ONLY)),  # fmt: skip
    "out": Flag("write here (atomically) instead of stdout", _path),
    "format": Flag("output format: yaml or json", _choice(FORMATS), default="yaml"),
    "keep_going": Flag("write the pipeline even with errors: those steps wait behind block steps", switch=True),
    "annotation": Flag("also write the findings as Markdown here (for buildkite-agent annotate)", _path),
    "template": Flag("ci-infra's buildkite/test-template-amd.j2 to compare against (required)", _path),
    "examples": Flag("how many differences to print", _int(0, 100_000), default=20),
    # Host.
    "for_": Flag("exit non-zero when something this task needs is missing: build, run or pipeline",
                 _choice(PURPOSES)),  # fmt: skip
    "host_root": Flag("read /sys and /dev below this folder instead of / (for fake device trees)", _path,
                      default="/"),  # fmt: skip
    # Image.
    "target": Flag("stage of vLLM's Dockerfile: test (on a ci_base built or reused first), ci_base or final; "
                   "base builds docker/Dockerfile.rocm_base",
                   _choice(TARGETS), default="test"),  # fmt: skip
    "ci_base": Flag("build test on this existing ci_base image instead of building one", v.image_ref),
    "tag": Flag("image tag (default: <image_repo>:<target>-<archs>; image.inspect: the configured image)",
                v.image_ref),  # fmt: skip
    "push": Flag("push the image after building it", switch=True),
    "build_arg": Flag("NAME=VALUE for an ARG the Dockerfile declares (repeatable); on a small host "
                      "--build-arg max_jobs=8 caps vLLM's compile jobs, as its bake file's MAX_JOBS does",
                      lambda flag, raw: _build_args(flag, raw), default=()),  # fmt: skip
    "from_": Flag("vLLM ROCm image to rebuild rocSHMEM and DeepEP in (e.g. rocm/vllm-ci:<commit>; required)",
                  v.image_ref),  # fmt: skip
    # Runs.
    "gpus": Flag("GPU indices to use, e.g. 0,1 (default: the first ones)", v.gpu_indices),
    "skip_preflight": Flag("start even if the image, archs, GPUs or /dev/kfd look wrong (experts)", switch=True),
    "no_container": Flag("run as a process of this host (a CI pod inside the image)", switch=True),
    "env": Flag("NAME=value for the workload (repeatable); every value is redacted from output", v.env_pairs,
                default=v.EnvPairs()),  # fmt: skip
    "public": Flag("NAME of an --env or environment variable whose value may be shown (repeatable)", v.env_names,
                   default=frozenset()),  # fmt: skip
    "workdir": Flag("working directory of the workload (default: /vllm-workspace, or $VLLM_CI_WORKSPACE on host)",
                    _path),  # fmt: skip
    "extra": Flag("extra arguments for the workload, as one quoted string (redacted in output)", v.shell_words,
                  default=()),  # fmt: skip
    "model": Flag("model to serve", default="Qwen/Qwen1.5-MoE-A2.7B"),
    "tp": Flag("tensor parallel size (-tp)", _int(1, MAX_GPUS_PER_HOST), default=1),
    "dp": Flag("data parallel size (-dp)", _int(1, MAX_GPUS_PER_HOST), default=2),
    "max_model_len": Flag("--max-model-len of the example", _int(1, 10_000_000), default=2048),
    "backend": Flag("--all2all-backend: " + ", ".join(BACKENDS), _choice(BACKENDS), default="deepep_high_throughput"),
    "example": Flag("path of the example in the image (default: detected)", _path),
    "mode": Flag("high-throughput, low-latency or both", _choice(MODES), default="both"),
    "k": Flag("extra pytest -k expression, and-ed with the mode's"),
    "shards": Flag("run N shards at once on disjoint GPU sets (N x 2 GPUs)", _int(1, MAX_GPUS_PER_HOST // 2),
                   default=1),  # fmt: skip
    "build_id": Flag("Buildkite build id: run in that build's image (rocm/vllm-ci:build-ID; a dind: false step: "
                     "rocm/vllm-dev:ci_base-build-ID)", lambda flag, raw: _build_id(flag, raw)),  # fmt: skip
    "pull": Flag("pull the image first (runs: a missing image is always pulled; image.build: BASE_IMAGE, so its "
                 "digest is the registry's current one)", switch=True),
    "step": Flag("the step to run: its label, 'pool: label' or key, as in the step file (required)"),
    "parallel_job": Flag("run only this parallel job of a step with parallelism (0-based, as Buildkite counts)",
                         _int(0, 99)),  # fmt: skip
    "good": Flag("a commit whose CI image passes the step (required; a hash, tag or ref of the checkout)"),
    "bad": Flag("a later commit whose CI image fails the step (required)"),
    "repeat": Flag("runs per commit, for flaky steps (1..20)", _int(1, 20), default=1),
    "bad_if": Flag("with --repeat: a commit is bad if any run fails, or only if all do", _choice(("any", "all")),
                   default="any"),  # fmt: skip
    "on": Flag("buildkite: write a pipeline with one job per candidate commit instead of running here",
               _choice(("buildkite",))),  # fmt: skip
    "from_results": Flag("folder (or file) of the outcome files the --on buildkite jobs uploaded: name the "
                         "first bad commit from them", _path),  # fmt: skip
    "junit": Flag("JUnit XML written by the run (required)", _path),
    "exit_code": Flag("the run's exit status, -255..255 (139 = died by SIGSEGV; required)", _int(-255, 255)),
    "workload": Flag("moe-tests or dp-example: which workarounds to name for a teardown crash", _choice(WORKLOADS),
                     default="moe-tests"),  # fmt: skip
}

# Short flags only where docker, pytest or nox users expect them; every other flag is long-only.
SHORT = {"tag": "t", "env": "e", "k": "k", "dry_run": "n"}
REPEATABLE = ("env", "public", "build_arg", "label")


def _build_args(flag: str, items) -> tuple[tuple[str, str], ...]:
    """NAME=VALUE pairs; which names the Dockerfile declares is checked where it is read (image/requests.py).

    A build arg is no place for a secret: docker prints it, keeps it in the image's history (`docker history`)
    and the Dockerfile may bake it into a layer (WORKDIR, ENV). A value with a URL's credentials or a
    credential's shape, or under a secret's name, is refused here, as the settings refuse such a URL; the
    refusal names the argument, never its value."""
    from rocmci.secrets import is_secret, secret_kind

    out = []
    for item in items:
        name, sep, value = str(item).partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            shown = v.shown(name) if sep else f"(an item of {len(str(item))} characters, not shown)"
            raise UsageError(f"{flag} {shown} must be NAME=VALUE", hint="e.g. --build-arg max_jobs=8")
        kind = "a URL with credentials" if v.url_credentials(value.strip()) else secret_kind(value)
        if kind or (value and is_secret(name)):
            what = f"its value looks like {kind}" if kind else "its name says it holds a secret"
            raise UsageError(
                f"{flag} {name}: {what}; build args are printed and kept in the image (docker history)",
                hint="give the build a URL without credentials (a git credential helper or a mirror), "
                "never a token as a build arg",
            )
        out.append((name, value))
    return tuple(out)

# What `-h` shows after a flag that takes a value: its kind, never invoke's STRING. Choices are listed.
PLACEHOLDERS = {
    "vllm_src": "PATH", "arch": "ARCHS", "vllm_arch": "ARCHS", "mirror_hw": "NAME", "branch": "BRANCH",
    "deepep_ref": "COMMIT", "rocshmem_ref": "COMMIT", "base_image": "IMAGE", "network": "NETWORK",
    "image": "IMAGE", "timeout": "SECONDS", "source": "FILE", "pipeline": "FILE", "changed_files": "FILE",
    "diff_base": "REF", "out": "FILE", "format": "yaml|json", "annotation": "FILE", "template": "FILE",
    "examples": "N", "for_": "build|run|pipeline", "host_root": "PATH", "target": "test|ci_base|final|base",
    "ci_base": "IMAGE", "tag": "IMAGE", "from_": "IMAGE", "gpus": "0,1,...", "env": "NAME=VALUE",
    "public": "NAME", "workdir": "PATH", "extra": "'ARGS'", "model": "MODEL", "tp": "N", "dp": "N",
    "max_model_len": "N", "backend": "BACKEND", "example": "PATH", "mode": "MODE", "k": "EXPR", "shards": "N",
    "junit": "FILE", "exit_code": "N", "workload": "moe-tests|dp-example", "label": "NAME",
    "only": "run|blocked|skipped", "build_arg": "NAME=VALUE", "build_id": "ID", "step": "STEP", "parallel_job": "N",
    "good": "REF", "bad": "REF", "repeat": "N", "bad_if": "any|all", "on": "buildkite", "from_results": "DIR",
}  # fmt: skip


def placeholder(name: str) -> str:
    """The value placeholder `-h` shows for flag `name` (tests/unit/test_flags.py: every valued flag has one)."""
    return PLACEHOLDERS.get(name, "TEXT")


def _build_id(flag: str, raw: str) -> str:
    from rocmci.runs.images import build_id

    return build_id(flag, raw)


def help_text(name: str) -> str:
    flag = FLAGS[name]
    shown = flag.default not in (None, (), frozenset()) and not isinstance(flag.default, v.EnvPairs)
    return f"{flag.help} (default: {flag.default})" if shown and "default" not in flag.help else flag.help


def flag_text(name: str) -> str:
    return "--" + name.rstrip("_").replace("_", "-")


class Values:
    """A task's flags as typed values (attribute access); settings-backed flags stay as given for resolve()."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.__dict__.update(data)

    def __repr__(self) -> str:
        return f"Values({self.__dict__!r})"


def parse(given: Mapping[str, Any]) -> Values:
    """Typed values for the flags a task received (invoke's Context `c` is skipped)."""
    out: dict[str, Any] = {}
    for name, raw in given.items():
        if name == "c":
            continue
        flag = FLAGS[name]
        if flag.switch:
            out[name] = bool(raw)
        elif raw is None or (name in REPEATABLE and not raw):
            out[name] = flag.default
        elif flag.parse is not None:
            out[name] = flag.parse(flag_text(name), raw)
        else:
            out[name] = raw
    return Values(out)
