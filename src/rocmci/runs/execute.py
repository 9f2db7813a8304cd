"""Running workloads end to end: GPUs -> preflight -> container specs -> run -> outcomes -> reports."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmci import labels as label
from rocmci.engine import Engine
from rocmci.errors import EngineError, PreflightError, WorkloadError
from rocmci.gpus import Gpu, detect_gpus
from rocmci.report import plural
from rocmci.runs import container as ctr
from rocmci.runs import results as res
from rocmci.runs.dryrun import dry_run_lines  # noqa: F401 - what --dry-run prints
from rocmci.runs.outcomes import merge_results, outcome_of, report  # noqa: F401 - report: the run's last step
from rocmci.runs.workarounds import Workaround
from rocmci.runs.workloads import (
    RESULTS_MOUNT,
    Workload,
    check_archs,
    choose_gpus,
    expected_gpu_count,
    host_env,
    runner_env,
    shard_env,
    visible_env,
)
from rocmci.secrets import Redactor, is_secret

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
PLUGINS_MOUNT = "/rocmci-plugins"


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
    gpus: tuple[int, ...] | None = None
    skip_preflight: bool = False
    no_container: bool = False
    dry_run: bool = False
    strict: bool = False  # fail on what vLLM's runner lets pass: obsolete workarounds, no tests collected
    env: dict[str, str] = field(default_factory=dict)  # --env overrides, secrets included
    public: frozenset[str] = frozenset()  # --public: names whose values may be shown


@dataclass(frozen=True)
class PlannedRun:
    workload: Workload
    gpus: list[Gpu]
    spec: ctr.ContainerSpec | None  # None in host mode
    slot: int  # position in its wave: GPU set and rendezvous ports
    env: dict[str, str] = field(default_factory=dict)  # host mode: what rocmci sets (no secrets); printed


@dataclass
class Prepared:
    """Everything decided before anything starts: waves of runs that go at once."""

    waves: list[list[PlannedRun]]
    warnings: list[str]
    notes: list[str] = field(default_factory=list)  # workarounds applied or left out, and why
    files: list[Path] = field(default_factory=list)  # logs and JUnit XML this run wrote (set by execute)

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


def _gpu_sets(gpus: list[Gpu], opts: RunOptions, need: int, width: int, problems: list) -> list[list[Gpu]]:
    try:
        return choose_gpus(gpus, opts.gpus, need, width)
    except PreflightError as exc:
        problems.append(exc)
    if not opts.gpus or not (opts.dry_run or opts.skip_preflight):
        return [[] for _ in range(width)]
    # Going ahead anyway: give each run its share of the GPUs named, so the plan still shows them.
    by_index = {g.index: g for g in gpus}
    pool = [by_index.get(i, Gpu(i, -1, "unknown", None)) for i in opts.gpus]
    if not opts.no_container:
        pool = [g for g in pool if g.render_minor is not None]  # a container needs the render node
    return [pool[i * need : (i + 1) * need] for i in range(width)]


def preflight(
    workloads: Sequence[Workload],
    opts: RunOptions,
    engine: Engine | None,
    gpus: list[Gpu],
    environ: Mapping[str, str] | None = None,
) -> tuple[list[list[Gpu]], list[str]]:
    """GPU sets for the widest wave; raises on the first problem unless skipped (then they are warnings).

    A dry run never needs the engine: when it cannot be asked, that is one more warning.
    """
    environ = os.environ if environ is None else environ
    problems: list[PreflightError | EngineError] = []
    need = max((w.gpus for w in workloads), default=1)
    width = max((len(wave) for wave in waves(workloads)), default=1)
    if not (opts.host_root / "dev/kfd").exists():
        problems.append(
            PreflightError(
                "/dev/kfd is missing: no AMD GPU driver on this host", hint="run on an AMD GPU host with ROCm"
            )
        )
    if opts.no_container:
        expected = expected_gpu_count(environ)
        if expected is not None and need * width > expected:
            problems.append(
                PreflightError(
                    f"VLLM_CI_EXPECTED_GPU_COUNT={expected}: this pod has {plural(expected, 'GPU')}, "
                    f"the run needs {need * width}",
                    hint="give the step num_gpus for every shard, or use fewer --shards",
                )
            )
    sets = _gpu_sets(gpus, opts, need, width, problems)
    if not opts.no_container and engine is not None:
        try:
            labels = engine.image_labels(opts.image)
        except EngineError as exc:
            if not opts.dry_run:
                raise
            problems.append(EngineError(f"image {opts.image} not checked: {exc.message}"))
        else:
            if labels is None:
                problems.append(
                    PreflightError(f"image {opts.image} not found", hint="build it with `invoke image.build`")
                )
            elif any(sets):
                try:
                    check_archs([g for s in sets for g in s], labels.get(label.ARCH), opts.image)
                except PreflightError as exc:
                    problems.append(exc)
    if problems and not (opts.skip_preflight or opts.dry_run):
        raise problems[0]
    return sets, [p.one_line() for p in problems]


def spec_for(workload: Workload, gpus: list[Gpu], opts: RunOptions, slot: int) -> ctr.ContainerSpec:
    """The container: /dev/kfd and exactly these GPUs' render nodes, vLLM's runner environment, --init."""
    env = runner_env(opts.workdir, PLUGINS_MOUNT if workload.sharded else None)
    env.update(workload.env)
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
        labels={label.WORKLOAD: workload.kind},
        name=ctr.container_name(workload.kind),
    )


def host_env_for(workload: Workload, gpus: list[Gpu], opts: RunOptions, slot: int) -> dict[str, str]:
    """Host mode: what rocmci sets for the process (secrets from --env are added at start, never printed)."""
    env = runner_env(opts.workdir, str(PLUGINS) if workload.sharded else None)
    env.update(workload.env)
    env.update(visible_env(gpus))
    if workload.sharded:
        env.update(shard_env(slot))
    env.update({k: v for k, v in opts.env.items() if not is_secret(k)})
    return env


def plan_run(workload: Workload, gpus: list[Gpu], opts: RunOptions, slot: int) -> PlannedRun:
    if opts.no_container:
        return PlannedRun(workload, gpus, None, slot, host_env_for(workload, gpus, opts, slot))
    return PlannedRun(workload, gpus, spec_for(workload, gpus, opts, slot), slot)


def prepare(
    workloads: Sequence[Workload], opts: RunOptions, engine: Engine | None, notes: Sequence[str] = ()
) -> Prepared:
    sets, warnings = preflight(workloads, opts, engine, host_gpus(opts))
    planned = [[plan_run(w, sets[slot], opts, slot) for slot, w in enumerate(wave)] for wave in waves(workloads)]
    return Prepared(planned, warnings, list(notes))


def redactor(opts: RunOptions) -> Redactor:
    """What every printed or written line of a run goes through: known secrets and every --env value."""
    return Redactor(os.environ, given=opts.env, public=opts.public)


def _client_env(opts: RunOptions) -> dict[str, str]:
    """The docker client's environment: secrets given with --env reach containers by name from here."""
    return {**os.environ, **{k: v for k, v in opts.env.items() if is_secret(k)}}


class _Terminated(WorkloadError):
    def __init__(self) -> None:
        super().__init__("stopped by SIGTERM; every workload was stopped", exit_code=143)


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Terminated()


def execute(
    prepared: Prepared,
    opts: RunOptions,
    engine: Engine | None,
    registry: Sequence[Workaround],
    out: Callable[[str], None],
) -> list[res.Result]:
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    redact = redactor(opts)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    lock = threading.Lock()
    results: dict[int, res.Result] = {}
    running = ctr.Running()

    def start(planned: PlannedRun, on_line: Callable[[str], None]) -> ctr.RunResult:
        if planned.spec is not None:
            return ctr.run_container(
                planned.spec, engine, timeout=opts.timeout, on_line=on_line, env=_client_env(opts), running=running
            )
        env = {**host_env(os.environ), **planned.env, **{k: v for k, v in opts.env.items() if is_secret(k)}}
        return ctr.run_host(
            planned.workload.argv, workdir=opts.workdir, env=env, timeout=opts.timeout, on_line=on_line,
            running=running,
        )  # fmt: skip

    def one(number: int, planned: PlannedRun, width: int) -> None:
        workload = planned.workload
        log_path = opts.results_dir / f"{workload.name.replace(' ', '-').replace('/', 'of')}-{stamp}.log"
        prefix = f"[{workload.name}] " if width > 1 else ""
        with lock:
            prepared.files.append(log_path)
            if workload.junit:
                prepared.files.append(opts.results_dir / workload.junit)
        with open(log_path, "w", encoding="utf-8") as log:

            def on_line(line: str) -> None:
                clean = redact(line)
                with lock:
                    log.write(clean + "\n")
                    out(prefix + clean)

            attempts = 0
            while True:
                attempts += 1
                if workload.junit:
                    (opts.results_dir / workload.junit).unlink(missing_ok=True)
                run = start(planned, on_line)
                # vLLM's pipeline retries a job once on exit 134 (SIGABRT: a ROCm/KFD GPU hang).
                # 134 from a shell or `docker --init`, -6 from a host process: the same SIGABRT.
                if res.signal_of(run.exit_code) == signal.SIGABRT and not run.timed_out and attempts == 1:
                    on_line(f"rocmci: exit {run.exit_code} (SIGABRT, e.g. a GPU hang on ROCm): retrying once")
                    continue
                break
        result = outcome_of(workload, run, opts, registry, str(log_path))
        result.attempts = attempts
        results[number] = result

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        number = 0
        for wave in prepared.waves:
            threads = []
            for planned in wave:
                threads.append(threading.Thread(target=one, args=(number, planned, len(wave)), daemon=True))
                number += 1
            try:
                for t in threads:  # inside the try: an interrupt between two starts stops the first
                    t.start()
                for t in threads:
                    while t.is_alive():
                        t.join(timeout=0.2)
            except BaseException:
                # Ctrl-C, SIGTERM: stop every container and process group, then let the threads finish.
                running.stop_all()
                for t in threads:
                    if t.ident is not None:  # started
                        t.join(timeout=15)
                raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return merge_results(prepared, [results[i] for i in sorted(results)], opts)
