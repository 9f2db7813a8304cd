"""Faults on the real engine, each checked against README's three promises:

1. the documented exit code, and one clear line: rocmci's own error is exactly one `rocmci:` line, the last
   on stderr, with no traceback; a workload fault is one result naming what happened;
2. nothing left behind: no container with rocmci's label and no process of the run (every process the run
   started carries a marker variable in its environment; /proc is searched for it);
3. output files old or new: files that exist before the fault are afterwards byte-identical or a complete new
   version, and no temporary file is left beside them.

Stopping an engine must not disturb the other tests, so the mid-build fault uses a second dockerd of its own
(own socket, data and exec roots), started and stopped here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import BUSYBOX_IMAGE, DOCKER_REQUIRED, PYTHON_IMAGE, REPO, interruptible
from tests.integration.helpers import moe, run_env

VLLM_STANDIN = REPO / "tests" / "data" / "vllm-standin"  # a small vLLM checkout; csrc/SLOW makes a step take 2 min
MARK = "FAULT_TEST_MARK"  # not ROCMCI_*: rocmci ignores it, every child process inherits it
_started: list[subprocess.Popen] = []
_marks: list[str] = []  # of this test's runs: their containers are removed after it, whatever happened
OLD = {"results.json": b'{"old": "results from an earlier run"}\n', "annotation.md": b"### old annotation\n"}


# --- the promises ---------------------------------------------------------------------------------------


def one_rocmci_line(stderr: str, notes: bool = False) -> str:
    """Promise 1 for rocmci's own errors: one `rocmci:` line, the last, no traceback. Where a workload ran,
    rocmci's notes before it (e.g. which workaround it applied) may also start with `rocmci:`."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    ours = [line for line in lines if line.startswith("rocmci:")]
    assert ours and lines[-1] == ours[-1], stderr
    assert len(ours) == 1 or notes, stderr
    assert ours.count(ours[-1]) == 1, stderr
    return ours[-1]


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


def processes_with(mark: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        if f"{MARK}={mark}".encode() in environ.split(b"\0"):
            found.append(f"{proc.name}: {cmdline}")
    return found


def containers_of(engine, mark: str, workload: str | None = None) -> list[str]:
    """The containers of this run: rocmci's label, and the marker given to the workload with --env (other test
    sessions may share the engine, with stand-in images of the same content)."""
    found = []
    for cid in engine.cli("ps", "-a", "-q", "--filter", "label=rocmci.managed=1", check=False).stdout.split():
        # One JSON document: a probe container has no environment (`null`) and no workload label.
        done = engine.cli(
            "inspect", "--format", '{{json .Config.Env}}\t{{index .Config.Labels "rocmci.workload"}}', cid, check=False
        )
        env, _, kind = done.stdout.strip("\n").partition("\t")
        if done.returncode != 0 or not env:
            continue  # removed meanwhile
        if f"{MARK}={mark}" in (json.loads(env) or []) and (workload is None or kind == workload):
            found.append(cid)
    return found


def no_leftovers(engine, mark: str) -> None:
    """Promise 2: no container and no process of the run (they get a few seconds to exit)."""
    deadline = time.monotonic() + 10
    while (procs := processes_with(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs == [], f"processes of the run are still alive: {procs}"
    if engine is not None:
        assert containers_of(engine, mark) == []


def write_old(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in OLD.items():
        (folder / name).write_bytes(data)


def old_or_new(folder: Path) -> str:
    """Promise 3 for a run's report files; returns "old" or "new" (both files agree)."""
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]
    data = {name: (folder / name).read_bytes() for name in OLD}
    if data == OLD:
        return "old"
    assert OLD["results.json"] != data["results.json"] and OLD["annotation.md"] != data["annotation.md"], (
        f"one report file is old and the other new: {data}"
    )
    results = json.loads(data["results.json"])["results"]  # complete: it parses
    assert results and all({"workload", "outcome"} <= set(r) for r in results)
    annotation = data["annotation.md"].decode()
    assert annotation.startswith("### rocmci workloads\n") and annotation.endswith("\n")
    assert all(f"| {r['workload']} |" in annotation for r in results), annotation  # and of the same run
    return "new"


# --- running rocmci as a user would ----------------------------------------------------------------------


def user_env(**extra: str) -> tuple[dict[str, str], str]:
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update(extra, **{MARK: mark})
    _marks.append(mark)
    return env, mark


def start(*args: str, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible,
    )  # fmt: skip
    _started.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _stop_what_a_failed_test_left_running():
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # rocmci removes its container on Ctrl-C
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    marks = list(_marks)
    _marks.clear()
    if not marks or shutil.which("/usr/bin/docker") is None:
        return
    from rocmci.engine import Engine

    engine = Engine("/usr/bin/docker")
    for mark in marks:  # a test that failed may have left a run's container: never leave it on the engine
        for cid in containers_of(engine, mark):
            engine.cli("rm", "-f", cid, check=False)


def marked(mark: str, *args: str) -> tuple[str, ...]:
    """A run.* task's arguments, with the marker passed into the workload's container too."""
    return (*args, "--env", f"{MARK}={mark}")


def run(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    proc = start(*args, env=env)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_for_container(engine, mark: str, timeout: float = 60) -> str:
    """The workload's container, once it runs (not a short probe rocmci may start before it)."""
    deadline = time.monotonic() + timeout
    while not (found := containers_of(engine, mark, "moe-tests")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(found) == 1, f"expected the one workload container, found {found}"
    time.sleep(1)  # let pytest start inside it
    return found[0]


def single_result(stdout: str) -> dict:
    (result,) = json.loads(stdout)["results"]
    return result


# --- a second engine, for killing it mid-build -------------------------------------------------------------


class SecondEngine:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.root / "dockerd.log", "a")
        self.proc = subprocess.Popen(
            ["dockerd", "--host", self.host, "--data-root", str(self.root / "data"),
             "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid"),
             "--bridge=none", "--iptables=false"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.cli("version").returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError("second dockerd did not start: " + (self.root / "dockerd.log").read_text()[-500:])

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        # A killed dockerd leaves its containerd behind, which would block the next start.
        pidfile = self.root / "exec" / "containerd" / "containerd.pid"
        if pidfile.is_file():
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass
            # Its pid may live on as a zombie nobody reaps; dockerd would then wait for it to answer.
            pidfile.unlink()
            time.sleep(0.5)

    def unmount(self) -> None:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(str(self.root))), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    def cli(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["/usr/bin/docker", "--host", self.host, *args], capture_output=True, text=True, check=False, **kw
        )


@pytest.fixture
def second_engine(engine, busybox_image):
    if shutil.which("dockerd") is None:
        if DOCKER_REQUIRED:
            pytest.fail("dockerd is not installed", pytrace=False)
        pytest.skip("dockerd is not installed")
    root = Path(tempfile.mkdtemp(prefix="rocmci-eng-", dir="/tmp"))  # short path: unix socket limit
    second = SecondEngine(root)
    second.start()
    for image in (BUSYBOX_IMAGE, PYTHON_IMAGE):
        saved = subprocess.run(["/usr/bin/docker", "save", image], capture_output=True, check=True).stdout
        assert second.cli("load", input=saved.decode("latin-1"), encoding="latin-1").returncode == 0
    try:
        yield second
    finally:
        second.stop(signal.SIGKILL)
        second.unmount()
        shutil.rmtree(root, ignore_errors=True)


# --- the faults --------------------------------------------------------------------------------------------


@pytest.fixture
def vllm_tree(tmp_path) -> Path:
    tree = tmp_path / "vllm"
    shutil.copytree(VLLM_STANDIN, tree)
    return tree


def test_engine_stopped_during_a_build(second_engine, vllm_tree):
    (vllm_tree / "csrc" / "SLOW").write_text("")
    env, mark = user_env(
        DOCKER_HOST=second_engine.host, ROCMCI_VLLM_SRC=str(vllm_tree), ROCMCI_BASE_IMAGE=PYTHON_IMAGE,
        ROCMCI_IMAGE_REPO=f"rocmci-test/fault-{uuid.uuid4().hex[:6]}", ROCMCI_BUILD_NETWORK="none", CI="true",
    )  # fmt: skip
    dry = run("image.build", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    tag = dry.stdout.split("--tag ")[-1].split()[0]  # the last tier (test): the one whose build is cut
    # The output of a build is its tag: an image already under it must still be there afterwards (old) or be
    # the finished new image, never a half-built one.
    assert second_engine.cli("tag", BUSYBOX_IMAGE, tag).returncode == 0
    old_id = second_engine.cli("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()

    proc = start("image.build", env=env)
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if "standin: slow step" in line and "RUN" not in line:
            break
    second_engine.stop(signal.SIGKILL)
    _, rest_err = proc.communicate(timeout=120)
    assert proc.returncode == 3, "".join(seen[-5:]) + rest_err
    assert one_rocmci_line(rest_err).startswith("rocmci: the Docker engine stopped while building")
    no_leftovers(None, mark)
    second_engine.start()  # back up: nothing of the failed build is left behind
    assert second_engine.cli("ps", "-a", "-q").stdout.split() == []
    assert second_engine.cli("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip() == old_id


def test_engine_not_running(engine, fake_host, vllm_tree, tmp_path):
    write_old(tmp_path / "results")
    env, mark = user_env(
        **run_env("rocmci-test/none:latest", tmp_path), DOCKER_HOST=f"unix://{tmp_path}/no.sock",
        ROCMCI_VLLM_SRC=str(vllm_tree),
    )  # fmt: skip
    for args in (("image.build",), marked(mark, *moe(fake_host, "--mode", "high-throughput"))):
        done = run(*args, env=env)
        assert done.returncode == 3, done.stderr
        assert one_rocmci_line(done.stderr).startswith("rocmci: the Docker engine is not running")
        no_leftovers(engine, mark)  # its engine is unreachable: no container can have been made
        assert old_or_new(tmp_path / "results") == "old"


def test_workload_killed_by_sigkill(engine, standin_image, fake_host, tmp_path):
    write_old(tmp_path / "results")
    env, mark = user_env(**run_env(standin_image, tmp_path))
    proc = start(*marked(mark, *moe(fake_host, "--mode", "high-throughput", mode="sleep")), env=env)
    engine.cli("kill", "--signal", "KILL", wait_for_container(engine, mark))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 12, err
    no_traceback(err)
    result = single_result(out)
    assert result["outcome"] == "crashed" and "died by SIGKILL (exit 137)" in result["detail"]
    no_leftovers(engine, mark)
    assert old_or_new(tmp_path / "results") == "new"


def test_workload_out_of_memory(engine, standin_image, fake_host, tmp_path):
    write_old(tmp_path / "results")
    env, mark = user_env(**run_env(standin_image, tmp_path, ROCMCI_RUN_MEMORY="64m"))
    done = run(*marked(mark, *moe(fake_host, "--mode", "high-throughput", mode="oom")), env=env)
    assert done.returncode == 12, done.stdout + done.stderr
    no_traceback(done.stderr)
    result = single_result(done.stdout)
    assert result["outcome"] == "crashed" and "OOM killer" in result["detail"]
    no_leftovers(engine, mark)
    assert old_or_new(tmp_path / "results") == "new"


def test_workload_timeout(engine, standin_image, fake_host, tmp_path):
    write_old(tmp_path / "results")
    env, mark = user_env(**run_env(standin_image, tmp_path))
    done = run(*marked(mark, *moe(fake_host, "--mode", "high-throughput", "--timeout", "5", mode="sleep")), env=env)
    assert done.returncode == 13, done.stdout + done.stderr
    no_traceback(done.stderr)
    assert single_result(done.stdout)["outcome"] == "timed out"
    no_leftovers(engine, mark)
    assert old_or_new(tmp_path / "results") == "new"


@pytest.mark.parametrize(
    ("sig", "code", "line"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM")]
)
def test_signal_to_rocmci_mid_run(engine, standin_image, fake_host, tmp_path, sig, code, line):
    write_old(tmp_path / "results")
    env, mark = user_env(**run_env(standin_image, tmp_path))
    proc = start(*marked(mark, *moe(fake_host, "--mode", "high-throughput", mode="sleep")), env=env)
    wait_for_container(engine, mark)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert one_rocmci_line(err, notes=True).startswith(f"rocmci: {line}")
    no_leftovers(engine, mark)
    assert old_or_new(tmp_path / "results") == "old"


# The stress run of the SIGINT case: `SIGINT_REPEAT=50 pytest tests/integration/test_faults.py -k again`.
SIGINT_REPEAT = int(os.environ.get("SIGINT_REPEAT", "3"))


def interrupt(proc: subprocess.Popen, wait: float = 60) -> str:
    """SIGINT, and rocmci's stderr once it exited. A run still alive after `wait` seconds gets SIGABRT, and
    Python's faulthandler (PYTHONFAULTHANDLER=1 in its environment) prints where each thread was stuck."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=wait)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        err = proc.communicate(timeout=30)[1]
        pytest.fail(f"rocmci did not exit within {wait:.0f} s of SIGINT; its threads:\n{err[-8000:]}")


@pytest.mark.parametrize("where", ["container", "host"])
def test_sigint_mid_run_again_and_again(engine, standin_image, fake_host, tmp_path, where):
    """The SIGINT case, SIGINT_REPEAT times in a row: it once hung now and then (a Ctrl-C landing inside
    Thread.join made rocmci stop waiting for its workers' clean-up), leaving the container behind."""
    from tests.functional import test_host_runs as host_runs

    tree = host_runs.vllm_tree(tmp_path / "vllm", in_test_workaround=False) if where == "host" else None
    for attempt in range(SIGINT_REPEAT):
        folder = tmp_path / str(attempt)
        write_old(folder / "results")
        env, mark = user_env(PYTHONFAULTHANDLER="1", **run_env(standin_image, folder))
        tag = uuid.uuid4().hex
        args = moe(fake_host, "--mode", "high-throughput", "--env", f"STANDIN_TAG={tag}", mode="sleep")
        if tree is not None:
            args = (*args, "--no-container", "--workdir", str(tree))
        try:
            proc = start(*marked(mark, *args), env=env)
            time.sleep(1)
            if proc.poll() is not None:
                pytest.fail(f"attempt {attempt + 1}: rocmci ended before the SIGINT: {proc.communicate()}")
            if tree is None:
                wait_for_container(engine, mark)
            else:
                deadline = time.monotonic() + 60
                while len(host_runs.tagged_processes(tag)) < 2 and time.monotonic() < deadline:
                    time.sleep(0.2)
                if len(found := host_runs.tagged_processes(tag)) < 2:
                    procs = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid in found]
                    out, err = proc.communicate(timeout=60) if not proc.send_signal(signal.SIGINT) else ("", "")
                    pytest.fail(f"attempt {attempt + 1}: the workload never started its worker: {procs}\n{out}\n{err}")
                time.sleep(0.5)
            err = interrupt(proc)
            assert proc.returncode == 130, f"attempt {attempt + 1}: {err}"
            assert one_rocmci_line(err, notes=True) == "rocmci: interrupted"
            no_leftovers(engine, mark)
            assert old_or_new(folder / "results") == "old"
        finally:
            for cid in containers_of(engine, mark):  # only after a failure: never leave a container behind
                engine.cli("rm", "-f", cid, check=False)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 kB tmpfs: full long before a large pipeline is written."""
    point = tmp_path / "small"
    point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], capture_output=True)
    if done.returncode != 0:
        if DOCKER_REQUIRED:
            pytest.fail(f"cannot mount a tmpfs (needs root): {done.stderr.decode().strip()}", pytrace=False)
        pytest.skip("cannot mount a tmpfs (needs root)")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_disk_full_while_writing_the_pipeline(small_disk, tmp_path):
    steps = tmp_path / "steps.yaml"
    steps.write_text(
        "steps:\n"
        + "".join(
            f"- label: step {i} {'x' * 200}\n  mirror_hardwares: [amdproduction]\n  agent_pool: mi300_1\n"
            f"  commands: [pytest -v -s tests/test_{i}.py {'y' * 300}]\n"
            for i in range(300)
        )
    )
    out = small_disk / "pipeline.yaml"
    old = b"# the pipeline of an earlier run\nsteps: []\n"
    out.write_bytes(old)
    env, mark = user_env()
    done = run("pipeline.generate", "--source", str(steps), "--out", str(out), env=env)
    assert done.returncode == 2, done.stdout[-500:] + done.stderr
    assert "No space left on device" in one_rocmci_line(done.stderr)
    no_leftovers(None, mark)
    assert out.read_bytes() == old
    assert sorted(p.name for p in small_disk.iterdir()) == ["pipeline.yaml"]  # no temporary file left
