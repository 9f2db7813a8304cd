"""The settings registry: every setting rocmci has, its help, its default, and the rule its values obey.

Kept apart from settings.py, which resolves them (default < pyproject < ROCMCI_* < flag), so the table
reads as one page. Each rule is checked for every origin by settings.convert().
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rocmci import values

ENV_PREFIX = "ROCMCI_"


class Setting(NamedTuple):
    name: str
    help: str
    kind: type = str
    default: Any = None
    # The default lives in the vLLM checkout (`vllm_src`), never here: "ARG:NAME" of docker/Dockerfile.rocm,
    # "bake:NAME" of docker/docker-bake-rocm.hcl, or "deepep-flags" (build_deepep's setup.py call).
    from_vllm: str | None = None
    # Checked for every layer (pyproject, env, flag) by convert(), so a value is validated by one rule
    # wherever it comes from. Bounds for int settings; a full-match pattern or a list of choices for text.
    min: int | None = None
    max: int | None = None
    pattern: str | None = None
    pattern_hint: str | None = None
    choices: tuple[str, ...] | None = None
    # A rule past the pattern, for text no regular pattern says well (docker's reference grammar): the value's
    # problem in a few words ("is not an image reference: ..."), or None when it is good. Empty values pass.
    check: Callable[[str], str | None] | None = None
    flag: str | None = None  # the flag that gives it, where that is not --<name> (cli/flags.py must agree)
    # An environment variable vLLM's CI scripts read for the same value (ci-bake-rocm.sh's DEEPEP_ROCM_ARCH,
    # PYTORCH_ROCM_ARCH): honoured as they honour it, below ROCMCI_<NAME>, above pyproject.
    ci_env: str | None = None

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag_text(self) -> str:
        """The flag messages name for a value given by flag: --network for build_network."""
        return self.flag or "--" + self.name.replace("_", "-")


# Value rules shared by several rows. Each is a full match; none lets a value start with '-' (so a
# positional value can never be read as an option) or hold whitespace, ';' or a control character.
_IMAGE_REF = values.IMAGE_REF.pattern  # registry/name:tag@digest: the same rule as the image flags
_IMAGE_HINT = values.IMAGE_REF_HINT
# The pipeline's tag is written into the pipeline for the agent to expand: $VAR and ${VAR} are allowed.
_PIPELINE_IMAGE_REF = r"[A-Za-z0-9$][A-Za-z0-9._/:@${}-]{0,254}"
_GIT_REPO = r"[A-Za-z0-9/.~][A-Za-z0-9._:/@+~%=-]{0,254}"  # URL, scp-like user@host:path, or a path
_GIT_REPO_HINT = "a git URL or path (it must not start with '-': git would read it as an option)"
_GIT_REF = r"[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}"
_GIT_REF_HINT = "a commit, tag or branch name (letters, digits and . _ / + -, not starting with '-')"
_SETUP_FLAG = r"(?:-{1,2}[A-Za-z0-9][A-Za-z0-9_.=+-]{0,99}|[A-Za-z0-9][A-Za-z0-9_.+-]{0,99})"  # one word
_SIZE = r"[0-9]{1,12}[bkmgBKMG]?"  # docker's --shm-size / --memory form
# Values of mirror_hardwares in vLLM's step files and ci-infra's bootstrap-amd.sh (amdtentative is the
# fastcheck pipeline's). An unknown value keeps no step: the pipeline would silently be the image steps only.
MIRROR_HW = (
    "amdproduction",
    "amdexperimental",
    "amdtentative",
    "amdmi250",
    "amdmi300",
    "amdmi325",
    "amdmi355",
    "amdgfx90anightly",
    "amdgfx942nightly",
    "amdgfx950nightly",
    "amdgfx955nightly",
)
MAX_RUN_SECONDS = 7 * 24 * 3600  # far beyond vLLM's longest job (its template caps steps at 180 minutes)

REGISTRY: tuple[Setting, ...] = (
    Setting(
        "vllm_src",
        "vLLM checkout whose docker/Dockerfile.rocm is the image (default: the checkout holding the current "
        "folder); "
        "also evidence for workarounds",
        default="",
    ),
    Setting("arch", "GPU archs for rocSHMEM and DeepEP (DEEPEP_ROCM_ARCH)", from_vllm="ARG:DEEPEP_ROCM_ARCH",
            ci_env="DEEPEP_ROCM_ARCH"),
    Setting("vllm_arch", "GPU archs vLLM is built for (ARG_PYTORCH_ROCM_ARCH)", from_vllm="bake:PYTORCH_ROCM_ARCH",
            ci_env="PYTORCH_ROCM_ARCH"),
    Setting(
        "base_image",
        "base image of vLLM's ROCm build",
        from_vllm="ARG:BASE_IMAGE",
        pattern=_IMAGE_REF,
        pattern_hint=_IMAGE_HINT,
        check=values.image_ref_problem,
    ),
    Setting(
        "ci_base_image",
        "vLLM's CI base (tier 1) the test stage builds on",
        from_vllm="ARG:CI_BASE_IMAGE",
        pattern=_IMAGE_REF,
        pattern_hint=_IMAGE_HINT,
        check=values.image_ref_problem,
    ),
    Setting(
        "deepep_repo",
        "DeepEP git repository",
        from_vllm="ARG:DEEPEP_REPO",
        pattern=_GIT_REPO,
        pattern_hint=_GIT_REPO_HINT,
    ),
    Setting(
        "deepep_ref", "DeepEP commit", from_vllm="ARG:DEEPEP_BRANCH", pattern=_GIT_REF, pattern_hint=_GIT_REF_HINT
    ),
    Setting(
        "deepep_nic",
        "NIC DeepEP is built for (cx7, thor2, io)",
        from_vllm="ARG:DEEPEP_NIC",
        choices=("cx7", "thor2", "io"),  # DeepEP setup.py --nic
    ),
    Setting(
        "deepep_flags",
        "DeepEP setup.py flags in build_deepep (but --variant, --nic)",
        from_vllm="deepep-flags",
        # The trailing blanks belong to the flags: ' *(...)? *' let two ' *' share a run of blanks (quadratic).
        pattern=rf" *(?:{_SETUP_FLAG}(?: +{_SETUP_FLAG})* *)?",
        pattern_hint="setup.py flags separated by spaces, e.g. --rocm-explicit-ctx --rocm-gfx942-fp8-fnuz-max 224",
    ),
    Setting(
        "rocshmem_repo",
        "rocm-systems repository holding rocSHMEM",
        from_vllm="ARG:ROCSHMEM_REPO",
        pattern=_GIT_REPO,
        pattern_hint=_GIT_REPO_HINT,
    ),
    Setting(
        "rocshmem_ref",
        "rocm-systems commit for rocSHMEM",
        from_vllm="ARG:ROCSHMEM_BRANCH",
        pattern=_GIT_REF,
        pattern_hint=_GIT_REF_HINT,
    ),
    Setting(
        "image_repo",
        "repository part of the image tags rocmci makes",
        default="rocmci/vllm-rocm",
        pattern=r"[a-z0-9][a-z0-9._/:-]{0,199}",  # a tag is appended: no '@', and docker wants lower case
        pattern_hint="a repository such as rocmci/vllm-rocm (lower-case letters, digits and . _ / : -)",
        check=values.repository_problem,
    ),
    Setting(
        "ci_base_tag",
        "vLLM CI's ci_base tag (CI_BASE_IMAGE_TAG): `image.build` reuses <tag>-<vllm.ci_base.content_hash> when "
        "the registry or this engine holds it",
        default="rocm/vllm-dev:ci_base",
        pattern=r"[a-z0-9][a-z0-9._/:-]{0,199}",
        pattern_hint="a repository:tag such as rocm/vllm-dev:ci_base (a -<hash> suffix is appended)",
    ),
    Setting(
        "image_cache_registry",
        "registry repository tiers are pushed to so the next tier can start FROM them on a docker-container or "
        "remote buildx builder (empty: named build contexts)",
        default="",
        pattern=r"|[a-z0-9][a-z0-9._/:-]{0,199}",
        pattern_hint="a repository such as registry.example:5000/rocmci-cache (no tag)",
    ),
    Setting(
        "tier_chain",
        "how a tier reaches the next one's FROM: auto (by the builder's driver), store, registry "
        "(image_cache_registry) or context (OCI layouts as named build contexts)",
        default="auto",
        choices=("auto", "store", "registry", "context"),
    ),
    Setting(
        "extra_labels",
        "labels KEY=VALUE[,KEY=VALUE...] added to every image rocmci builds (e.g. a test run's own label)",
        default="",
        pattern=r"|[a-z0-9][a-z0-9.-]{0,99}=[A-Za-z0-9._:-]{0,200}(,[a-z0-9][a-z0-9.-]{0,99}=[A-Za-z0-9._:-]{0,200}){0,7}",
        pattern_hint="up to 8 KEY=VALUE pairs joined by ',' (keys: lower-case letters, digits, '.', '-')",
    ),
    Setting(
        "image",
        "image to run workloads in (empty: the tag `image.build` makes)",
        default="",
        pattern=f"|{_IMAGE_REF}",
        pattern_hint=_IMAGE_HINT,
        check=values.image_ref_problem,
    ),
    Setting(
        "ci_image",
        "tag the generated pipeline's image step builds (IMAGE_TAG); DinD test steps fall back to it",
        default="rocm/vllm-ci:build-$BUILDKITE_BUILD_ID",
        pattern=_PIPELINE_IMAGE_REF,
        pattern_hint="an image reference; $VAR and ${VAR} are expanded by the agent, e.g. "
        "rocm/vllm-ci:build-$BUILDKITE_BUILD_ID",
    ),
    Setting("source", "vLLM-style step file the pipeline is generated from (the default: in vllm_src when set)",
            default=".buildkite/test-amd.yaml"),
    Setting("inventory", "agent pool inventory", default=".buildkite/agents.yaml"),
    Setting("workarounds", "registry of known workarounds", default="workarounds.yaml"),
    Setting(
        "mirror_hw",
        "mirror_hardwares value a step must list to be generated",
        default="amdproduction",
        choices=MIRROR_HW,
    ),
    Setting(
        "branch",
        "branch the pipeline is for ('': $BUILDKITE_BRANCH); main runs autorun_on_main",
        default="",
        pattern=f"|{_GIT_REF}",
        pattern_hint=_GIT_REF_HINT,
    ),
    Setting("base_refresh_skip", "skip the ROCm base refresh step (ROCM_BASE_REFRESH_SKIP)", kind=bool, default=False),
    Setting("base_refresh_force", "force the ROCm base refresh (ROCM_BASE_REFRESH_FORCE)", kind=bool, default=False),
    Setting(
        "docker",
        "docker client to use ('auto' picks one that can build with BuildKit)",
        default="auto",
        pattern=r"[A-Za-z0-9_./~][A-Za-z0-9_./~+-]{0,4095}",
        pattern_hint="'auto', a command name or a path to a docker client",
    ),
    Setting(
        "build_network",
        "network for image builds ('' for the engine default, 'none' offline)",
        default="",
        choices=("", "none", "host", "default"),  # what BuildKit's RUN takes
        flag="--network",
    ),
    Setting(
        "run_network",
        "network of workload containers (vLLM's AMD CI uses host)",
        default="host",
        pattern=r"|[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}",  # host, none, bridge, a network name, container:NAME
        pattern_hint="a docker network: host, none, bridge or a network name",
    ),
    Setting(
        "hf_cache",
        "host Hugging Face cache mounted into workload containers",
        default="~/.cache/huggingface",
        pattern=r"[^-:,\s][^:,\s]{0,4095}",  # ':' and ',' would split docker's volume and mount syntax
        pattern_hint="a folder path without ':', ',' or spaces",
    ),
    Setting(
        "shm_size",
        "shared memory size of workload containers",
        default="16g",
        pattern=_SIZE,
        pattern_hint="a size such as 16g, 512m or 1073741824",
    ),
    Setting(
        "run_memory",
        "memory limit of workload containers, e.g. 256g ('' for none)",
        default="",
        pattern=f"|{_SIZE}",
        pattern_hint="a size such as 256g, or '' for no limit",
    ),
    Setting(
        "run_timeout",
        "seconds a workload may run before it is stopped",
        kind=int,
        default=3600,
        min=1,
        max=MAX_RUN_SECONDS,
    ),
    Setting("results_dir", "where logs, JUnit XML and reports are written", default="results"),
    # Bounds on waits for a peer that may never answer (docs/reliability.md lists each).
    Setting(
        "engine_timeout",
        "seconds one Docker engine call may take (SDK calls, registry look-ups through the engine, short CLI "
        "calls); an engine that did not answer once is not asked again",
        kind=int,
        default=30,
        min=1,
        max=3600,
    ),
    Setting(
        "git_timeout",
        "seconds a git command may take (--diff-base's fetch, merge-base, diff); its whole process group is killed",
        kind=int,
        default=120,
        min=1,
        max=3600,
    ),
    Setting(
        "render_fuel",
        "instructions a ci-infra template may take to render (pipeline.diff); ci-infra's own needs about 210,000",
        kind=int,
        default=50_000_000,
        min=100_000,
        max=10_000_000_000,
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in REGISTRY}
