"""Running workloads end to end: GPUs -> preflight -> container specs -> run -> outcomes -> reports."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmci import container as ctr
from rocmci import results as res
from rocmci.engine import Engine
from rocmci.errors import InputError, PreflightError, UsageError
from rocmci.files import write_atomic
from rocmci.gpus import Gpu, detect_gpus
from rocmci.secrets import Redactor, is_secret
from rocmci.workarounds import Workaround
from rocmci.workloads import RESULTS_MOUNT, Workload, check_archs, choose_gpus, shard_env

PLUGINS = Path(__file__).resolve().parent / "plugins"
PLUGINS_MOUNT = "/rocmci-plugins"
_ENV_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)


@dataclass
class RunOptions:
    image: str
    results_dir: Path
    timeout: float
    network: str | None  # the settings registry holds the defaults of these five
    shm_size: str
    memory: str | None
    hf_cache: str
    workdir: str
    host_root: Path = Path("/")
    gpus: str | None = None
    skip_preflight: bool = False
    no_container: bool = False
    dry_run: bool = False
    env: dict[str, str] = field(default_factory=dict)  # --env overrides, secrets included


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        m = _ENV_ASSIGN.fullmatch(pair)
        if not m:
            raise UsageError(f"--env {pair.split('=')[0]!r} must be NAME=value")
        out[m.group(1)] = m.group(2)
    return out


@dataclass(frozen=True)
class PlannedRun:
    workload: Workload
    gpus: list[Gpu]
    spec: ctr.ContainerSpec | None  # None in host mode
    slot: int  # position in its wave: GPU set and rendezvous ports


@dataclass
class Prepared:
    """Everything decided before anything starts: waves of runs that go at once."""

    waves: list[list[PlannedRun]]
    warnings: list[str]

    @property
    def runs(self) -> list[PlannedRun]:
        return [run for wave in self.waves for run in wave]


def host_gpus(opts: RunOptions) -> list[Gpu]:
    return detect_gpus(opts.host_root / "sys/class/kfd/kfd/topology/nodes")


def waves(workloads: Sequence[Workload]) -> list[list[Workload]]:
    """Runs that go together: the shards of one mode run at once; modes run one after the other."""
    out: list[list[Workload]] = []
    for w in workloads:
        if out and w.group is not None and out[-1][0].group == w.group:
            out[-1].append(w)
        else:
            out.append([w])
    return out


def preflight(
    workloads: Sequence[Workload], opts: RunOptions, engine: Engine | None, gpus: list[Gpu]
) -> tuple[list[list[Gpu]], list[str]]:
    """GPU sets for the widest wave; raises on the first problem unless skipped (then they are warnings)."""
    problems: list[PreflightError] = []
    need = max((w.gpus for w in workloads), default=1)
    width = max((len(wave) for wave in waves(workloads)), default=1)
    sets: list[list[Gpu]] = [[] for _ in range(width)]
    if not (opts.host_root / "dev/kfd").exists():
        problems.append(
            PreflightError(
                "/dev/kfd is missing: no AMD GPU driver on this host", hint="run on an AMD GPU host with ROCm"
            )
        )
    try:
        sets = choose_gpus(gpus, opts.gpus, need, width)
    except PreflightError as exc:
        problems.append(exc)
    if not opts.no_container and engine is not None:
        labels = engine.image_labels(opts.image)
        if labels is None:
            problems.append(PreflightError(f"image {opts.image} not found", hint="build it with `invoke image.build`"))
        elif any(sets):
            try:
                check_archs([g for s in sets for g in s], labels.get("rocmci.arch"), opts.image)
            except PreflightError as exc:
                problems.append(exc)
    if problems and not (opts.skip_preflight or opts.dry_run):
        raise problems[0]
    return sets, [p.one_line() for p in problems]


def spec_for(workload: Workload, gpus: list[Gpu], opts: RunOptions, slot: int) -> ctr.ContainerSpec:
    env = dict(workload.env)
    if workload.sharded:
        env.update(shard_env(slot))
    env["HF_HOME"] = ctr.HF_HOME
    env.update({k: v for k, v in opts.env.items() if not is_secret(k)})
    pass_env = ("HF_TOKEN", *sorted(k for k in opts.env if is_secret(k) and k != "HF_TOKEN"))
    results = opts.results_dir.resolve()
    mounts = (
        ctr.Mount(str(Path(os.path.expanduser(opts.hf_cache)).resolve()), ctr.HF_HOME),
        ctr.Mount(str(results), RESULTS_MOUNT),
    )
    if workload.sharded:
        mounts += (ctr.Mount(str(PLUGINS), PLUGINS_MOUNT, readonly=True),)
        env["PYTHONPATH"] = PLUGINS_MOUNT
    return ctr.ContainerSpec(
        image=opts.image,
        argv=workload.argv,
        workdir=opts.workdir,
        env=env,
        pass_env=pass_env,
        devices=ctr.device_flags(gpus, opts.host_root),
        group_add=ctr.host_gids(),
        mounts=mounts,
        shm_size=opts.shm_size,
        memory=opts.memory,
        network=opts.network,
        labels={"rocmci.workload": workload.kind},
        name=ctr.container_name(workload.kind),
    )


def prepare(workloads: Sequence[Workload], opts: RunOptions, engine: Engine | None) -> Prepared:
    sets, warnings = preflight(workloads, opts, engine, host_gpus(opts))
    planned = []
    for wave in waves(workloads):
        planned.append(
            [
                PlannedRun(w, sets[slot], None if opts.no_container else spec_for(w, sets[slot], opts, slot), slot)
                for slot, w in enumerate(wave)
            ]
        )
    return Prepared(planned, warnings)


def _client_env(opts: RunOptions) -> dict[str, str]:
    """The docker client's environment: secrets given with --env reach containers by name from here."""
    return {**os.environ, **{k: v for k, v in opts.env.items() if is_secret(k)}}


def execute(
    prepared: Prepared,
    opts: RunOptions,
    engine: Engine | None,
    registry: Sequence[Workaround],
    out: Callable[[str], None],
) -> list[res.Result]:
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    redact = Redactor({**os.environ, **opts.env})
    stamp = time.strftime("%Y%m%d-%H%M%S")
    lock = threading.Lock()
    results: dict[int, res.Result] = {}

    def one(number: int, planned: PlannedRun, width: int) -> None:
        workload = planned.workload
        log_path = opts.results_dir / f"{workload.name.replace(' ', '-').replace('/', 'of')}-{stamp}.log"
        if workload.junit:
            (opts.results_dir / workload.junit).unlink(missing_ok=True)
        prefix = f"[{workload.name}] " if width > 1 else ""
        with open(log_path, "w", encoding="utf-8") as log:

            def on_line(line: str) -> None:
                clean = redact(line)
                with lock:
                    log.write(clean + "\n")
                    out(prefix + clean)

            if planned.spec is not None:
                run = ctr.run_container(
                    planned.spec, engine, timeout=opts.timeout, on_line=on_line, env=_client_env(opts)
                )
            else:
                env = {**workload.env, **opts.env}
                if workload.sharded:
                    env.update(shard_env(planned.slot))
                    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))
                run = ctr.run_host(workload.argv, workdir=opts.workdir, env=env, timeout=opts.timeout, on_line=on_line)
        results[number] = outcome_of(workload, run, opts, registry, str(log_path))

    number = 0
    for wave in prepared.waves:
        threads = []
        for planned in wave:
            threads.append(threading.Thread(target=one, args=(number, planned, len(wave)), daemon=True))
            number += 1
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.2)
        except KeyboardInterrupt:
            if engine is not None:
                for planned in wave:
                    if planned.spec is not None:
                        ctr.remove(engine, planned.spec.name)
            raise
    ordered = [results[i] for i in sorted(results)]
    merged: list[res.Result] = []
    runs = prepared.runs
    i = 0
    while i < len(ordered):
        group = runs[i].workload.group
        j = i + 1
        while group is not None and j < len(ordered) and runs[j].workload.group == group and runs[j].workload.sharded:
            j += 1
        chunk = ordered[i:j]
        if len(chunk) == 1:
            merged.append(chunk[0])
        else:
            merged.append(merge_shards(chunk, f"moe-tests {group} ({len(chunk)} shards)"))
            shard_files = [opts.results_dir / run.workload.junit for run in runs[i:j] if run.workload.junit]
            res.merge_junit_files(shard_files, opts.results_dir / f"junit-moe-{group}.xml")
        i = j
    return merged


def teardown_hint(workload: Workload, registry: Sequence[Workaround]) -> str:
    related = [w for w in registry if workload.kind in w.workloads and w.applied_by == "rocmci"]
    if not related:
        return ""
    w = related[0]
    state = "was applied" if w.id in workload.workarounds else "was NOT applied to this run"
    refs = ", ".join(w.refs)
    return f"likely the ROCm runtime teardown crash ({refs}); workaround {w.id} {state}"


def outcome_of(
    workload: Workload, run: ctr.RunResult, opts: RunOptions, registry: Sequence[Workaround], log: str
) -> res.Result:
    junit = None
    junit_problem = None
    if workload.junit:
        path = opts.results_dir / workload.junit
        try:
            junit = res.parse_junit(path)
        except InputError as exc:
            junit_problem = exc.one_line()
    outcome, detail = res.classify(
        run.exit_code,
        junit,
        timed_out=run.timed_out,
        infra_error=run.infra_error,
        teardown_hint=teardown_hint(workload, registry),
        oom_killed=run.oom_killed,
    )
    if junit_problem and outcome in (res.Outcome.FAILED, res.Outcome.PASSED):
        detail += f" ({junit_problem})"
    return res.Result(
        workload.name, outcome, run.exit_code, run.seconds, detail, junit, list(workload.workarounds), log
    )


def merge_shards(results: list[res.Result], name: str) -> res.Result:
    """One result for the shards of one workload: a shard that drew no case does not spoil the others."""
    outcomes = [r.outcome for r in results]
    if res.Outcome.PASSED in outcomes:
        outcomes = [o for o in outcomes if o is not res.Outcome.NO_TESTS]
    outcome = res.worst(outcomes)
    junit = None
    for r in results:
        if r.junit is not None:
            junit = r.junit if junit is None else junit.merge(r.junit)
    details = "; ".join(f"shard {i}: {r.outcome.value} ({r.detail})" for i, r in enumerate(results))
    return res.Result(
        name,
        outcome,
        max(r.exit_code for r in results),
        max(r.seconds for r in results),
        details,
        junit,
        sorted({w for r in results for w in r.workarounds}),
        ", ".join(r.log or "" for r in results),
    )


def report(results: list[res.Result], opts: RunOptions, as_json: bool) -> int:
    annotation = opts.results_dir / "annotation.md"
    write_atomic(annotation, res.render_annotation(results))
    write_atomic(opts.results_dir / "results.json", res.render_json(results) + "\n")
    print(res.render_json(results) if as_json else res.render_table(results))
    if not as_json:
        print(f"\nlogs and JUnit XML in {opts.results_dir}; Buildkite annotation: {annotation}", file=sys.stderr)
    return res.EXIT_CODES[res.worst([r.outcome for r in results])]


def dry_run_lines(prepared: Prepared, engine: Engine | None) -> list[str]:
    from rocmci.report import shell_lines

    client = "docker"
    if engine is not None:
        try:
            client = engine.client
        except Exception:  # noqa: BLE001 - a dry run must print even without a docker client
            client = "docker"
    lines = [f"# preflight: {w}" for w in prepared.warnings]
    for planned in prepared.runs:
        workload = planned.workload
        gpu_text = ", ".join(f"{g.index}:{g.arch}" for g in planned.gpus) or "none detected"
        lines.append(f"# {workload.name} on GPUs [{gpu_text}]: {workload.command_line()}")
        if workload.workarounds:
            lines.append(f"# workarounds from the registry: {', '.join(workload.workarounds)}")
        argv = ctr.run_argv(planned.spec, client) if planned.spec else list(workload.argv)
        lines.append(shell_lines(argv))
    return lines
