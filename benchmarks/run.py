"""rocmci benchmarks: wall time and peak memory of whole processes, each next to its reference.

Run with `nox -s bench` (or `python benchmarks/run.py` where rocmci and invoke are installed).

Method: every row measures two commands, A (rocmci) and B (its reference), run alternately A B A B ...
after one unmeasured warm-up of each, so that drift in the machine's load hits both alike. Each pair gives
one ratio A/B; the row reports the median of those ratios, the median times of each side, the largest peak
RSS, and how many pairs it used. Writes results/bench.json and results/bench.md (the table README shows)
and prints the markdown table. Engine-backed rows need a running Docker engine, the local base images from
.ci/base-images and root (the fake GPU devices are made with mknod); without them they say why they skipped.
"""

from __future__ import annotations

import argparse
import datetime
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "fixtures"
VLLM = SHARED / "vllm" / "test-amd.yaml"
CI_INFRA_TEMPLATE = SHARED / "ci-infra" / "buildkite" / "test-template-amd.j2"
BIN = Path(sys.executable).parent
BASE_IMAGE = "rocmci-test/debian-python:bookworm"
# Upstream ran the 56 DeepEP MoE cases (28 high-throughput + 28 low-latency) in about 19 minutes on 2 GPUs.
UPSTREAM_CASES_PER_MODE = 28
UPSTREAM_CASE_SECONDS = 20.0


@dataclass
class Pairs:
    """A and B run alternately; one ratio per pair."""

    a_seconds: list[float] = field(default_factory=list)
    b_seconds: list[float] = field(default_factory=list)
    a_peak_mb: float = 0.0
    b_peak_mb: float = 0.0

    @property
    def n(self) -> int:
        return len(self.a_seconds)

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.a_seconds, self.b_seconds, strict=True)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def a(self) -> float:
        return statistics.median(self.a_seconds)

    @property
    def b(self) -> float:
        return statistics.median(self.b_seconds)


@dataclass
class Row:
    name: str
    value: str
    reference: str
    ratio: float | None
    runs: str
    target: str
    met: bool | None
    note: str = ""
    ratios: list[float] = field(default_factory=list)  # every pair's ratio, for bench.json


def pairs_text(n: int) -> str:
    return f"{n} pair" if n == 1 else f"{n} pairs"


def skipped(name: str, reason: str) -> Row:
    print(f"bench: skipping {name}: {reason}", file=sys.stderr)
    return Row(name, "-", "-", None, "0", "-", None, f"skipped: {reason}")


# Every measured process loads bytecode from a cache of the benchmark's own, written by the unmeasured
# warm-up run: a machine with PYTHONDONTWRITEBYTECODE set (this one) would otherwise compile each module
# edited since its last .pyc from source in every run, a cost an installed rocmci (pip writes the .pyc
# files) and the reference do not pay alike. invoke writes no bytecode for what it imports after parsing its
# own flags (rocmci's tasks and every module they import) unless given --write-pyc, so its warm-up run gets
# that flag (measured: without it, `invoke pipeline.validate --source` compiled rocmci from source in every
# run for which no other process had cached it: 0.34 s instead of 0.25 s).
PYCACHE = Path(tempfile.gettempdir()) / "rocmci-bench-pycache"


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_") and k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(PYCACHE)}


def run_once(argv: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS in MB, CPU seconds: user + system) of one whole process."""
    start = time.perf_counter()
    # Output is kept only to explain a failure; one pipe for both streams, so neither can fill up and block.
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    err = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code not in ok:
        tail = err.decode(errors="replace").strip().splitlines()[-12:]
        raise SystemExit(f"bench: {' '.join(argv)} exited {code}:\n" + "\n".join(tail))
    return elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


@dataclass
class Cmd:
    argv: list[str]
    cwd: Path = REPO
    env: dict[str, str] = field(default_factory=dict)
    ok: tuple[int, ...] = (0,)
    then: tuple[list[str], ...] = ()  # more commands run right after, timed together (no shell in between)

    def once(self, cpu: bool = False, warm: bool = False) -> tuple[float, float]:
        """(seconds, peak MB): wall seconds, or CPU seconds when `cpu`. `warm`: the unmeasured warm-up run."""
        env = {**clean_env(), **self.env}
        total, peak = 0.0, 0.0
        for argv in (self.argv, *self.then):
            argv = writing_bytecode(argv) if warm else argv
            seconds, mb, cpu_seconds = run_once(argv, self.cwd, env, self.ok)
            total, peak = total + (cpu_seconds if cpu else seconds), max(peak, mb)
        return total, peak


def paired(a: Cmd, b: Cmd, pairs: int, warm: bool = True, cpu: bool = False) -> Pairs:
    if warm:  # page cache, bytecode and the engine's caches: not measured
        a.once(warm=True)
        b.once(warm=True)
    out = Pairs()
    for _ in range(pairs):
        for cmd, times, peak in ((a, out.a_seconds, "a_peak_mb"), (b, out.b_seconds, "b_peak_mb")):
            seconds, mb = cmd.once(cpu)
            times.append(seconds)
            setattr(out, peak, max(getattr(out, peak), mb))
    return out


def writing_bytecode(argv: list[str]) -> list[str]:
    """`argv`, with invoke told to write the bytecode of the modules it imports (for the warm-up run)."""
    if argv[1:3] == ["-m", "invoke"]:
        return [*argv[:3], "--write-pyc", *argv[3:]]
    return argv


def invoke(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]


def check_jsonschema(path: Path) -> list[str]:
    exe = shutil.which("check-jsonschema", path=str(BIN)) or shutil.which("check-jsonschema")
    if exe is None:
        raise SystemExit("bench: check-jsonschema is not installed (pip install check-jsonschema)")
    return [exe, "--builtin-schema", "vendor.buildkite", str(path)]


# Preparation runs in child processes: a child forked from a large parent inherits its peak RSS on Linux,
# which would inflate every memory figure measured after it.
RENDER = """
import sys
from pathlib import Path
try:
    from rocmci.pipeline import citemplate
    from rocmci.pipeline.bootstrap import TemplateInputs
except ImportError as exc:
    print(f"rocmci.pipeline.citemplate is not available ({exc})", file=sys.stderr)
    sys.exit(3)
template, steps, out = (Path(a) for a in sys.argv[1:4])
# bootstrap-amd.sh's inputs for a run_all build on main: every step of the file is rendered, none blocked.
inputs = TemplateInputs(run_all="1", list_file_diff="run_all", branch="main")
rendered = citemplate.render_ci_infra(template, steps, inputs)
# The template renders a top-level list of steps, which buildkite-agent reads as {"steps": [...]};
# Buildkite's schema describes that mapping, so the reference validates it in that form.
out.write_text("steps:\\n" + rendered)
top = citemplate.parse_pipeline(rendered, str(out))
print(sum(len(s.get("steps", ())) if isinstance(s, dict) and "group" in s else 1 for s in top))
"""
REPLICATE = """
import sys, yaml
source, factor, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
steps = yaml.safe_load(open(source))["steps"]
many = [dict(step, label=f"{step['label']} r{k}") for k in range(factor) for step in steps]
open(out, "w").write(yaml.safe_dump({"steps": many}, sort_keys=False, width=1_000_000))
"""


def _ci_infra_render(steps: Path, out: Path) -> tuple[int | None, str | None]:
    """ci-infra's own pipeline for `steps` (its template rendered by rocmci.pipeline.citemplate) into `out`.

    Returns (number of steps, None), or (None, why it could not be made). No second renderer lives here:
    without citemplate the rows that need the reference are skipped.
    """
    if not CI_INFRA_TEMPLATE.is_file():
        return None, f"{CI_INFRA_TEMPLATE} not found"
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(CI_INFRA_TEMPLATE), str(steps), str(out)],
        capture_output=True, text=True, env=clean_env(), check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return int(done.stdout.strip()), None


def replicate(source: Path, factor: int, out: Path) -> None:
    """The real step file, `factor` times over, with unique labels (hence unique keys)."""
    subprocess.run([sys.executable, "-c", REPLICATE, str(source), str(factor), str(out)], check=True)


def ratio_row(name: str, p: Pairs, target: float, ref_name: str, mem_target: float | None = None) -> Row:
    met = p.ratio <= target and (mem_target is None or p.a_peak_mb <= mem_target)
    mem = f", {p.a_peak_mb:.0f} MB"
    return Row(
        name,
        f"{p.a:.3f} s{mem}",
        f"{ref_name}: {p.b:.3f} s, {p.b_peak_mb:.0f} MB",
        round(p.ratio, 3),
        pairs_text(p.n),
        f"<= {target}x" + (f", <= {mem_target:.0f} MB" if mem_target else ""),
        met,
        ratios=[round(r, 4) for r in p.ratios],
    )


def pipeline_rows(work: Path, pairs: int) -> list[Row]:
    if not VLLM.is_file():
        return [skipped("pipeline rows", f"{VLLM} not found (../shared beside the checkout)")]
    rendered = work / "ci-infra-pipeline.yaml"
    steps, why = _ci_infra_render(VLLM, rendered)
    rows = []
    if why is not None:
        rows.append(skipped("validate rows against check-jsonschema", f"no ci-infra render: {why}"))
    else:
        reference = Cmd(check_jsonschema(rendered))
        ref_name = "check-jsonschema --builtin-schema vendor.buildkite on ci-infra's render"
        source = paired(Cmd(invoke("pipeline.validate", "--source", str(VLLM))), reference, pairs)
        rows.append(ratio_row(
            "`invoke pipeline.validate --source` (vLLM's 190-step file: load, generate, schema, rules)",
            source, 0.1, ref_name, mem_target=80,
        ))  # fmt: skip
        pipe = paired(Cmd(invoke("pipeline.validate", "--pipeline", str(rendered)), ok=(0, 1)), reference, pairs)
        rows.append(ratio_row(
            f"`invoke pipeline.validate --pipeline` (ci-infra's render, {steps} steps)", pipe, 0.2, "the same run",
        ))  # fmt: skip
        hook = shutil.which("rocmci-validate", path=str(BIN))
        if hook:
            direct = paired(Cmd([hook, str(VLLM)]), reference, pairs)
            rows.append(ratio_row(
                "`rocmci-validate FILE` (the --source work without invoke: the pre-commit hook)",
                direct, 0.1, "the same run", mem_target=80,
            ))  # fmt: skip
    rows += generate_rows(pairs)
    ten = work / "test-amd-10x.yaml"
    replicate(VLLM, 10, ten)
    scale = paired(
        Cmd(invoke("pipeline.validate", "--source", str(ten)), ok=(0, 1)),
        Cmd(invoke("pipeline.validate", "--source", str(VLLM))),
        pairs,
    )
    mem_scale = scale.a_peak_mb / scale.b_peak_mb
    rows.append(Row(
        "`pipeline.validate --source` at 10x (1,900 steps) vs 1x",
        f"{scale.a:.3f} s, {scale.a_peak_mb:.0f} MB", f"1x: {scale.b:.3f} s, {scale.b_peak_mb:.0f} MB",
        round(scale.ratio, 2), pairs_text(scale.n), "<= 10x time and memory",
        scale.ratio <= 10 and mem_scale <= 10, f"memory ratio {mem_scale:.2f}", [round(r, 4) for r in scale.ratios],
    ))  # fmt: skip
    return rows


def generate_rows(pairs: int) -> list[Row]:
    """pipeline.generate (validation included, YAML out) next to ci-infra's own render, in CPU seconds."""
    if not CI_INFRA_TEMPLATE.is_file():
        return [skipped("generate vs ci-infra's render", f"{CI_INFRA_TEMPLATE} not found")]
    render = REPO / "benchmarks" / "ci_infra_render.py"
    reference = Cmd([sys.executable, str(render), str(CI_INFRA_TEMPLATE), str(VLLM)])
    ref_name = "ci-infra's render (test-template-amd.j2 with minijinja, minijinja-cli's engine), CPU"
    gen = paired(Cmd(invoke("pipeline.generate", "--source", str(VLLM), "--run-all")), reference, pairs, cpu=True)
    row = ratio_row(
        "`invoke pipeline.generate --source --run-all` (190-step file: load, generate, validate, YAML out), CPU",
        gen, 2.0, ref_name,
    )  # fmt: skip
    floor = paired(Cmd(invoke("--list")), reference, pairs, cpu=True)
    start = ratio_row(
        "the floor: `invoke --list` (interpreter and invoke start-up, rocmci's tasks.py loaded), CPU",
        floor, 2.0, "the same render",
    )  # fmt: skip
    start.target, start.met = "-", None
    start.note = "what generate costs before reading a byte"
    return [row, start]


def startup_row(work: Path, pairs: int) -> Row:
    one = work / "one-task"
    one.mkdir()
    (one / "tasks.py").write_text("from invoke import task\n\n\n@task\ndef hello(c):\n    print('hello')\n")
    listing = [sys.executable, "-m", "invoke", "--list"]
    p = paired(Cmd(listing), Cmd(listing, one), pairs)
    return ratio_row("`invoke --list`, real tasks.py", p, 1.3, "one-task tasks.py")


def engine_client() -> str | None:
    from rocmci.engine import Engine
    from rocmci.errors import EngineError

    engine = Engine("auto")
    try:
        engine.server_version()
    except EngineError:
        return None
    return engine.client


def dry_run_commands(text: str) -> list[list[str]]:
    """The commands `image.build --dry-run` prints (comments and notes dropped), as argument lists."""
    import shlex

    blocks, current = [], []
    for line in text.splitlines():
        if line.startswith(("#", "note:", "dry run:")) or not line.strip():
            continue
        current.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            blocks.append(shlex.split(" ".join(current)))
            current = []
    return blocks


def noop_rebuild_row(work: Path, pairs: int) -> Row:
    name = "`invoke image.build`, unchanged inputs (no-op), stand-in vLLM checkout"
    client = engine_client()
    if client is None:
        return skipped(name, "no Docker engine")
    if subprocess.run([client, "image", "inspect", BASE_IMAGE], capture_output=True).returncode != 0:
        return skipped(name, f"{BASE_IMAGE} missing (bash .ci/base-images)")
    tree = work / "vllm"
    shutil.copytree(REPO / "tests" / "data" / "vllm-standin", tree)
    repo = f"rocmci-bench/build-{uuid.uuid4().hex[:8]}"
    env = {"ROCMCI_VLLM_SRC": str(tree), "ROCMCI_IMAGE_REPO": repo, "ROCMCI_BASE_IMAGE": BASE_IMAGE,
           "ROCMCI_BUILD_NETWORK": "none", "CI": "true"}  # fmt: skip
    try:
        dry = subprocess.run(invoke("image.build", "--dry-run"), env={**clean_env(), **env}, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        # The reference is exactly what rocmci would run: both tiers' `docker build`, cache warm.
        # (Its DeepEP checks run only after a build, never on a no-op: they are not part of the reference.)
        commands = [argv[argv.index(client) :] for argv in dry_run_commands(dry)]
        builds = [argv for argv in commands if argv[1] == "build"]
        subprocess.run(invoke("image.build"), env={**clean_env(), **env}, check=True, capture_output=True)
        reference = Cmd(builds[0], env={"DOCKER_BUILDKIT": "1"}, then=tuple(builds[1:]))
        p = paired(Cmd(invoke("image.build"), env=env), reference, pairs)
    finally:
        ids = subprocess.run([client, "images", "-q", repo], capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run([client, "rmi", "-f", *set(ids)], capture_output=True)
    row = ratio_row(name, p, 0.2, f"the same {len(builds)} `docker build` commands, warm cache")
    row.met = bool(row.met) and p.a < 1.0
    row.target = "<= 0.2x and < 1 s"
    return row


@dataclass(frozen=True)
class ShardCase:
    name: str
    mode: str  # --mode of run.moe-tests
    cases: int  # per test function
    seconds: float  # one case's length on an idle machine
    cpu_fraction: float  # of the case length, burnt in each of its 2 ranks
    pairs: int  # 1-shard / 4-shard pairs


def sharding_rows(work: Path, pairs: int, scale: float) -> list[Row]:
    scaled = UPSTREAM_CASE_SECONDS * scale
    specs = [
        ShardCase(
            f"`run.moe-tests --mode both`, upstream's 2 x {UPSTREAM_CASES_PER_MODE} cases at {scale:g} of their "
            f"length ({scaled:g} s instead of {UPSTREAM_CASE_SECONDS:g} s; each case spawns 2 ranks that start an "
            "interpreter, import and burn 5% of it in CPU): 4 shards vs 1 on 8 fake GPUs",
            "both", UPSTREAM_CASES_PER_MODE, scaled, 0.05, pairs,
        ),
        ShardCase(
            "`run.moe-tests --mode high-throughput`, 16 cases of 5 s, no CPU work (2 ranks spawned, then sleep): "
            "4 shards vs 1 on 8 fake GPUs",
            "high-throughput", 16, 5.0, 0.0, 1,  # kept beside it for comparison: one pair
        ),
    ]  # fmt: skip
    client = engine_client()
    if client is None:
        return [skipped(s.name, "no Docker engine") for s in specs]
    if subprocess.run([client, "image", "inspect", BASE_IMAGE], capture_output=True).returncode != 0:
        return [skipped(s.name, f"{BASE_IMAGE} missing (bash .ci/base-images)") for s in specs]
    sys.path.insert(0, str(REPO))
    from benchmarks.fakehost import fake_host

    try:
        root = fake_host(work / "host", gpus=8)
    except PermissionError:
        return [skipped(s.name, "the fake GPU devices need root (mknod)") for s in specs]
    tag = f"rocmci-bench/standin:{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [client, "build", "--network", "none", "-q", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-t", tag,
         str(REPO / "benchmarks" / "standin")],
        env={**os.environ, "DOCKER_BUILDKIT": "1"}, check=True, capture_output=True,
    )  # fmt: skip
    rows = []
    try:
        for spec in specs:
            env = {"ROCMCI_IMAGE": tag, "ROCMCI_RUN_NETWORK": "none", "ROCMCI_RESULTS_DIR": str(work / "shards"),
                   "ROCMCI_HF_CACHE": str(work), "ROCMCI_DOCKER": client, "ROCMCI_RUN_TIMEOUT": "7200"}  # fmt: skip
            args = ["run.moe-tests", "--mode", spec.mode, "--host-root", str(root),
                    "--env", f"BENCH_CASES={spec.cases}", "--env", f"BENCH_CASE_SECONDS={spec.seconds}",
                    "--env", f"BENCH_CPU_FRACTION={spec.cpu_fraction}"]  # fmt: skip
            one, four = Cmd(invoke(*args), env=env), Cmd(invoke(*args, "--shards", "4"), env=env)
            p = paired(four, one, spec.pairs, warm=False)  # minutes long: no warm-up run (the image is warm)
            efficiencies = [r and 1 / (4 * r) for r in p.ratios]
            efficiency = statistics.median(efficiencies)
            rows.append(Row(
                spec.name, f"4 shards: {p.a:.1f} s", f"1 shard: {p.b:.1f} s", round(efficiency, 3),
                pairs_text(p.n), "parallel efficiency >= 0.9", efficiency >= 0.9,
                "ratio column: efficiency = t(1 shard) / (4 x t(4 shards))", [round(e, 4) for e in efficiencies],
            ))  # fmt: skip
    finally:
        subprocess.run([client, "rmi", "-f", tag], capture_output=True)
    return rows


def markdown(rows: list[Row], header: str) -> str:
    lines = [header, "", "| benchmark | rocmci | reference | ratio (median of pairs) | runs | target | met |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        met = {True: "yes", False: "**no**", None: r.note}[r.met]
        ratio = "-" if r.ratio is None else f"{r.ratio}"
        lines.append(f"| {r.name} | {r.value} | {r.reference} | {ratio} | {r.runs} | {r.target} | {met} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9, help="A/B pairs per fast row (median of their ratios)")
    parser.add_argument("--shard-pairs", type=int, default=2, help="A/B pairs of the upstream-sized sharding row")
    parser.add_argument(
        "--shard-scale", type=float, default=1 / 16,
        help="case length of the upstream-sized sharding row, as a fraction of upstream's 20 s (1 = real length, "
             "about 25 minutes a pair)",
    )  # fmt: skip
    parser.add_argument("--out", default=str(REPO / "results" / "bench.json"))
    parser.add_argument("--skip-engine", action="store_true", help="skip the rows that need Docker")
    parser.add_argument(
        "--only", choices=("pipeline", "startup", "noop", "sharding"), action="append", help="run only these rows"
    )
    args = parser.parse_args()
    if args.pairs < 1 or args.shard_pairs < 1 or not 0 < args.shard_scale <= 1:
        parser.error("--pairs and --shard-pairs must be >= 1 and --shard-scale in (0, 1]")
    rows_by_name: dict[str, Callable[[Path], list[Row]]] = {
        "pipeline": lambda work: pipeline_rows(work, args.pairs),
        "startup": lambda work: [startup_row(work, args.pairs)],
        "noop": lambda work: [noop_rebuild_row(work, args.pairs)],
        "sharding": lambda work: sharding_rows(work, args.shard_pairs, args.shard_scale),
    }
    wanted = [name for name in rows_by_name if name in (args.only or rows_by_name)]
    if args.skip_engine:
        wanted = [name for name in wanted if name not in ("noop", "sharding")]
    started = time.monotonic()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="rocmci-bench-") as tmp:
        for name in wanted:
            print(f"bench: {name} rows ...", file=sys.stderr, flush=True)
            folder = Path(tmp) / name
            folder.mkdir()
            rows += rows_by_name[name](folder)
    minutes = (time.monotonic() - started) / 60
    date = datetime.date.today().isoformat()
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )
    header = f"`nox -s bench` on {date}: {machine}; whole processes, A and B alternated; took {minutes:.1f} min"
    table = markdown(rows, header)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": date, "machine": machine, "minutes": round(minutes, 1), "pairs": args.pairs,
                               "shard_pairs": args.shard_pairs, "shard_scale": args.shard_scale,
                               "rows": [asdict(r) for r in rows]}, indent=2) + "\n")  # fmt: skip
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"written to {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
