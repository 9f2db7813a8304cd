"""The image tasks: check, build, retarget, inspect. Values arrive parsed (cli/flags.py); requests are
built in image/requests.py, plans are pure (image/plan.py, image/retarget.py), execution is image/build.py."""

from __future__ import annotations

import os
import sys

from rocmci import labels as label
from rocmci import settings as settingsmod
from rocmci.report import plural, shell_lines, table, to_json


def eprint(*args) -> None:
    print(*args, file=sys.stderr)


def _settings(v, **more):
    flags = {"vllm_src": v.vllm_src, "arch": v.arch, **more}
    return settingsmod.resolve(flags=flags)


def configured_image(s) -> str:
    """The image workloads use: the 'image' setting, else the tag `image.build` gives the test image."""
    from rocmci.arch import parse_arch_list
    from rocmci.image.plan import image_tag
    from rocmci.values import image_ref

    if s.image:
        return image_ref(f"image ({s.origin('image')})", s.image)
    vllm_archs = parse_arch_list(s.vllm_arch) if s.vllm_arch else None
    return image_tag(s.image_repo, "test", parse_arch_list(s.require("arch")), vllm_archs)


def _live() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


def _client(engine) -> str:
    """The docker client a dry run prints; without one installed, plain `docker`."""
    from rocmci.errors import EngineError

    try:
        return engine.client
    except EngineError:
        return "docker"


def _print_commands(commands: list[tuple[str, list[str]]]) -> None:
    for comment, argv in commands:
        if comment:
            print(f"# {comment}")
        print(shell_lines(argv))


def check(v) -> int:
    from rocmci.image import check as checkmod
    from rocmci.image import requests

    co, req, findings = requests.run_check(_settings(v, vllm_arch=v.vllm_arch))
    if v.json:
        print(to_json({"file": str(co.dockerfile.path), "archs": list(req.archs), "ok": not findings,
                       "findings": [f.as_dict() for f in findings]}))  # fmt: skip
    elif findings:
        print(checkmod.render(findings))
        print(f"\n{plural(len(findings), 'error')} in the arch flow of {co.dockerfile.path}")
    else:
        print(checkmod.summary(co.dockerfile, req))
    return 1 if findings else 0


def build(v) -> int:
    from rocmci import arch as archmod
    from rocmci.engine import Engine
    from rocmci.image import check as checkmod
    from rocmci.image import plan as planmod
    from rocmci.image import requests

    s = _settings(
        v, vllm_arch=v.vllm_arch, deepep_ref=v.deepep_ref, rocshmem_ref=v.rocshmem_ref, base_image=v.base_image,
        build_network=v.network,
    )  # fmt: skip
    # Arch problems surface before anything slow: a wrong list costs hours of build otherwise.
    archmod.require_deepep_support(requests.deepep_archs(s))
    co, req, findings = requests.run_check(s)
    refused = requests.refusal(co, req, findings)
    if refused:
        if refused.exit_code == 1:  # findings in the file: show them all, as image.check would
            eprint(checkmod.render(findings))
        raise refused
    for f in findings:
        eprint(f"{f.text()} (building the file's default list, as vLLM does)")
    plan = planmod.plan_build(
        requests.build_request(
            s, co, req, target=v.target, tag=v.tag, ci_base=v.ci_base, push=v.push, force=v.force
        )
    )
    engine = Engine(s.docker)
    if v.dry_run:
        client = _client(engine)
        commands = []
        for step in plan.steps:
            note = f"{step.target}: skipped when {step.tag} carries {label.INPUT_HASH}={step.input_hash}"
            commands.append((note, ["env", "DOCKER_BUILDKIT=1", *step.argv(client)]))
            if step.push:
                commands.append(("", step.push_argv(client)))
        _print_commands(commands)
        for note in plan.notes:
            eprint(f"note: {note}")
        eprint(f"dry run: image {plan.tag}; nothing was built")
        return 0
    from rocmci.image.build import build as run_build

    run_build(plan, engine, live=_live(), log=eprint)
    return 0


def retarget(v) -> int:
    from rocmci.engine import Engine
    from rocmci.errors import UsageError
    from rocmci.image import requests
    from rocmci.image import retarget as retargetmod
    from rocmci.image.build import build_step

    if not v.from_:
        raise UsageError("image.retarget needs --from IMAGE", hint="name a vLLM ROCm image, e.g. rocm/vllm-ci:<commit>")
    s = _settings(v, build_network=v.network)
    co = requests.checkout(s)
    engine = Engine(s.docker)
    identity = v.from_
    if not v.dry_run:
        done = engine.cli("image", "inspect", "--format", "{{.Id}}", "--", v.from_, check=False)
        if done.returncode != 0:
            raise UsageError(f"no image {v.from_} on this engine", hint="build or pull it first")
        identity = done.stdout.strip()
    request = requests.retarget_request(s, co, from_image=v.from_, from_identity=identity, tag=v.tag, force=v.force)
    plan = retargetmod.plan_retarget(request, retargetmod.OVERLAY.read_text(encoding="utf-8"))
    if v.dry_run:
        client = _client(engine)
        rows = [(arg, plan.step.build_args[arg], source) for arg, source in plan.sources.items()]
        eprint(table(("build arg", "value", "read from"), rows))
        _print_commands([
            (f"skipped when {plan.step.tag} carries its input hash",
             ["env", "DOCKER_BUILDKIT=1", *plan.step.argv(client)]),
            ("then, inside the result:", plan.verify_argv(client)),
        ])  # fmt: skip
        eprint(f"dry run: image {plan.step.tag}; nothing was built")
        return 0
    result = build_step(plan.step, engine, live=_live(), log=eprint)
    done = engine.cli(*plan.verify_argv(engine.client)[1:], timeout=600, check=False)
    verified = retargetmod.check_verification(done.stdout, done.returncode, plan.step.tag)
    action = "built" if result.built else "reused"
    eprint(f"{action} {plan.step.tag}: deep_ep imports; code objects for {';'.join(verified['found'])}")
    return 0


def inspect(v) -> int:
    """An image's labels as a table: what it was built from (default: the configured image)."""
    from rocmci.engine import Engine
    from rocmci.errors import UsageError

    s = settingsmod.resolve()
    ref = v.tag or configured_image(s)
    labels = Engine(s.docker).image_labels(ref)
    if labels is None:
        raise UsageError(f"no image {ref} on this engine", hint="build it with `invoke image.build` or give --tag")
    if v.json:
        print(to_json({"image": ref, "labels": labels}))
        return 0
    rows = []
    for title, *keys in label.INSPECT_ROWS:
        found = [labels.get(k, "") for k in keys]
        rows.append((title, " @ ".join(x for x in found if x) or "-"))
    rocm = next((x for k, x in sorted(labels.items()) if "rocm" in k.lower() and "version" in k.lower()), None)
    rows.append(("ROCm version", rocm or "unknown (no label)"))
    print(f"{ref}\n")
    print(table(("", "value"), rows))
    return 0
