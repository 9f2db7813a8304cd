"""The image tasks: check, build, retarget, inspect. Values arrive parsed (cli/flags.py); requests are
built in image/requests.py, plans are pure (image/plan.py, image/retarget.py), execution is image/build.py."""

from __future__ import annotations

import os
import re
import sys

from rocmci import labels as label
from rocmci import settings as settingsmod
from rocmci.image_names import configured_image
from rocmci.report import plural, shell_lines, table, to_json


def eprint(*args) -> None:
    """A note or progress line on stderr through the output gate: notes quote image labels, tags and paths that
    come from outside (a registry's label can hold ESC or a token). Several lines (rendered findings) stay
    lines, each gated; a table (report.table, gated and maybe coloured) is printed directly instead."""
    from rocmci.report import gated

    print("\n".join(gated(line) for line in " ".join(str(a) for a in args).split("\n")), file=sys.stderr)


def _settings(flags, **more):
    given = {"vllm_src": flags.vllm_src, "arch": flags.arch, **more}
    return settingsmod.resolve(flags=given)


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


def check(flags) -> int:
    from rocmci.image import check as checkmod
    from rocmci.image import requests

    co, req, findings = requests.run_check(_settings(flags, vllm_arch=flags.vllm_arch))
    errors = [f for f in findings if f.severity == "error"]  # a warning: a step not followed (exit 0)
    if flags.json:
        print(to_json({"file": str(co.dockerfile.path), "archs": list(req.archs), "ok": not errors,
                       "findings": [f.as_dict() for f in findings]}))  # fmt: skip
    else:  # through the findings renderer: fitted to a terminal, escaped, one line each elsewhere
        from rocmci.report_findings import print_findings_and_line

        closing = (f"{plural(len(errors), 'error')} in the arch flow of {co.dockerfile.path}" if errors
                   else checkmod.summary(co.dockerfile, req))  # fmt: skip
        print_findings_and_line(findings, closing)
    return 1 if errors else 0


def build(flags) -> int:
    from dataclasses import replace

    from rocmci import arch as archmod
    from rocmci import packaged
    from rocmci.engine import Engine
    from rocmci.errors import EngineError, FindingsError, UsageError
    from rocmci.image import evidence, requests
    from rocmci.image import plan as planmod
    from rocmci.image import retarget as retargetmod

    s = _settings(
        flags, vllm_arch=flags.vllm_arch, deepep_ref=flags.deepep_ref, rocshmem_ref=flags.rocshmem_ref,
        base_image=flags.base_image,
        build_network=flags.network,
    )  # fmt: skip
    # Arch problems surface before anything slow or anything else is read: a wrong list costs hours of
    # build otherwise, and a malformed one is wrong whatever the checkout holds.
    archs = requests.deepep_archs(s)
    if flags.target == "test":
        archmod.require_deepep_support(archs)
    co = requests.checkout(s)
    # A target that builds no rocSHMEM or DeepEP (final, base) is neither labelled with the list nor refused for it.
    deepep = flags.target == "test" or (
        flags.target != "base" and co.dockerfile.stage(flags.target) is not None
        and planmod.builds_deepep(co.dockerfile, flags.target, {"REMOTE_VLLM": "0"})
    )  # fmt: skip
    if deepep:
        archmod.require_deepep_support(archs)
    # The check follows the build as it will run: a --build-arg that the rocSHMEM or DeepEP lines read is seen.
    extra_args = requests.extra_build_args(co.dockerfile, flags.build_arg)
    co, req, findings = requests.run_check(s, flags.target, extra_args)
    # A refusal of the checkout's ci_base lines waits for the ci_base look-up when the build may retarget vLLM
    # CI's own ci_base instead (a test image, no --ci-base): those lines are then not built at all. That is how
    # upstream's file, whose DeepEP list is hard-coded, still builds for another list.
    deferred = None
    if deepep:
        refused = requests.refusal(co, req, findings)
        if refused and flags.target == "test" and not flags.ci_base and isinstance(refused, FindingsError):
            deferred = refused
        elif refused:
            _refuse(refused, findings)
        else:
            for f in findings:  # warnings only: steps the check could not follow; the DeepEP check decides
                eprint(f.text())
    engine = Engine(s.docker, s.engine_timeout)
    notes: list[str] = []
    preflight: list[str] = []  # a dry run's "# preflight:" lines: what would stop the build, or was not checked
    reachable = True
    try:
        engine.server_version()
    except EngineError as exc:
        if not flags.dry_run:
            raise
        reachable = False
        preflight.append(f"not checked: {exc.message}: BuildKit features, BASE_IMAGE's digest and the builder")
        notes.append(f"the engine is not reachable ({exc.message}): BuildKit features, BASE_IMAGE's digest and "
                     "the builder were not checked")  # fmt: skip
    if reachable:  # the positive control: a file any BuildKit builder must accept, built for real
        _preflight(lambda: _require_buildkit(engine), flags.dry_run, preflight)
    if reachable and flags.target != "base" and not preflight:
        _preflight(lambda: _require_features(engine, co.dockerfile, notes), flags.dry_run, preflight)
    if flags.pull and reachable and flags.target != "base":
        _pull(engine, s.require("base_image"), flags.dry_run, "BASE_IMAGE", notes)
    facts = requests.base_facts(s, co, engine, resolve=reachable, from_registry=flags.pull)
    if facts is None and flags.dry_run:  # no engine: the checkout's files still say what would be built
        from rocmci.image import base as basemod

        facts = planmod.BaseFacts(s.require("base_image"), None, False, None,
                                  basemod.tier(co.path, lambda ref: (None, False)), tag_only=True)  # fmt: skip
        notes.append(f"BASE_IMAGE {facts.image} was not looked up (no engine): the hashes shown use its tag")
    if flags.dry_run and reachable and facts is not None and facts.digest is None:
        notes.append(f"BASE_IMAGE {facts.image} is not on this engine: a build refuses to key reuse on a tag "
                     "(--pull fetches it); the hashes shown use its tag")  # fmt: skip
        facts = replace(facts, tag_only=True)
    builder = _builder(engine) if reachable else None
    load = builder is not None and builder[1] != "docker"
    chain = planmod.tier_chain(s, builder)
    if builder is not None:
        how = "--load puts each result in the local image store" if load else "results land in the image store"
        notes.append(f"buildx builder {builder[0]} (driver {builder[1]}): {how}; {chain.describe()}")
    ci_base = flags.ci_base
    if ci_base and reachable and flags.pull:
        _pull(engine, ci_base, flags.dry_run, "the given ci_base", notes)
    ci_digest = _digest(engine, ci_base, flags.pull) if ci_base and reachable else None
    ci_labels = engine.image_labels(ci_base) if ci_base and reachable else None
    if ci_base and reachable and ci_labels is None and not flags.dry_run:
        raise UsageError(f"--ci-base {ci_base} is not on this engine", hint="pull it, or add --pull")
    request = requests.build_request(
        s, co, req, target=flags.target, tag=flags.tag, ci_base=ci_base, push=flags.push, force=flags.force, base=facts,
        extra_args=extra_args, load=load, ci_base_digest=ci_digest, ci_base_labels=ci_labels, chain=chain,
    )  # fmt: skip
    plan = planmod.plan_build(request)
    ci_step = next((st for st in plan.steps if st.target == "ci_base"), None)
    if ci_step is not None:
        request = _ci_base_reuse(s, co, engine, request, ci_step, facts, reachable, flags, notes)
        plan = planmod.plan_build(request)
    if deferred is not None:
        if request.retarget is None:  # the checkout's ci_base would be built: the refusal stands
            _refuse(deferred, findings)
        notes.append(f"the checkout's ci_base is not built, so its lines the arch check refuses do not reach this "
                     f"image ({deferred.message}); a build of that ci_base would be refused")  # fmt: skip
    tier = facts.tier if facts else None
    if flags.pull and reachable and tier and any(step.target == "base" for step in plan.steps):
        _pull(engine, tier.upstream, flags.dry_run, f"the base tier's BASE_IMAGE ({tier.path.name})", notes)
    if reachable and any(step.target == "base" for step in plan.steps):
        from rocmci.checkout import BASE_DOCKERFILE
        from rocmci.checkout import load as load_dockerfile

        _preflight(lambda: _require_features(engine, load_dockerfile(co.path, BASE_DOCKERFILE), notes), flags.dry_run,
                   preflight)  # fmt: skip
    if flags.dry_run:
        client = _client(engine)
        for line in preflight:
            print(f"# preflight: {line}")
        commands = []
        for step in plan.steps:
            note = f"{step.target}: skipped when {step.tag} carries {label.INPUT_HASH}={step.input_hash}"
            commands.append((note, ["env", "DOCKER_BUILDKIT=1", *step.argv(client)]))
            if step.target == "retarget":
                commands.append((f"then, inside {step.tag}, the verifier (copied from {packaged.VERIFIER}):",
                                 retargetmod.verify_argv(client, step)))  # fmt: skip
            if step.deepep_check is not None:
                commands.append((evidence.comment(step.tag, step.deepep_check),
                                 evidence.argv(client, step.tag, step.deepep_check)))  # fmt: skip
            if step.push:
                commands.append(("", step.push_argv(client)))
        _print_commands(commands)
        for note in (*notes, *plan.notices, *plan.notes):
            eprint(f"note: {note}")
        eprint(f"dry run: image {plan.tag}; nothing was built")
        return 0
    for note in (*notes, *plan.notices):
        eprint(f"note: {note}")
    from rocmci.image.build import build as run_build

    if chain.layouts is not None:
        chain.layouts.mkdir(parents=True, exist_ok=True)

    run_build(plan, engine, live=_live(), log=eprint)
    return 0


def _refuse(refused, findings) -> None:
    from rocmci.image import check as checkmod

    if refused.exit_code == 1:  # findings in the file: show them all, as image.check would
        eprint(checkmod.render(findings))
    raise refused


def _require_buildkit(engine) -> None:
    from rocmci.engine import NO_BUILDER_HINT
    from rocmci.errors import PreflightError

    ok, detail = engine.buildkit_works()
    if not ok:
        raise PreflightError(f"{engine.client} cannot build an image with BuildKit: {detail}", hint=NO_BUILDER_HINT)


def _preflight(check, dry_run: bool, lines: list[str]) -> None:
    """Run a check that refuses the build; a dry run prints its refusal as a `# preflight:` line and goes on."""
    from rocmci.errors import RocmciError

    try:
        check()
    except RocmciError as exc:
        if not dry_run:
            raise
        lines.append(f"the build would stop here (exit {exc.exit_code}): {exc.one_line()}")


def _pull(engine, ref: str, dry_run: bool, what: str, notes: list[str]) -> None:
    if dry_run:
        notes.append(f"--pull: {what} {ref} would be pulled first: docker pull {ref}")
        return
    eprint(f"pulling {what} {ref}")
    engine.pull(ref)


def _digest(engine, ref: str, from_registry: bool) -> str | None:
    """What `ref` is now: with --pull the registry's digest (a republished tag is seen), else the local one's."""
    if from_registry and "@" not in ref:
        found = engine.registry_digest(ref)
        if found:
            return found
    return engine.image_digest(ref)


def _ci_base_reuse(s, co, engine, request, ci_step, facts, reachable: bool, flags, notes: list[str]):
    """vLLM CI's ci_base under this build's content hash (ci-bake-rocm.sh's own hash): built on when the registry
    or this engine holds it; else, for another DeepEP arch list than CI's, CI's own ci_base retargeted (rocSHMEM
    and DeepEP rebuilt); else rocmci's own ci_base is built, carrying the labels the bake writes."""
    from dataclasses import replace

    from rocmci.image import cibase

    base_arg = ci_step.build_args.get("BASE_IMAGE", "")
    if base_arg and "@sha256:" not in base_arg and not (facts and facts.digest and not facts.tag_only):
        notes.append("vLLM CI's ci_base content hash needs BASE_IMAGE's digest: not computed, so no published "
                     "ci_base is looked for")  # fmt: skip
        return request
    base_digest = facts.digest if facts else None
    found = cibase.compute(co.path, ci_step.build_args, base_digest, s.ci_base_tag)
    if found is None:
        notes.append(f"the checkout has no {cibase.SCRIPT}: vLLM CI's ci_base content hash is not computed, so "
                     "no published ci_base is looked for")  # fmt: skip
        return request
    tag = found.tag(s.ci_base_tag)
    if request.target != "test" or not reachable:
        if request.target == "test":
            notes.append(f"vLLM CI's ci_base for these inputs is {tag}: the engine is not reachable, so whether it "
                         "exists was not checked")  # fmt: skip
        return replace(request, ci_base_meta=found.labels)
    hit = _published(engine, tag, found.content_hash, flags, notes)
    if hit is not None:
        labels, digest, _, _ = hit
        why = f"vLLM CI's ci_base with the same {cibase.HASH_LABEL} {found.content_hash[:16]}"
        return replace(request, ci_base_image=tag, ci_base_digest=digest, ci_base_labels=labels, ci_base_reused=why)
    looked = [tag]
    retargeted = _ci_arch_reuse(s, co, engine, request, ci_step, base_digest, flags, notes, looked)
    if retargeted is not None:
        return retargeted
    notes.append(f"no {' or '.join(looked)} in its registry or on this engine: ci_base is built (labelled as the "
                 "bake labels it)")  # fmt: skip
    return replace(request, ci_base_meta=found.labels)


def _published(engine, tag: str, content_hash: str, flags, notes: list[str]):
    """vLLM CI's ci_base `tag` when the registry or this engine holds it and its content-hash label matches:
    (labels, the digest a build is keyed on, whether that digest is a registry digest, the local image's attributes
    or None), else None. With --pull
    (or no local copy) a registry's copy is pulled first; a dry run takes the label from the tag that names it."""
    from rocmci.image import cibase

    in_registry = engine.registry_digest(tag)
    labels = engine.image_labels(tag)
    if in_registry and (flags.pull or labels is None):
        _pull(engine, tag, flags.dry_run, "vLLM CI's ci_base", notes)
        if not flags.dry_run:
            labels = engine.image_labels(tag)
    if labels is None and in_registry and flags.dry_run:
        labels = {cibase.HASH_LABEL: content_hash}  # its tag names the hash; the real run reads the label
    if labels is None:
        return None
    if labels.get(cibase.HASH_LABEL) != content_hash:
        notes.append(f"{tag} is here but its {cibase.HASH_LABEL} is {labels.get(cibase.HASH_LABEL) or 'absent'}: "
                     "not reused")  # fmt: skip
        return None
    # Keyed on what the build starts from: the local copy (pulled first with --pull), the registry's in a dry run.
    attrs = engine.image_attrs(tag)
    local = engine.image_digest(tag) if attrs else None
    digest = local or in_registry
    return labels, digest, bool(digest) and digest != (attrs or {}).get("Id"), attrs


def _ci_arch_reuse(s, co, engine, request, ci_step, base_digest, flags, notes: list[str], looked: list[str]):
    """For a DeepEP arch list other than CI's: the ci_base CI publishes for its own list (the build args without
    rocmci's DEEPEP_ROCM_ARCH, which CI never passes: the script resolves the Dockerfile's default), planned as a
    retarget FROM it pinned by digest. None when the lists agree, CI's is not published, or it cannot be used."""
    from dataclasses import replace

    from rocmci import arch as archmod
    from rocmci.errors import UsageError
    from rocmci.image import base, cibase, requests
    from rocmci.image import plan as planmod
    from rocmci.image import retarget as retargetmod

    ci = cibase.compute(co.path, cibase.as_ci_passes(ci_step.build_args), base_digest, s.ci_base_tag)
    ci_list = ci.labels.get(label.VLLM_DEEPEP_ARCH, "") if ci else ""
    try:
        if not ci_list or archmod.parse_arch_list(ci_list, what="CI's DEEPEP_ROCM_ARCH") == tuple(request.archs):
            return None
    except UsageError:  # not a list the script resolved (e.g. a value of its own): nothing to compare with
        return None
    listing, tag = archmod.canonical(request.archs), ci.tag(s.ci_base_tag)
    looked.append(tag)
    if request.chain is not None and request.chain.kind == planmod.CONTEXT:
        notes.append(f"vLLM CI's ci_base for CI's arch list {ci_list} is not looked for ({tag}): a retarget "
                     "is not chained through OCI layouts; set image_cache_registry")  # fmt: skip
        return None
    hit = _published(engine, tag, ci.content_hash, flags, notes)
    if hit is None:
        return None
    labels, digest, pinnable, attrs = hit  # attrs None in a dry run that did not pull: the checkout's pins show
    if attrs is None:
        notes.append(f"{tag} is not on this engine: the retarget below shows the checkout's DeepEP and rocSHMEM "
                     "pins; a real build pulls it and takes the pins from its labels")  # fmt: skip
    config = (attrs or {}).get("Config") or {}
    try:
        rreq = requests.retarget_request(
            s, co, from_image=base.pinned(tag, digest, pinnable), from_identity=str((attrs or {}).get("Id") or digest),
            tag=f"{s.image_repo}:ci-base-retarget-{archmod.slug(request.archs)}", force=request.force,
            from_labels=labels if attrs else None, from_workdir=config.get("WorkingDir") or "/",
        )  # fmt: skip
    except UsageError as exc:
        notes.append(f"vLLM CI's ci_base {tag} is not retargeted ({exc.one_line()})")
        return None
    step = retargetmod.plan_retarget(rreq, retargetmod.overlay_text()).step
    notes.extend(rreq.notes)
    why = (f"vLLM CI's ci_base for CI's arch list {ci_list} is reused ({tag}); only rocSHMEM and DeepEP are "
           f"rebuilt for {listing}")  # fmt: skip
    return replace(request, retarget=step, ci_base_labels=labels, ci_base_digest=digest, ci_base_reused=why)


def _require_features(engine, df, notes: list[str]) -> None:
    """Refuse before the first stage when the builder's parser rejects a feature the Dockerfile uses."""
    from rocmci.image import features

    found = features.uses(df)
    gaps = features.missing(found, engine.parses)
    if gaps:
        raise features.refusal(df, gaps, engine.client)
    notes.extend(features.notes(df, found))


def _builder(engine):
    from rocmci.errors import EngineError

    try:
        return engine.builder()
    except EngineError:
        return None


def retarget(flags) -> int:
    from rocmci import packaged
    from rocmci.engine import Engine
    from rocmci.errors import EngineError, UsageError
    from rocmci.image import requests
    from rocmci.image import retarget as retargetmod
    from rocmci.image.build import build_step

    if not flags.from_:
        raise UsageError("image.retarget needs --from IMAGE", hint="name a vLLM ROCm image, e.g. rocm/vllm-ci:<commit>")
    s = _settings(flags, build_network=flags.network)
    co = requests.checkout(s)
    engine = Engine(s.docker, s.engine_timeout)
    # The image's labels say which DeepEP and rocSHMEM it holds; a dry run reads them too when it can.
    try:
        attrs = engine.image_attrs(flags.from_)
    except EngineError:
        if not flags.dry_run:
            raise
        attrs = None
        eprint(f"note: the engine is not reachable: pins come from the checkout, not from {flags.from_}'s labels")
    if attrs is None and not flags.dry_run:
        raise UsageError(f"no image {flags.from_} on this engine", hint="build or pull it first")
    config = (attrs or {}).get("Config") or {}
    request = requests.retarget_request(
        s, co, from_image=flags.from_, from_identity=str((attrs or {}).get("Id") or flags.from_), tag=flags.tag,
        force=flags.force,
        from_labels=dict(config.get("Labels") or {}) if attrs else None, from_workdir=config.get("WorkingDir") or "/",
    )  # fmt: skip
    plan = retargetmod.plan_retarget(request, retargetmod.overlay_text())
    for note in plan.notes:
        eprint(f"note: {note}")
    if flags.dry_run:
        client = _client(engine)
        rows = [(arg, plan.step.build_args[arg], source) for arg, source in plan.sources.items()]
        print(table(("build arg", "value", "read from"), rows, stream=sys.stderr), file=sys.stderr)
        _print_commands([
            (f"skipped when {plan.step.tag} carries its input hash",
             ["env", "DOCKER_BUILDKIT=1", *plan.step.argv(client)]),
            (f"then, inside the result, the verifier (copied from {packaged.VERIFIER}):", plan.verify_argv(client)),
        ])  # fmt: skip
        eprint(f"dry run: image {plan.step.tag}; nothing was built")
        return 0
    result = build_step(plan.step, engine, live=_live(), log=eprint)
    action = "built" if result.built else "reused"  # build_step verified it (retarget target) before any push
    eprint(f"{action} {plan.step.tag}: deep_ep imports; code objects for {';'.join(result.verified)}")
    return 0


_SCP_PASSWORD = re.compile(r"(?<![^\s,;=])([A-Za-z0-9._~+-]+):[^@\s/]+@(?=[A-Za-z0-9.-]+:)")


def shown_labels(labels: dict[str, str]) -> dict[str, str]:
    """An image's labels as image.inspect shows them: a label whose name says it holds a secret (a base image's
    GITHUB_TOKEN, `*.password`) is `***`, and a password in a URL (any scheme) or an scp-like `user:pw@host:path`
    is `***`; the rest passes the terminal and JSON gates as every printed value does."""
    from rocmci.secrets import is_secret
    from rocmci.values import without_url_credentials

    return {
        key: "***" if is_secret(key) else _SCP_PASSWORD.sub(r"\1:***@", without_url_credentials(value))
        for key, value in labels.items()
    }


def inspect(flags) -> int:
    """An image's labels as a table: what it was built from (default: the configured image)."""
    from rocmci.engine import Engine
    from rocmci.errors import UsageError

    s = settingsmod.resolve()
    ref = flags.tag or configured_image(s)
    labels = Engine(s.docker, s.engine_timeout).image_labels(ref)
    if labels is None:
        raise UsageError(f"no image {ref} on this engine", hint="build it with `rocmci image.build` or give --tag")
    labels = shown_labels(labels)
    if flags.json:
        print(to_json({"image": ref, "labels": labels}))
        return 0
    rows = []
    for title, *keys in label.INSPECT_ROWS:
        found = [labels.get(k, "") for k in keys]
        rows.append((title, " @ ".join(x for x in found if x) or "-"))
    rocm = labels.get(label.VLLM_ROCM_VERSION)  # not any "*rocm*version*" key: metadata_version is no ROCm
    rows.append(("ROCm version", f"{rocm} ({label.VLLM_ROCM_VERSION})" if rocm else "unknown (no label)"))
    print(f"{ref}\n")
    print(table(("", "value"), rows))
    return 0
