"""rocmci benchmarks: wall time and peak memory of whole processes, each next to its reference.

Run with `nox -s bench` (or `python benchmarks/run.py` where rocmci and invoke are installed).
Writes results/bench.json. Engine-backed rows need a running Docker engine and the local base
images from .ci/base-images; without them those rows say why they were skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VLLM = REPO.parent / "shared" / "fixtures" / "vllm" / "test-amd.yaml"
BIN = Path(sys.executable).parent


@dataclass
class Measure:
    seconds: float  # median wall time
    peak_mb: float  # largest peak RSS over the runs


@dataclass
class Row:
    name: str
    value: str
    reference: str
    ratio: float | None
    target: str
    met: bool | None
    note: str = ""


def run_once(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss / 1024, proc.returncode


def measure(argv: list[str], *, repeats: int, cwd: Path = REPO, env: dict | None = None, ok=(0,)) -> Measure:
    env = {**clean_env(), **(env or {})}
    run_once(argv, cwd, env)  # warm the page cache and any compiled caches
    times, peaks = [], []
    for _ in range(repeats):
        elapsed, peak, code = run_once(argv, cwd, env)
        if code not in ok:
            raise SystemExit(f"bench: {' '.join(argv)} exited {code}")
        times.append(elapsed)
        peaks.append(peak)
    return Measure(statistics.median(times), max(peaks))


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}


def invoke(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]


def check_jsonschema(path: Path) -> list[str]:
    exe = shutil.which("check-jsonschema", path=str(BIN)) or shutil.which("check-jsonschema")
    if exe is None:
        raise SystemExit("bench: check-jsonschema is not installed (pip install check-jsonschema)")
    return [exe, "--builtin-schema", "vendor.buildkite", str(path)]


# Preparation runs in child processes: a child forked from a large parent inherits its peak RSS
# on Linux, which would inflate every memory figure measured after it.
REPLICATE = """
import sys, yaml
source, factor, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
steps = yaml.safe_load(open(source))["steps"]
many = [dict(step, label=f"{step['label']} #{k}") for k in range(factor) for step in steps]
open(out, "w").write(yaml.safe_dump({"steps": many}, sort_keys=False, width=1_000_000))
"""
GENERATE = """
import sys
from pathlib import Path
from rocmci import settings
from rocmci.pipeline import generate, service
repo, source, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
resolved = settings.resolve(repo, env={})
inputs = service.inputs(resolved, source)
_, generated, _ = service.build(inputs, generate.Options(archs=inputs.archs), repo)
out.write_text(service.render(generated.pipeline, "yaml", Path(source).name))
"""


def replicate(source: Path, factor: int, out: Path) -> None:
    """The real step file, `factor` times over, with unique labels (hence unique keys)."""
    subprocess.run([sys.executable, "-c", REPLICATE, str(source), str(factor), str(out)], check=True)


def write_generated(source: Path, out: Path) -> None:
    """The pipeline generated from `source`, even past 500 steps, where `generate` refuses to write."""
    subprocess.run([sys.executable, "-c", GENERATE, str(REPO), str(source), str(out)], check=True, env=clean_env())


def ratio_row(name: str, ours: Measure, ref: Measure, target: float, ref_name: str, mem_target: float | None = None):
    ratio = ours.seconds / ref.seconds
    met = ratio <= target and (mem_target is None or ours.peak_mb <= mem_target)
    mem = f", peak {ours.peak_mb:.0f} MB" + (f" (target <= {mem_target:.0f} MB)" if mem_target else "")
    return Row(
        name,
        f"{ours.seconds:.3f} s{mem}",
        f"{ref_name}: {ref.seconds:.3f} s, peak {ref.peak_mb:.0f} MB",
        round(ratio, 3),
        f"<= {target}x",
        met,
    )


def pipeline_rows(work: Path, repeats: int) -> list[Row]:
    if not VLLM.is_file():
        return [Row("pipeline", "-", "-", None, "-", None, f"skipped: {VLLM} not found")]
    generated = work / "vllm-pipeline.yaml"
    subprocess.run(
        invoke("pipeline.generate", "--source", str(VLLM), "--out", str(generated)),
        check=True,
        env=clean_env(),
        capture_output=True,
    )
    ten = work / "test-amd-10x.yaml"
    replicate(VLLM, 10, ten)
    generated10 = work / "vllm-pipeline-10x.yaml"
    write_generated(ten, generated10)  # over 500 steps: `generate` refuses it, so write it directly
    reference = measure(check_jsonschema(generated), repeats=repeats)
    source1 = measure(invoke("pipeline.validate", "--source", str(VLLM)), repeats=repeats)
    pipeline1 = measure(invoke("pipeline.validate", "--pipeline", str(generated)), repeats=repeats)
    source10 = measure(invoke("pipeline.validate", "--source", str(ten)), repeats=repeats, ok=(0, 1))
    hook = shutil.which("rocmci-validate", path=str(BIN))
    direct = measure([hook, str(VLLM)], repeats=repeats) if hook else None
    rows = [
        ratio_row(
            "validate --source (190 steps: load, generate, schema, rules)",
            source1,
            reference,
            0.1,
            "check-jsonschema on the generated pipeline",
            mem_target=80,
        ),
        ratio_row(
            "validate --pipeline (the generated file)", pipeline1, reference, 0.2, "check-jsonschema on the same file"
        ),
    ]
    if direct is not None:
        row = ratio_row(
            "rocmci-validate FILE (same work, no invoke start-up)",
            direct,
            reference,
            0.1,
            "check-jsonschema on the generated pipeline",
            mem_target=80,
        )
        row.note = "the pre-commit entry point"
        rows.append(row)
    scale = source10.seconds / source1.seconds
    mem_scale = source10.peak_mb / source1.peak_mb
    rows.append(
        Row(
            "validate --source at 10x (1,900 steps) vs 1x",
            f"{source10.seconds:.3f} s, peak {source10.peak_mb:.0f} MB",
            f"1x: {source1.seconds:.3f} s, peak {source1.peak_mb:.0f} MB",
            round(scale, 2),
            "<= 10x time and memory",
            scale <= 10 and mem_scale <= 10,
            f"memory ratio {mem_scale:.2f}",
        )
    )
    pipeline10 = measure(invoke("pipeline.validate", "--pipeline", str(generated10)), repeats=repeats, ok=(0, 1))
    p_scale = pipeline10.seconds / pipeline1.seconds
    rows.append(
        Row(
            "validate --pipeline at 10x vs 1x",
            f"{pipeline10.seconds:.3f} s, peak {pipeline10.peak_mb:.0f} MB",
            f"1x: {pipeline1.seconds:.3f} s",
            round(p_scale, 2),
            "<= 10x",
            p_scale <= 10,
        )
    )
    return rows


def startup_row(work: Path, repeats: int) -> Row:
    one = work / "one-task"
    one.mkdir()
    (one / "tasks.py").write_text("from invoke import task\n\n\n@task\ndef hello(c):\n    print('hello')\n")
    ours = measure([sys.executable, "-m", "invoke", "--list"], repeats=repeats, cwd=REPO)
    ref = measure([sys.executable, "-m", "invoke", "--list"], repeats=repeats, cwd=one)
    return ratio_row("invoke --list, real tasks.py", ours, ref, 1.3, "one-task tasks.py")


def engine_client() -> str | None:
    from rocmci.engine import Engine
    from rocmci.errors import EngineError

    engine = Engine("auto")
    try:
        engine.server_version()
    except EngineError:
        return None
    return engine.client


def noop_rebuild_row(work: Path, repeats: int) -> Row:
    client = engine_client()
    if client is None:
        return Row("no-op image.build", "-", "-", None, "-", None, "skipped: no Docker engine")
    repo = f"rocmci-bench/build-{uuid.uuid4().hex[:8]}"
    dockerfile = REPO / "tests" / "data" / "image" / "Dockerfile.fixture"
    env = {
        "ROCMCI_DOCKERFILE": str(dockerfile),
        "ROCMCI_IMAGE_REPO": repo,
        "ROCMCI_BUILD_NETWORK": "none",
        "ROCMCI_DOCKER": client,
        "CI": "true",
    }
    try:
        subprocess.run(invoke("image.build"), env={**clean_env(), **env}, check=True, capture_output=True)
        ours = measure(invoke("image.build"), repeats=repeats, env=env)
        warm = [
            client,
            "build",
            "--network",
            "none",
            "-q",
            "-f",
            str(dockerfile),
            "-t",
            f"{repo}:warm",
            str(dockerfile.parent),
        ]
        ref = measure(warm, repeats=repeats, env={"DOCKER_BUILDKIT": "1"})
    finally:
        ids = subprocess.run([client, "images", "-q", repo], capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run([client, "rmi", "-f", *set(ids)], capture_output=True)
    row = ratio_row("image.build with unchanged inputs (no-op)", ours, ref, 0.2, "docker build, warm cache")
    row.met = row.met and ours.seconds < 1.0
    row.target = "<= 0.2x and < 1 s"
    return row


def sharding_row(work: Path) -> Row:
    client = engine_client()
    if client is None:
        return Row("sharding", "-", "-", None, "-", None, "skipped: no Docker engine")
    sys.path.insert(0, str(REPO))
    from benchmarks.fakehost import fake_host

    base = "rocmci-test/debian-python:bookworm"
    if subprocess.run([client, "image", "inspect", base], capture_output=True).returncode != 0:
        return Row("sharding", "-", "-", None, "-", None, f"skipped: {base} missing (bash .ci/base-images)")
    tag = f"rocmci-bench/standin:{uuid.uuid4().hex[:8]}"
    standin = REPO / "tests" / "data" / "standin"
    subprocess.run(
        [client, "build", "--network", "none", "-q", "--build-arg", f"BASE_IMAGE={base}", "-t", tag, str(standin)],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        check=True,
        capture_output=True,
    )
    try:
        root = fake_host(work / "host", gpus=8)
    except PermissionError:
        subprocess.run([client, "rmi", "-f", tag], capture_output=True)
        return Row("sharding", "-", "-", None, "-", None, "skipped: stand-in devices need root (mknod)")
    # Upstream ran the 56 DeepEP MoE cases in about 19 minutes on 2 GPUs: some 20 s a case.
    cases, seconds = 8, 20.0
    env = {
        "ROCMCI_IMAGE": tag,
        "ROCMCI_RUN_NETWORK": "none",
        "ROCMCI_RESULTS_DIR": str(work / "shard-results"),
        "ROCMCI_HF_CACHE": str(work),
        "ROCMCI_DOCKER": client,
    }
    args = [
        "run.moe-tests",
        "--mode",
        "high-throughput",
        "--host-root",
        str(root),
        "--env",
        "STANDIN_MODE=slow",
        "--env",
        f"STANDIN_CASES={cases}",
        "--env",
        f"STANDIN_SLOW_SECONDS={seconds}",
    ]
    try:
        one = measure(invoke(*args), repeats=1, env=env)
        four = measure(invoke(*args, "--shards", "4"), repeats=1, env=env)
    finally:
        subprocess.run([client, "rmi", "-f", tag], capture_output=True)
    efficiency = one.seconds / (4 * four.seconds)
    return Row(
        f"run.moe-tests, {cases} stand-in cases of {seconds:.0f} s: 4 shards on 8 GPUs",
        f"{four.seconds:.1f} s",
        f"1 shard: {one.seconds:.1f} s",
        round(efficiency, 3),
        "parallel efficiency >= 0.9",
        efficiency >= 0.9,
        "ratio column is the efficiency",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per measurement (median reported)")
    parser.add_argument("--out", default=str(REPO / "results" / "bench.json"))
    parser.add_argument("--skip-engine", action="store_true", help="skip the rows that need Docker")
    parser.add_argument(
        "--only", choices=("pipeline", "startup", "noop", "sharding"), action="append",
        help="run only these rows (repeatable)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmci-bench-") as tmp:
        work = Path(tmp)
        wanted = set(args.only or ("pipeline", "startup", "noop", "sharding"))
        if args.skip_engine:
            wanted -= {"noop", "sharding"}
        rows = pipeline_rows(work, args.repeats) if "pipeline" in wanted else []
        if "startup" in wanted:
            rows.append(startup_row(work, args.repeats))
        if "noop" in wanted:
            rows.append(noop_rebuild_row(work, args.repeats))
        if "sharding" in wanted:
            rows.append(sharding_row(work))
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    from rocmci.report import table

    print(f"rocmci benchmarks on {machine}; median of {args.repeats} runs, whole processes\n")
    print(
        table(
            ("benchmark", "rocmci", "reference", "ratio", "target", "met"),
            [
                (
                    r.name,
                    r.value,
                    r.reference,
                    "-" if r.ratio is None else r.ratio,
                    r.target,
                    {True: "yes", False: "NO", None: r.note}[r.met],
                )
                for r in rows
            ],
        )
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"machine": machine, "repeats": args.repeats, "rows": [asdict(r) for r in rows]}, indent=2) + "\n"
    )
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
