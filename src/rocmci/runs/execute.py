"""Running workloads end to end: GPUs -> preflight -> container specs -> run -> outcomes -> reports."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rocmci import labels as label
from rocmci import process
from rocmci.engine import Engine
from rocmci.errors import EngineError, InputError, PreflightError, RocmciError, WorkloadError
from rocmci.files import prepare_folder
from rocmci.gpus import Gpu, detect_gpus, with_render_nodes
from rocmci.report import plural, safe
from rocmci.runs import container as ctr
from rocmci.runs import images
from rocmci.runs import results as res
from rocmci.runs import workloads as wl
from rocmci.runs.dryrun import dry_run_lines  # noqa: F401 - what --dry-run prints
from rocmci.runs.outcomes import merge_results, outcome_of, report  # noqa: F401 - report: the run's last step
from rocmci.runs.types import RESULTS_WHAT, PlannedRun, Prepared, RunOptions  # noqa: F401 - RunOptions: callers build it here
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
from rocmci.workaround_registry import Workaround

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
PLUGINS_MOUNT = "/rocmci-plugins"
# What the runner's `docker run` passes by name (-e NAME): set in the docker client's environment or not at all.
PASS_BY_NAME = ("HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "BUILDKITE_PARALLEL_JOB",
                "BUILDKITE_PARALLEL_JOB_COUNT")  # fmt: skip


def host_gpus(opts: RunOptions) -> list[Gpu]:
    """The GPUs a run may use: in host mode only those whose render node exists here (a pod's own)."""
    gpus = detect_gpus(opts.host_root / "sys/class/kfd/kfd/topology/nodes")
    return with_render_nodes(gpus, opts.host_root) if opts.no_container else gpus


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
    notes: list[str] | None = None,
) -> tuple[list[list[Gpu]], list[str]]:
    """GPU sets for the widest wave; raises on the first problem unless skipped (then they are warnings).

    A dry run never needs the engine: when it cannot be asked, that is one more warning. What the image
    says of itself (archs, ROCm) is added to `notes`.
    """
    environ = os.environ if environ is None else environ
    notes = [] if notes is None else notes
    needs_deepep = any(w.needs_deepep for w in workloads)
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
                    hint="give the step num_gpus for every shard, or use fewer --shards"
                    if width > 1
                    else "give the step num_gpus for what the run needs",
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
                    PreflightError(
                        f"image {opts.image} not found",
                        hint="pull it (--pull), or build one with `rocmci image.build`",
                    )
                )
            else:
                found = images.facts(engine, opts.image, labels)
                notes.append(found.note(opts.image))
                if any(sets) and needs_deepep:
                    try:
                        check_archs([g for s in sets for g in s], found.archs, opts.image, found.arch_source)
                    except PreflightError as exc:
                        problems.append(exc)
    if problems and not (opts.skip_preflight or opts.dry_run):
        raise problems[0]
    return sets, [p.one_line() for p in problems]


def spec_for(workload: Workload, gpus: list[Gpu], opts: RunOptions, slot: int) -> ctr.ContainerSpec:
    """The container: /dev/kfd and exactly these GPUs' render nodes, vLLM's runner environment, --init."""
    name = ctr.container_name(workload.kind)
    env = wl.container_env(wl.job_id(os.environ, name.rsplit("-", 1)[-1]), os.environ)
    env.update(runner_env(opts.workdir, PLUGINS_MOUNT if workload.sharded else None))
    env.update(workload.env)
    if workload.sharded:
        env.update(shard_env(slot))
    # By name, as the runner passes them: their values stay in the docker client's environment, never in an
    # argv that `ps` shows to every user. Every --env value is one (a secret may sit under a plain name),
    # but those the user made --public, which are printed anyway.
    hidden = {k for k in opts.env if k not in opts.public}
    env.update({k: v for k, v in opts.env.items() if k not in hidden})
    for given in hidden:
        env.pop(given, None)
    by_name = [n for n in PASS_BY_NAME if n not in env]
    pass_env = (*by_name, *sorted(k for k in hidden if k not in PASS_BY_NAME))
    rdma_devices, caps = ctr.rdma_flags(opts.host_root)
    results = opts.results_dir.resolve()
    mounts = (
        ctr.Mount(str(Path(os.path.expanduser(opts.hf_cache)).resolve()), ctr.HF_HOME),
        ctr.Mount(str(results), RESULTS_MOUNT),
    )
    if workload.sharded:
        mounts += (ctr.Mount(str(PLUGINS), PLUGINS_MOUNT, readonly=True),)
    return ctr.ContainerSpec(
        image=opts.image,
        argv=workload.argv if workload.kind == "step" else wl.in_container(workload.argv),
        workdir=opts.workdir,
        env=env,
        pass_env=pass_env,
        devices=ctr.device_flags(gpus, opts.host_root) + rdma_devices,
        cap_add=caps,
        ulimits=(ctr.core_ulimit(),),
        group_add=ctr.host_gids(),
        mounts=mounts,
        shm_size=opts.shm_size,
        memory=opts.memory,
        network=opts.network,
        labels={label.WORKLOAD: workload.kind},
        name=name,
    )


def host_env_for(workload: Workload, gpus: list[Gpu], opts: RunOptions, slot: int) -> dict[str, str]:
    """Host mode: what rocmci sets for the process (secrets from --env are added at start, never printed)."""
    env = wl.runner_defaults(os.environ)
    env.update(runner_env(opts.workdir, str(PLUGINS) if workload.sharded else None))
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
    found: list[str] = []
    sets, warnings = preflight(workloads, opts, engine, host_gpus(opts), notes=found)
    planned = [[plan_run(w, sets[slot], opts, slot) for slot, w in enumerate(wave)] for wave in waves(workloads)]
    return Prepared(planned, warnings, [*found, *notes])


def redactor(opts: RunOptions) -> Redactor:
    """What every printed or written line of a run goes through: known secrets and every --env value."""
    return Redactor(os.environ, given=opts.env, public=opts.public)


def _client_env(opts: RunOptions) -> dict[str, str]:
    """The docker client's environment: the values given with --env reach containers by name from here."""
    return {**os.environ, **{k: v for k, v in opts.env.items() if k not in opts.public}}


class _Terminated(WorkloadError):
    def __init__(self) -> None:
        super().__init__("stopped by SIGTERM; every workload was stopped", exit_code=143)


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Terminated()


def _results_unwritable(exc: OSError, folder: Path, written: list[Path]) -> InputError:
    """A log write failed mid-run: this run's files go (a cut log is no record), and one error names the setting."""
    for path in written:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    reason = exc.strerror or type(exc).__name__
    return InputError(
        f"cannot write the workload log during the run: {reason} (from {RESULTS_WHAT}); every workload was stopped",
        where=str(folder),
        hint="free space there or name another folder (ROCMCI_RESULTS_DIR)",
    )


_LOG_NAME_KEEP = re.compile(r"[^A-Za-z0-9._-]")
LOG_NAME_MAX = 96  # characters of the name before the stamp: the file name stays far below NAME_MAX (255)


def log_file_name(name: str, stamp: str, pid: int) -> str:
    """A run's log file name from its workload's name (a step's label, from the step file).

    Only letters, digits and . _ - reach the path: a NUL, a line break or a '/' in a label cannot make an open()
    fail or a file land elsewhere, and a 300-character label fits. When anything was replaced or cut, a hash of the
    whole name follows, so two labels that differ only there keep two logs. The process id keeps two runs of one
    step started in the same second from writing one file.
    """
    plain = name.replace(" ", "-").replace("/", "of")
    safe = _LOG_NAME_KEEP.sub("_", plain).lstrip(".")
    if safe != plain or len(safe) > LOG_NAME_MAX or not safe:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        safe = f"{safe[: LOG_NAME_MAX - 11]}-{digest}".lstrip("-")
    return f"{safe}-{stamp}-{pid}.log"


def execute(
    prepared: Prepared,
    opts: RunOptions,
    engine: Engine | None,
    registry: Sequence[Workaround],
    out: Callable[[str], None],
) -> list[res.Result]:
    # A file, /proc, /sys, a read-only or full disk: one line naming the setting, before anything starts.
    prepare_folder(opts.results_dir, RESULTS_WHAT)
    redact = redactor(opts)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    lock = threading.Lock()
    results: dict[int, res.Result] = {}
    running = ctr.Running()
    # The folder was checked before the run, but a disk can fill during it: the first failed write of a
    # log stops every workload, and the run ends in one error naming the setting (no traceback in a thread).
    failed: list[OSError] = []

    def write_failed(exc: OSError) -> None:
        with lock:
            failed.append(exc)
        running.stop_all()

    def start(planned: PlannedRun, on_line: Callable[[str], None]) -> ctr.RunResult:
        if planned.start is not None:  # a Buildkite job: vLLM's runner, or a native step's pod
            return planned.start(on_line, running)
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
        log_path = opts.results_dir / log_file_name(workload.name, stamp, os.getpid())
        prefix = f"[{workload.name}] " if width > 1 else ""
        with lock:
            prepared.files.append(log_path)
            if workload.junit:
                prepared.files.append(opts.results_dir / workload.junit)
        try:
            log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed below, where a failed flush is caught
        except OSError as exc:
            write_failed(exc)
            return
        try:

            def on_line(line: str) -> None:
                # The workload's own bytes: redacted, then escaped for a terminal (ESC, bidi, CR as text; tabs
                # kept), in the log as on the screen. Not cut: the log is the whole record.
                clean = safe(redact(line), limit=None, one_line=False)
                with lock:
                    if not failed:
                        try:
                            log.write(clean + "\n")
                            log.flush()  # a full disk shows now, on this line, not at close
                        except OSError as exc:
                            failed.append(exc)
                    out(prefix + clean)
                if failed:
                    running.stop_all()  # no run goes on without its log; outside the lock: halting waits

            attempts = 0
            while True:
                attempts += 1
                if workload.junit:
                    (opts.results_dir / workload.junit).unlink(missing_ok=True)
                try:
                    run = start(planned, on_line)
                except Exception as exc:  # noqa: BLE001 - any failure to start is this run's infrastructure error
                    detail = exc.one_line() if isinstance(exc, RocmciError) else f"{type(exc).__name__}: {exc}"
                    run = ctr.RunResult(127, False, 0.0, time.time(), f"the workload could not be started: {detail}")
                # vLLM's pipeline retries a job once on exit 134 (SIGABRT: a ROCm/KFD GPU hang).
                # 134 from a shell or `docker --init`, -6 from a host process: the same SIGABRT.
                if res.signal_of(run.exit_code) == signal.SIGABRT and not run.timed_out and attempts == 1:
                    on_line(f"rocmci: exit {run.exit_code} (SIGABRT, e.g. a GPU hang on ROCm): retrying once")
                    continue
                break
        finally:
            try:
                log.close()
            except OSError as exc:  # the last buffered bytes did not fit either
                write_failed(exc)
        result = outcome_of(workload, run, opts, registry, str(log_path))
        if workload.junit:  # read above as pytest wrote it; kept and uploaded only as its redacted copy
            res.redact_junit_file(opts.results_dir / workload.junit, redact)
        result.attempts = attempts
        results[number] = result

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        number = 0
        for wave in prepared.waves:
            runs = [functools.partial(one, number + i, planned, len(wave)) for i, planned in enumerate(wave)]
            number += len(wave)
            # Ctrl-C, SIGTERM: every container and process group is stopped, then the threads finish.
            process.run_threads(runs, running)
            if failed:
                break
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if failed:
        raise _results_unwritable(failed[0], opts.results_dir, prepared.files)
    return merge_results(prepared, [results[i] for i in sorted(results)], opts)
