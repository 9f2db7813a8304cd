"""The task collection: `invoke --list` (through the repository's tasks.py) and `rocmci --list`.

Each task declares its flags (help, parser and default live in cli/flags.py), parses them once and
calls one function of the area that owns the work. Imports happen inside the bodies so that listing
tasks stays fast.
"""

from __future__ import annotations

from invoke import Collection, task

from rocmci.cli.edge import RocmciTask, run


def rocmci_task(*args, **kwargs):
    return task(*args, klass=RocmciTask, **kwargs)


def _pipeline(name: str, given: dict) -> None:
    """A pipeline task is a short process building acyclic data: no cyclic collection from its imports on."""
    from rocmci.heap import no_gc

    with no_gc():
        from rocmci.pipeline import tasks

        run(getattr(tasks, name), given)


@rocmci_task
def version(c):
    """Print rocmci's version (the same as `rocmci --version`; invoke's own version flag prints invoke's)."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci import host

    run(host.version)


@rocmci_task
def settings(c, json=False):
    """Show every setting, its value and where it came from (default, Dockerfile, pyproject, env, flag)."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci import host

    run(host.show_settings, given)


@rocmci_task
def doctor(c, for_=None, host_root=None, vllm_src=None, json=False):
    """What this host can do: Docker engine, BuildKit, /dev/kfd, GPUs and archs, disk, the image."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci import host

    run(host.doctor, given)


@rocmci_task(name="generate")
def pipeline_generate(
    c, source=None, changed_files=None, diff_base=None, mirror_hw=None, branch=None, run_all=False, nightly=False,
    arch=None, out=None, format=None, keep_going=False, annotation=None,
):  # fmt: skip
    """Generate the AMD pipeline as ci-infra's template would; validated first, not written if it has errors."""
    given = dict(locals())  # the flags as received, before any import adds a name
    _pipeline("generate", given)


@rocmci_task(name="validate", help={"source": "vLLM-style step file to generate, then validate (default: setting)"})
def pipeline_validate(c, source=None, pipeline=None, mirror_hw=None, arch=None, json=False):
    """Validate: YAML and duplicate keys, Buildkite's schema, AMD CI rules. Exit 0 clean, 1 errors, 2 bad input."""
    given = dict(locals())  # the flags as received, before any import adds a name
    _pipeline("validate", given)


@rocmci_task(name="plan")
def pipeline_plan(
    c, source=None, changed_files=None, diff_base=None, mirror_hw=None, branch=None, run_all=False, nightly=False,
    label=None, only=None, json=False,
):  # fmt: skip
    """Why each step runs, waits behind a block step or is left out; and which rule set run_all or nightly."""
    given = dict(locals())  # the flags as received, before any import adds a name
    _pipeline("plan", given)


@rocmci_task(name="diff")
def pipeline_diff(
    c, template=None, source=None, changed_files=None, branch=None, mirror_hw=None, run_all=False, nightly=False,
    examples=None, json=False,
):  # fmt: skip
    """Field-level differences between ci-infra's template render and rocmci's generator. Exit 1 if any."""
    given = dict(locals())  # the flags as received, before any import adds a name
    _pipeline("diff", given)


@rocmci_task(name="check")
def image_check(c, vllm_src=None, arch=None, vllm_arch=None, json=False):
    """Check the arch flow of vLLM's Dockerfile: one list reaching rocSHMEM and DeepEP. Exit 0 whole, 1 findings."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.image import service

    run(service.check, given)


@rocmci_task(name="build")
def image_build(
    c, vllm_src=None, arch=None, vllm_arch=None, deepep_ref=None, rocshmem_ref=None, base_image=None, target=None,
    ci_base=None, tag=None, push=False, force=False, dry_run=False, network=None, pull=False, build_arg=None,
):  # fmt: skip
    """Build vLLM's ROCm image from its own docker/Dockerfile.rocm with BuildKit, for the chosen GPU archs."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.image import service

    run(service.build, given)


@rocmci_task(name="retarget", help={"arch": "archs to rebuild for, e.g. gfx950"})
def image_retarget(c, from_=None, arch=None, vllm_src=None, tag=None, force=False, dry_run=False, network=None):
    """Only the arch changes: rebuild rocSHMEM and DeepEP on top of an image, then verify its code objects."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.image import service

    run(service.retarget, given)


@rocmci_task(name="inspect")
def image_inspect(c, tag=None, json=False):
    """Show an image's labels: arch list, pins, input hash, ROCm version if known (default: the configured image)."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.image import service

    run(service.inspect, given)


@rocmci_task(name="dp-example")
def run_dp_example(
    c, image=None, build_id=None, pull=False, model=None, tp=None, dp=None, max_model_len=None, backend=None,
    extra=None, example=None, gpus=None, timeout=None, skip_preflight=False, no_container=False, dry_run=False,
    host_root=None, env=None, public=None, workdir=None, vllm_src=None, strict=False, json=False,
):  # fmt: skip
    """Run vLLM's DeepEP data-parallel example (Qwen1.5-MoE, -tp=1 -dp=2) in the image."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.runs import service

    run(service.dp_example, given)


@rocmci_task(name="moe-tests")
def run_moe_tests(
    c, image=None, build_id=None, pull=False, mode=None, k=None, extra=None, shards=None, gpus=None, timeout=None,
    skip_preflight=False, no_container=False, dry_run=False, host_root=None, env=None, public=None, workdir=None,
    vllm_src=None, strict=False, json=False,
):  # fmt: skip
    """Run vLLM's DeepEP MoE kernel tests in the image, with the registry's workarounds; JUnit XML to results/."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.runs import service

    run(service.moe_tests, given)


@rocmci_task(name="step")
def run_step(
    c, step=None, source=None, mirror_hw=None, parallel_job=None, image=None, build_id=None, pull=False, gpus=None,
    timeout=None, skip_preflight=False, no_container=False, dry_run=False, host_root=None, env=None, public=None,
    workdir=None, vllm_src=None, strict=False, json=False,
):  # fmt: skip
    """Run one step of the step file as vLLM's AMD CI runs it: the generated pipeline's command, env and GPUs."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.runs import service

    run(service.step, given)


@rocmci_task(name="bisect")
def run_bisect(
    c, step=None, good=None, bad=None, repeat=None, bad_if=None, k=None, mirror_hw=None, gpus=None, timeout=None,
    skip_preflight=False, host_root=None, env=None, public=None, vllm_src=None, strict=False, dry_run=False,
    json=False, on=None, out=None, from_results=None,
):  # fmt: skip
    """Find the first commit whose CI image fails a step: a binary search over CI's per-commit images."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.cli import bisect

    run(bisect.bisect, given)


@rocmci_task(name="outcome")
def run_outcome(c, junit=None, exit_code=None, workload=None, strict=False, json=False):
    """Name the outcome of a run from its JUnit XML and exit status (passed, failed, crashed at teardown, ...)."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.runs import service

    run(service.outcome, given)


@rocmci_task(
    name="workarounds",
    help={
        "vllm_src": "vLLM checkout whose files and commits are the evidence (default: setting vllm_src)",
        "image": "image whose labels are evidence (e.g. rocmci.rocm.fixes)",
        "strict": "exit 1 when a workaround is obsolete; exit 2 when no evidence was given (CI uses this)",
    },
)
def workarounds(c, vllm_src=None, image=None, strict=False, json=False):
    """Each known workaround: applies or obsolete, with the evidence as file:line, commit or image label."""
    given = dict(locals())  # the flags as received, before any import adds a name
    from rocmci.runs import service

    run(service.workarounds, given)


pipeline = Collection("pipeline", pipeline_generate, pipeline_validate, pipeline_plan, pipeline_diff)
image = Collection("image", image_check, image_build, image_retarget, image_inspect)
runs = Collection("run", run_dp_example, run_moe_tests, run_step, run_bisect, run_outcome)
ns = Collection(version, settings, doctor, workarounds, pipeline, image, runs)
