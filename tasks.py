"""Everyday commands: `invoke --list`. Each task parses its flags and calls rocmci once.

Numeric flags are declared as strings: invoke would print a traceback for `--tp abc`, while rocmci
converts them itself and answers with one line and exit 2.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from invoke import Collection, Exit, task

if importlib.util.find_spec("rocmci") is None:
    sys.path.insert(0, str(Path(__file__).parent / "src"))  # usable from a checkout without installing


def call(name: str, **kwargs):
    from rocmci import commands
    from rocmci.errors import RocmciError

    try:
        code = getattr(commands, name)(**kwargs)
    except RocmciError as exc:
        raise Exit(f"rocmci: {exc.one_line()}", code=exc.exit_code) from None
    except KeyboardInterrupt:
        raise Exit("rocmci: interrupted", code=130) from None
    if code:
        raise Exit(code=code)


@task(help={"json": "print JSON instead of a table"})
def settings(c, json=False):
    """Show every setting, its value and where it came from (default, Dockerfile, pyproject, env, flag)."""
    call("show_settings", as_json=json)


@task(
    help={
        "for": "exit non-zero when something this task needs is missing: build, run or pipeline",
        "json": "print JSON instead of a table",
        "host_root": "read /sys and /dev below this folder instead of / (for fake device trees)",
    }
)
def doctor(c, for_=None, json=False, host_root="/"):
    """What this host can do: Docker engine, BuildKit, /dev/kfd, GPUs and archs, disk, the image."""
    call("doctor", purpose=for_, as_json=json, kfd_root=host_root)


_SOURCE = "vLLM-style step file (default: the 'source' setting, .buildkite/test-amd.yaml)"
_CHANGED = "file listing the changed paths, one per line"
_DIFF = "git ref to diff HEAD against for the changed paths (REF...HEAD)"
_MIRROR = "mirror_hardwares value a step must list (default: the 'mirror_hw' setting)"
_ARCH = "archs the image's DeepEP is built for, e.g. 'gfx942;gfx950' (default: the Dockerfile's)"


@task(
    help={
        "source": _SOURCE,
        "changed_files": _CHANGED,
        "diff_base": _DIFF,
        "mirror_hw": _MIRROR,
        "run_all": "run every step: no block steps for unaffected steps",
        "nightly": "nightly run: optional steps run too",
        "arch": _ARCH,
        "out": "write here (atomically) instead of stdout",
        "format": "yaml or json",
    }
)
def generate(
    c,
    source=None,
    changed_files=None,
    diff_base=None,
    mirror_hw=None,
    run_all=False,
    nightly=False,
    arch=None,
    out=None,
    format="yaml",
):
    """Generate the AMD Buildkite pipeline; it is validated first and not written if it has errors."""
    call(
        "pipeline_generate",
        source=source,
        changed_files=changed_files,
        diff_base=diff_base,
        mirror_hw=mirror_hw,
        run_all=run_all,
        nightly=nightly,
        arch=arch,
        out=out,
        fmt=format,
    )


@task(
    help={
        "source": _SOURCE + "; generated, then validated",
        "pipeline": "an existing Buildkite pipeline file to validate instead (list or mapping form)",
        "mirror_hw": _MIRROR,
        "arch": _ARCH,
        "json": "print findings as JSON",
    }
)
def validate(c, source=None, pipeline=None, mirror_hw=None, arch=None, json=False):
    """Validate: YAML and duplicate keys, Buildkite's schema, AMD CI rules. Exit 0 clean, 1 errors, 2 bad input."""
    call("pipeline_validate", source=source, pipeline=pipeline, mirror_hw=mirror_hw, arch=arch, as_json=json)


@task(
    name="plan",
    help={
        "source": _SOURCE,
        "changed_files": _CHANGED,
        "diff_base": _DIFF,
        "mirror_hw": _MIRROR,
        "run_all": "as pipeline.generate --run-all",
        "nightly": "as pipeline.generate --nightly",
        "json": "print JSON instead of a table",
    },
)
def plan_(c, source=None, changed_files=None, diff_base=None, mirror_hw=None, run_all=False, nightly=False, json=False):
    """Which steps run, which are blocked, and why (the changed file that matched, or none)."""
    call(
        "pipeline_plan",
        source=source,
        changed_files=changed_files,
        diff_base=diff_base,
        mirror_hw=mirror_hw,
        run_all=run_all,
        nightly=nightly,
        as_json=json,
    )


@task(
    name="build",
    help={
        "arch": "GPU archs for rocSHMEM and DeepEP: 'gfx942;gfx950', 'gfx942,gfx950' or 'native' (only gfx942, gfx950)",
        "deepep_ref": "DeepEP commit (default: the Dockerfile's DEEPEP_BRANCH)",
        "rocshmem_ref": "rocm-systems commit for rocSHMEM (default: ROCSHMEM_BRANCH)",
        "base_image": "base image (default: BASE_IMAGE)",
        "target": "stage to build: final, rocshmem, deepep, vllm-build, vllm-source",
        "tag": "image tag (default: <image_repo>:deepep-<ref>-<archs>)",
        "push": "push the image after building it",
        "force": "build even when an image with the same input hash exists",
        "dry_run": "print the exact docker command instead of running it",
        "vllm_src": "build vLLM from this local checkout instead of VLLM_REPO@VLLM_BRANCH",
        "vllm_arch": "archs for vLLM itself (default: the DeepEP list; may add archs, never drop one)",
        "network": "build network: none, host or default (setting build_network)",
    },
)
def image_build(
    c,
    arch=None,
    deepep_ref=None,
    rocshmem_ref=None,
    base_image=None,
    target="final",
    tag=None,
    push=False,
    force=False,
    dry_run=False,
    vllm_src=None,
    vllm_arch=None,
    network=None,
):
    """Build the ROCm image (vLLM + DeepEP + rocSHMEM) for the chosen GPU archs."""
    call(
        "image_build",
        arch=arch,
        deepep_ref=deepep_ref,
        rocshmem_ref=rocshmem_ref,
        base_image=base_image,
        target=target,
        tag=tag,
        push=push,
        force=force,
        dry_run=dry_run,
        vllm_src=vllm_src,
        vllm_arch=vllm_arch,
        network=network,
    )


@task(
    name="inspect",
    positional=["tag"],
    help={"tag": "image to show (default: the configured one)", "json": "print JSON"},
)
def image_inspect(c, tag=None, json=False):
    """Show an image's labels: arch list, pins, input hash, ROCm version if known."""
    call("image_inspect", tag=tag, as_json=json)


_RUN_HELP = {
    "image": "image to run in (default: the configured one, see `invoke settings`)",
    "gpus": "GPU indices to use, e.g. 0,1 (default: the first ones); render nodes come from KFD sysfs",
    "timeout": "seconds before the run is stopped and its container removed (default: run_timeout)",
    "skip_preflight": "start even if the image, archs, GPUs or /dev/kfd look wrong (experts)",
    "no_container": "run directly on this host, e.g. in a Buildkite step already inside the image",
    "dry_run": "print the container command instead of running it",
    "host_root": "read /sys and /dev below this folder (for fake device trees)",
    "env": "NAME=value for the workload (repeatable); secret-looking names are passed by name only",
    "workdir": "working directory of the workload (default /vllm-workspace, where the image keeps vLLM's tests)",
    "json": "print results as JSON",
    "extra": "extra arguments, as one quoted string",
}


def _run_options(gpus, timeout, skip_preflight, no_container, dry_run, host_root, env, workdir):
    return dict(
        gpus=gpus,
        timeout=timeout,
        skip_preflight=skip_preflight,
        no_container=no_container,
        dry_run=dry_run,
        host_root=Path(host_root),
        env=env,
        workdir=workdir,
    )


@task(
    name="dp-example",
    iterable=["env"],
    help={
        **_RUN_HELP,
        "model": "model to serve",
        "tp": "tensor parallel size (-tp)",
        "dp": "data parallel size (-dp)",
        "max_model_len": "--max-model-len",
        "backend": "--all2all-backend: deepep_high_throughput, deepep_low_latency, allgather_reducescatter",
        "example": "path of the example in the image (default: detected)",
    },
)
def dp_example(
    c,
    image=None,
    model="Qwen/Qwen1.5-MoE-A2.7B",
    tp="1",
    dp="2",
    max_model_len="2048",
    backend="deepep_high_throughput",
    extra=None,
    example=None,
    gpus=None,
    timeout=None,
    skip_preflight=False,
    no_container=False,
    dry_run=False,
    host_root="/",
    env=None,
    workdir=None,
    json=False,
):
    """Run vLLM's DeepEP data-parallel example (Qwen1.5-MoE, -tp=1 -dp=2) in the image."""
    call(
        "run_dp_example",
        image=image,
        model=model,
        tp=tp,
        dp=dp,
        max_model_len=max_model_len,
        backend=backend,
        extra=extra,
        example=example,
        as_json=json,
        **_run_options(gpus, timeout, skip_preflight, no_container, dry_run, host_root, env, workdir),
    )


@task(
    name="moe-tests",
    iterable=["env"],
    help={
        **_RUN_HELP,
        "mode": "high-throughput, low-latency or both",
        "k": "extra pytest -k expression, and-ed with the mode's",
        "shards": "run N shards at once on disjoint GPU sets (N x 2 GPUs)",
    },
)
def moe_tests(
    c,
    image=None,
    mode="both",
    k=None,
    extra=None,
    shards="1",
    gpus=None,
    timeout=None,
    skip_preflight=False,
    no_container=False,
    dry_run=False,
    host_root="/",
    env=None,
    workdir=None,
    json=False,
):
    """Run vLLM's DeepEP MoE kernel tests in the image, with the registry's workarounds; JUnit XML to results/."""
    call(
        "run_moe_tests",
        image=image,
        mode=mode,
        keyword=k,
        extra=extra,
        shards=shards,
        as_json=json,
        **_run_options(gpus, timeout, skip_preflight, no_container, dry_run, host_root, env, workdir),
    )


@task(
    name="workarounds",
    help={
        "image": "check this image's ROCm (labels, /opt/rocm/.info/version) against each removal condition",
        "strict": "exit non-zero when a workaround is stale (CI uses this)",
        "json": "print JSON",
    },
)
def workarounds_(c, image=None, strict=False, json=False):
    """List known workarounds, where they apply, and which can be removed."""
    call("workarounds", image=image, strict=strict, as_json=json)


pipeline = Collection("pipeline", generate, validate, plan_)


@task(
    name="outcome",
    help={
        "junit": "JUnit XML written by the run",
        "exit_code": "the run's exit status (139 = died by SIGSEGV)",
        "workload": "moe-tests or dp-example: which workarounds to name for a teardown crash",
        "json": "print JSON",
    },
)
def outcome(c, junit, exit_code, workload="moe-tests", json=False):
    """Name the outcome of a run from its JUnit XML and exit status (passed, failed, crashed at teardown, ...)."""
    call("run_outcome", junit=junit, exit_code=exit_code, workload=workload, as_json=json)


run = Collection("run", dp_example, moe_tests, outcome)
image = Collection("image", image_build, image_inspect)
ns = Collection(settings, doctor, workarounds_, pipeline, image, run)
