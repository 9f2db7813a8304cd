"""The parts of ci-infra's test-template-amd.j2 that do not depend on which steps run: the image chain,
the retry rules, the native Kubernetes plugin and the environment of a test step.

Values and key order follow the template text; generate.py decides which steps exist.
"""

from __future__ import annotations

from typing import Any

from rocmci.pipeline import scalars

GROUP_LABEL = "AMD Tests"
REFRESH_KEY = "refresh-rocm-base-amd"
CI_BASE_KEY = "ensure-ci-base-amd"
IMAGE_STEP_KEY = "image-build-amd"
BUILD_QUEUE = "amd-cpu"
MAX_TIMEOUT = 180  # default_amd_timeout_in_minutes: the default and the cap of a test step
REFRESH_TIMEOUT, REFRESH_SKIPPED_TIMEOUT = 540, 15
DEFAULT_WORKDIR = "/vllm-workspace/tests"
RUNNER = "bash .buildkite/scripts/hardware_ci/run-amd-test.sh"
IMAGE_ARCHS = "gfx90a;gfx942;gfx950"  # the archs vLLM's CI image is built for (MI250, MI300/MI325, MI355)
BAKE_FILE = "docker/docker-bake-rocm.hcl"
CI_IMAGE = "rocm/vllm-ci:build-$BUILDKITE_BUILD_ID"
NATIVE_BASE_IMAGE = "rocm/vllm-dev:ci_base-build-$BUILDKITE_BUILD_ID"
DIND_BASE_IMAGE = "rocm/vllm-dev:ci_base"
DEBUG_AGENT_SETUP = (
    "echo 'ROCm debug agent disabled; re-enable rocm_debug_agent_setup in test-template-amd.j2 "
    "after validating coredump setup'"
)
RESULTS_ROOT = "/home/buildkite-agent/huggingface/amd-ci-results"
ARTIFACT_GLOB = "artifacts/vllm-rocm-install/vllm-rocm-install.tar.gz"
DIAGNOSTICS_DIR = "artifacts/amd-gpu-diagnostics"
_BUILD_ENV = {"DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "tty", "TERM": "xterm-256color"}


def rust_item(value: Any) -> str:
    """An item of a list printed by `join` or piped into a filter: a null there is minijinja's none, which
    2.3.1 prints as `none` (only a missing value, undefined, prints nothing)."""
    return "none" if value is None else rust_text(value)


def rust_text(value: Any) -> str:
    """A value printed by `{{ value }}` in the Rust engine minijinja-cli uses."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return rust_debug(value)
    if isinstance(value, float):
        return scalars.rust_float(value)  # Rust's digits: 1e20 prints in full, NaN as NaN
    return str(value)


# minijinja-cli 2.3.1 (what bootstrap-amd.sh installs) prints a list or mapping with Rust's Debug format:
# `["a", "b"]`, `{"k": 1}`, items as `none`, `true`, `1.0`, `1e20` (minijinja's value/mod.rs at 2.3:
# Display of a sequence writes each item with `{:?}`). minijinja 2.24 and later (and the Python binding)
# print Python-style instead (`['a', 'b']`, `None`, `True`): the version matters, and 2.3.1 is the one
# the CI runs. A multi-node step's per-node command list reaches VLLM_NODE_COMMAND_<i> in this form.
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\0": "\\0"}
# Rust's char::is_printable is false for these Unicode categories (a space aside): Debug writes \u{..}.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})


def _debug_text(text: str) -> str:
    """Rust's `{:?}` of a str: double quotes; \\, \", \n, \t, \r, \0 escaped; other unprintables as \\u{hex}."""
    if text.isascii() and text.isprintable() and "\\" not in text and '"' not in text:
        return f'"{text}"'
    import unicodedata

    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char != " " and unicodedata.category(char) in _UNPRINTABLE:
            out.append(f"\\u{{{ord(char):x}}}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def rust_debug(value: Any) -> str:
    """A value inside a printed list or mapping: Rust's Debug of minijinja's Value."""
    if isinstance(value, str):
        return _debug_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, float):
        return scalars.rust_float_debug(value)
    if isinstance(value, list):
        return "[" + ", ".join(rust_debug(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{rust_debug(k)}: {rust_debug(v)}" for k, v in value.items()) + "}"
    return str(value)


def retry(build_step: bool = False) -> dict[str, Any]:
    """amd_infra_retry(): infrastructure failures retry once; image builds also on exit 1 and 2."""
    rules: list[dict[str, Any]] = [{"signal_reason": "stack_error", "limit": 1}]
    if build_step:
        rules += [{"exit_status": 1, "limit": 1}, {"exit_status": 2, "limit": 1}]
    rules += [
        {"signal_reason": "agent_stop", "limit": 1},
        {"signal_reason": "agent_refused", "limit": 1},
        {"exit_status": -1, "signal_reason": "none", "limit": 1},
        {"exit_status": 134, "limit": 1},  # ROCm/KFD GPU hang (SIGABRT)
    ]
    return {"automatic": rules}


def image_chain(
    refresh_skip: str, refresh_force: str, ci_image: str = CI_IMAGE, deepep_arch: str | None = None
) -> list[dict[str, Any]]:
    """refresh the ROCm base -> ensure ci_base -> build the test image, with vLLM's own scripts."""
    extra = {"DEEPEP_ROCM_ARCH": deepep_arch} if deepep_arch else {}  # ci-bake-rocm.sh reads ARGs from env
    bake = {"VLLM_BAKE_FILE": BAKE_FILE, "PYTORCH_ROCM_ARCH": IMAGE_ARCHS}
    refresh = {
        "label": "AMD: :docker: refresh ROCm base",
        "depends_on": None,
        "soft_fail": False,
        "commands": ["bash .buildkite/scripts/rocm/refresh-base-image.sh"],
        "key": REFRESH_KEY,
        "concurrency": 1,
        "concurrency_group": "vllm/rocm/base-build/$BUILDKITE_COMMIT",
        "timeout_in_minutes": REFRESH_SKIPPED_TIMEOUT if refresh_skip == "1" else REFRESH_TIMEOUT,
        "env": {"ROCM_BASE_REFRESH_SKIP": refresh_skip, "ROCM_BASE_REFRESH_FORCE": refresh_force, **_BUILD_ENV},
        "retry": retry(True),
        "agents": {"queue": BUILD_QUEUE},
    }
    ci_base = {
        "label": "AMD: :docker: ensure ci_base",
        "depends_on": REFRESH_KEY,
        "soft_fail": False,
        "commands": ["bash .buildkite/scripts/rocm/build-ci-base.sh"],
        "key": CI_BASE_KEY,
        "concurrency": 1,
        "concurrency_group": "vllm/rocm/ci-base-build/$BUILDKITE_COMMIT",
        "timeout_in_minutes": MAX_TIMEOUT,
        "env": {**_BUILD_ENV, **bake, "REMOTE_VLLM": "0", **extra},
        "retry": retry(True),
        "agents": {"queue": BUILD_QUEUE},
    }
    image = {
        "label": "AMD: :docker: build test image and artifacts",
        "depends_on": CI_BASE_KEY,
        "soft_fail": False,
        "commands": [
            "bash .buildkite/scripts/rocm/build-test-image.sh",
            "bash .buildkite/scripts/rocm/smoke-test-image.sh",
        ],
        "key": IMAGE_STEP_KEY,
        "timeout_in_minutes": MAX_TIMEOUT,
        "env": {**_BUILD_ENV, **bake, "IMAGE_TAG": ci_image, "REMOTE_VLLM": "0", **extra},
        "retry": retry(True),
        "agents": {"queue": BUILD_QUEUE},
    }
    return [refresh, ci_base, image]


def gpu_count(data: dict[str, Any]) -> int:
    return 0 if data.get("no_gpu") else (data.get("num_gpus") or 1)


def native_plugin(data: dict[str, Any]) -> list[dict[str, Any]]:
    """amd_native_k8s_plugin(): a dind: false step runs in a Kubernetes pod from this build's ci_base."""
    gpus = rust_text(gpu_count(data))

    def field_ref(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    container = {
        "name": "container-0",
        "image": NATIVE_BASE_IMAGE,
        "imagePullPolicy": "Always",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}},
        "resources": {"limits": {"amd.com/gpu": gpus}, "requests": {"amd.com/gpu": gpus}},
        "volumeMounts": [
            {"name": "devshm", "mountPath": "/dev/shm"},
            {"name": "vllm-workspace", "mountPath": "/vllm-workspace"},
        ],
        "env": [
            {"name": "AMD_CI_RUNTIME", "value": "native"},
            {"name": "NATIVE_CI", "value": "true"},
            {"name": "VLLM_CI_DOCKER_DISABLED", "value": "1"},
            {"name": "VLLM_CI_EXPECTED_GPU_COUNT", "value": gpus},
            {"name": "VLLM_CI_WORKSPACE", "value": "/vllm-workspace"},
            {"name": "VLLM_CI_REQUIRE_WORKSPACE_MOUNT", "value": "1"},
            {"name": "PYTORCH_ROCM_ARCH", "value": ""},
            field_ref("VLLM_CI_K8S_POD_NAME", "metadata.name"),
            field_ref("VLLM_CI_K8S_NAMESPACE", "metadata.namespace"),
            field_ref("VLLM_CI_K8S_NODE_NAME", "spec.nodeName"),
        ],
    }
    patch = {
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "imagePullSecrets": [{"name": "docker-config"}],
        "containers": [container],
        "volumes": [
            {"name": "devshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "vllm-workspace", "emptyDir": {}},
        ],
    }
    return [{"kubernetes": {"podSpecPatch": patch}}]


def runner_env(data: dict[str, Any], timeout: int, joined: str, ci_image: str) -> dict[str, Any]:
    """The env of a step that runs through run-amd-test.sh (everything but no_plugin steps)."""
    native = scalars.jinja_eq(data.get("dind"), False)
    env: dict[str, Any] = {
        "BUILDKITE_ARTIFACT_UPLOAD_SKIP_SYMLINKS": "true",
        "NUM_NODES": rust_text(data.get("num_nodes") or 1),
    }
    if native:
        env.update(
            VLLM_CI_BASE_IMAGE=NATIVE_BASE_IMAGE,
            AMD_CI_RUNTIME="native",
            NATIVE_CI="true",
            VLLM_CI_DOCKER_DISABLED="1",
            VLLM_CI_ARTIFACT_STEP=IMAGE_STEP_KEY,
            VLLM_CI_ARTIFACT_CHECKSUM_GLOB=ARTIFACT_GLOB + ".sha256",
            VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE="1",
            VLLM_CI_WORKSPACE="/vllm-workspace",
            VLLM_CI_REQUIRE_WORKSPACE_MOUNT="1",
            HF_HOME="/home/buildkite-agent/huggingface",
            HF_HUB_DOWNLOAD_TIMEOUT="300",
            HF_HUB_ETAG_TIMEOUT="60",
            PYTORCH_ROCM_ARCH="",
        )
    else:
        env.update(
            DOCKER_BUILDKIT="1",
            DOCKER_IMAGE_NAME=DIND_BASE_IMAGE,
            VLLM_CI_BASE_IMAGE=DIND_BASE_IMAGE,
            VLLM_CI_FALLBACK_IMAGE=ci_image,
        )
    env.update(
        VLLM_CI_USE_ARTIFACTS="1",
        VLLM_CI_ARTIFACT_GLOB=ARTIFACT_GLOB,
        VLLM_CI_RESULTS_ROOT=RESULTS_ROOT,
        VLLM_CI_DIAGNOSTICS_DIR=DIAGNOSTICS_DIR,
        VLLM_CI_EXPECTED_GPU_COUNT=rust_text(gpu_count(data)),
    )
    container_timeout_s = timeout * 60 - 60 if timeout > 1 else timeout * 60  # a minute before Buildkite's
    if container_timeout_s:
        env["CONTAINER_TIMEOUT_S"] = str(container_timeout_s)
    workdir = rust_text(data.get("working_dir") or DEFAULT_WORKDIR)
    nodes = data.get("num_nodes")
    if nodes and scalars.jinja_le(2, nodes):  # minijinja: text ("2") is greater than every number
        commands = data.get("commands") or []
        # `length` of a number stops the template (validate reports it): no node commands here
        commands = commands if isinstance(commands, (str, list, dict)) else []
        env["VLLM_CI_EXECUTION_MODE"] = "multi-node"
        env["VLLM_NUM_GPUS_PER_NODE"] = rust_text(data.get("num_gpus") or 1)
        env["VLLM_NODE_COMMAND_COUNT"] = str(len(commands))
        for i, command in enumerate(commands):
            env[f"VLLM_NODE_COMMAND_{i}"] = test_commands(rust_item(command), workdir)
    else:
        env["VLLM_CI_EXECUTION_MODE"] = "single-node"
        env["VLLM_TEST_COMMANDS"] = test_commands(joined, workdir)
    return env


def test_commands(command: str, workdir: str) -> str:
    """The VLLM_TEST_COMMANDS value: rocm-smi, the debug-agent line, cd, then the step's commands."""
    prefix = f"(command rocm-smi || true) && {DEBUG_AGENT_SETUP} && cd {workdir} && "
    if scalars.reads_as_written(command) and scalars.reads_as_written(workdir) and '"' not in workdir:
        return prefix + command  # the quotes the template escapes unescape back to themselves
    return scalars.double_quoted(prefix + command.replace('"', '\\"'))
