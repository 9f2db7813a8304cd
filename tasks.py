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
    from rocmci.errors import RocmciError, Terminated, raise_on_sigterm

    raise_on_sigterm()  # SIGTERM unwinds like Ctrl-C: temporary files and containers are cleaned up
    try:
        code = getattr(commands, name)(**kwargs)
    except RocmciError as exc:
        raise Exit(f"rocmci: {exc.one_line()}", code=exc.exit_code) from None
    except Terminated:
        raise Exit("rocmci: terminated", code=143) from None
    except KeyboardInterrupt:
        raise Exit("rocmci: interrupted", code=130) from None
    if code:
        raise Exit(code=code)


@task
def version(c):
    """Print rocmci's version (`invoke --version` prints invoke's own)."""
    from rocmci import __version__

    print(f"rocmci {__version__}")


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
_BRANCH = "branch the pipeline is for (default: the 'branch' setting, else $BUILDKITE_BRANCH)"
_ARCH = "archs the image's DeepEP is built for, e.g. 'gfx942;gfx950' (default: the Dockerfile's)"


@task(
    help={
        "source": _SOURCE,
        "changed_files": _CHANGED,
        "diff_base": _DIFF,
        "mirror_hw": _MIRROR,
        "branch": _BRANCH,
        "run_all": "run every step: no block steps for unaffected steps (RUN_ALL=1)",
        "nightly": "nightly run: optional steps run too (NIGHTLY=1)",
        "arch": _ARCH + "; a value you set is passed to the image steps as DEEPEP_ROCM_ARCH",
        "out": "write here (atomically) instead of stdout",
        "format": "yaml or json",
        "keep_going": "write the pipeline even with errors: each step with an error waits behind a block step",
        "annotation": "also write the findings as Markdown here (for buildkite-agent annotate)",
    }
)
def generate(
    c,
    source=None,
    changed_files=None,
    diff_base=None,
    mirror_hw=None,
    branch=None,
    run_all=False,
    nightly=False,
    arch=None,
    out=None,
    format="yaml",
    keep_going=False,
    annotation=None,
):
    """Generate the AMD pipeline as ci-infra's template would; validated first, not written if it has errors."""
    call(
        "pipeline_generate",
        source=source,
        changed_files=changed_files,
        diff_base=diff_base,
        mirror_hw=mirror_hw,
        branch=branch,
        run_all=run_all,
        nightly=nightly,
        arch=arch,
        out=out,
        fmt=format,
        keep_going=keep_going,
        annotation=annotation,
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
        "branch": _BRANCH,
        "run_all": "as pipeline.generate --run-all",
        "nightly": "as pipeline.generate --nightly",
        "json": "print JSON instead of a table",
    },
)
def plan_(
    c,
    source=None,
    changed_files=None,
    diff_base=None,
    mirror_hw=None,
    branch=None,
    run_all=False,
    nightly=False,
    json=False,
):
    """Why each step runs, waits behind a block step or is left out; and which rule set run_all or nightly."""
    call(
        "pipeline_plan",
        source=source,
        changed_files=changed_files,
        diff_base=diff_base,
        mirror_hw=mirror_hw,
        branch=branch,
        run_all=run_all,
        nightly=nightly,
        as_json=json,
    )


@task(
    name="diff",
    help={
        "template": "ci-infra's buildkite/test-template-amd.j2 to compare against (required)",
        "source": _SOURCE,
        "changed_files": _CHANGED,
        "branch": _BRANCH,
        "mirror_hw": _MIRROR,
        "run_all": "compare a run_all build",
        "nightly": "compare a nightly build",
        "examples": "how many differences to print (default 20)",
        "json": "print every difference as JSON",
    },
)
def diff_(
    c,
    template,
    source=None,
    changed_files=None,
    branch=None,
    mirror_hw=None,
    run_all=False,
    nightly=False,
    examples="20",
    json=False,
):
    """Field-level differences between ci-infra's template render and rocmci's generator. Exit 1 if any."""
    call(
        "pipeline_diff",
        template=template,
        source=source,
        changed_files=changed_files,
        branch=branch,
        mirror_hw=mirror_hw,
        run_all=run_all,
        nightly=nightly,
        examples=examples,
        as_json=json,
    )


_VLLM_SRC = "vLLM checkout to build (default: the current folder when it holds docker/Dockerfile.rocm and setup.py)"
_IMAGE_ARCH = "DeepEP/rocSHMEM archs (DEEPEP_ROCM_ARCH), e.g. 'gfx942;gfx950' or 'native' (default: vLLM's ARG)"
_VLLM_ARCH = "archs vLLM itself is built for (ARG_PYTORCH_ROCM_ARCH; default: vLLM's bake file); must cover --arch"


@task(
    name="check",
    help={"vllm_src": _VLLM_SRC, "arch": _IMAGE_ARCH, "vllm_arch": _VLLM_ARCH, "json": "print findings as JSON"},
)
def image_check(c, vllm_src=None, arch=None, vllm_arch=None, json=False):
    """Check the arch flow of vLLM's Dockerfile: one list reaching rocSHMEM and DeepEP. Exit 0 whole, 1 findings."""
    call("image_check", vllm_src=vllm_src, arch=arch, vllm_arch=vllm_arch, as_json=json)


@task(
    name="build",
    help={
        "vllm_src": _VLLM_SRC,
        "arch": _IMAGE_ARCH,
        "vllm_arch": _VLLM_ARCH,
        "deepep_ref": "DeepEP commit instead of vLLM's DEEPEP_BRANCH (passed as --build-arg)",
        "rocshmem_ref": "rocm-systems commit instead of vLLM's ROCSHMEM_BRANCH",
        "base_image": "base image instead of vLLM's BASE_IMAGE",
        "target": "stage of vLLM's Dockerfile: test (default; on a ci_base built or reused first), ci_base or final",
        "ci_base": "build test on this existing ci_base image instead of building one",
        "tag": "image tag (default: <image_repo>:<target>-<archs>)",
        "push": "push the image after building it",
        "force": "build even when an image with the same input hash exists",
        "dry_run": "print the exact docker command(s) instead of running them",
        "network": "build network: none, host or default (setting build_network)",
    },
)
def image_build(
    c,
    vllm_src=None,
    arch=None,
    vllm_arch=None,
    deepep_ref=None,
    rocshmem_ref=None,
    base_image=None,
    target="test",
    ci_base=None,
    tag=None,
    push=False,
    force=False,
    dry_run=False,
    network=None,
):
    """Build vLLM's ROCm image from its own docker/Dockerfile.rocm with BuildKit, for the chosen GPU archs."""
    call(
        "image_build",
        vllm_src=vllm_src,
        arch=arch,
        vllm_arch=vllm_arch,
        deepep_ref=deepep_ref,
        rocshmem_ref=rocshmem_ref,
        base_image=base_image,
        target=target,
        ci_base=ci_base,
        tag=tag,
        push=push,
        force=force,
        dry_run=dry_run,
        network=network,
    )


@task(
    name="retarget",
    help={
        "from": "vLLM ROCm image to rebuild rocSHMEM and DeepEP in (e.g. rocm/vllm-ci:<commit>)",
        "arch": "archs to rebuild for, e.g. gfx950",
        "vllm_src": _VLLM_SRC + "; pins and DeepEP flags are read from it",
        "tag": "tag of the result (default: <image_repo>:retarget-<archs>)",
        "force": "build even when an image with the same input hash exists",
        "dry_run": "show the pins and flags read and the exact commands instead of running them",
        "network": "build network: none, host or default (the overlay clones DeepEP and rocm-systems)",
    },
)
def image_retarget(c, from_=None, arch=None, vllm_src=None, tag=None, force=False, dry_run=False, network=None):
    """Only the arch changes: rebuild rocSHMEM and DeepEP on top of an image, then verify its code objects."""
    call(
        "image_retarget",
        from_image=from_,
        arch=arch,
        vllm_src=vllm_src,
        tag=tag,
        force=force,
        dry_run=dry_run,
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
    "timeout": "seconds before the run is stopped: container removed, or process group killed (default: run_timeout)",
    "skip_preflight": "start even if the image, archs, GPUs or /dev/kfd look wrong (experts)",
    "no_container": "run as a process of this host (a CI pod inside the image); GPUs chosen by ROCR_VISIBLE_DEVICES",
    "dry_run": "print the exact commands (docker run, or the host process and its environment); run nothing",
    "vllm_src": "vLLM checkout to check workarounds against (default: the 'vllm_src' setting)",
    "strict": "fail where vLLM's runner passes: an obsolete workaround in the registry, no tests collected",
    "host_root": "read /sys and /dev below this folder (for fake device trees)",
    "env": "NAME=value for the workload (repeatable); secret-looking names are passed by name only",
    "workdir": "working directory of the workload (default /vllm-workspace, where the image keeps vLLM's tests)",
    "json": "print results as JSON",
    "extra": "extra arguments, as one quoted string",
}


def _run_options(gpus, timeout, skip_preflight, no_container, dry_run, host_root, env, workdir, strict=False):
    return dict(
        gpus=gpus,
        timeout=timeout,
        skip_preflight=skip_preflight,
        no_container=no_container,
        dry_run=dry_run,
        host_root=Path(host_root),
        env=env,
        workdir=workdir,
        strict=strict,
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
    vllm_src=None,
    strict=False,
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
        vllm_src=vllm_src,
        as_json=json,
        **_run_options(gpus, timeout, skip_preflight, no_container, dry_run, host_root, env, workdir, strict),
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
    vllm_src=None,
    strict=False,
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
        vllm_src=vllm_src,
        as_json=json,
        **_run_options(gpus, timeout, skip_preflight, no_container, dry_run, host_root, env, workdir, strict),
    )


@task(
    name="workarounds",
    help={
        "vllm_src": "vLLM checkout whose files and commits are the evidence (default: the 'vllm_src' setting)",
        "image": "image whose labels are evidence (e.g. rocmci.rocm.fixes)",
        "strict": "exit 1 when a workaround is obsolete (CI uses this)",
        "json": "print JSON",
    },
)
def workarounds_(c, vllm_src=None, image=None, strict=False, json=False):
    """Each known workaround: applies or obsolete, with the evidence as file:line, commit or image label."""
    call("workarounds", vllm_src=vllm_src, image=image, strict=strict, as_json=json)


pipeline = Collection("pipeline", generate, validate, plan_, diff_)


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
image = Collection("image", image_check, image_build, image_retarget, image_inspect)
ns = Collection(version, settings, doctor, workarounds_, pipeline, image, run)
