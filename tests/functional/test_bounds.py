"""Every wait has a bound the user can see and set (issue 32, class 4 / item 3), tested against real peers that
never answer: a git remote whose transport never speaks (`ext::`), a TCP engine address that accepts and says
nothing, and a ci-infra template that never ends. Also DOCKER_HOST read like a flag (class 6)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from rocmci.registry import BY_NAME
from tests.functional.test_plan_diff_base import STEPS, git, shallow_pr_clone
from tests.functional.test_signals import dispositions

PROGRAM = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMCI_", "BUILDKITE", "GIT_", "DOCKER_"))}
    env.update(extra)
    return env


def _alive_with(needle: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def test_every_bound_is_a_setting_with_a_default():
    assert (BY_NAME["engine_timeout"].default, BY_NAME["git_timeout"].default) == (30, 120)
    assert BY_NAME["render_fuel"].default == 50_000_000


# --- git: a remote that never answers -----------------------------------------------------------------------


def test_a_git_remote_that_never_answers_ends_in_one_line_within_the_bound(tmp_path):
    clone = shallow_pr_clone(tmp_path)
    marker = f"{600 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"  # a sleep no other test starts
    git("config", "protocol.ext.allow", "always", cwd=clone)
    git("remote", "set-url", "origin", f"ext::sleep {marker}", cwd=clone)
    started = time.monotonic()
    done = subprocess.run(
        [*PROGRAM, "pipeline.plan", "--source", str(STEPS), "--diff-base", "origin/main"],
        cwd=clone, env=_env(HOME=str(tmp_path), ROCMCI_GIT_TIMEOUT="2"), capture_output=True, text=True,
        timeout=120, preexec_fn=dispositions(),
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "rocmci: git fetch did not finish within 2 s (its remote did not answer). raise the setting git_timeout "
        "(ROCMCI_GIT_TIMEOUT), or give the changed files with --changed-files"
    ]
    assert took < 40, took  # the deepening fetch and nothing after it: one bound, not a wait for ever
    assert _alive_with(f"sleep {marker}") == [], "the transport's child outlived the bound"


# --- the engine: an address that accepts and never answers ---------------------------------------------------


class SilentPeer:
    """A TCP listener that accepts every connection and never writes a byte."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent_peer():
    peer = SilentPeer()
    yield peer
    peer.close()


@pytest.fixture
def checkout(vllm_docker_tree) -> Path:
    return vllm_docker_tree


def test_a_hung_engine_costs_one_bound_in_a_dry_run_and_is_named(checkout, silent_peer):
    started = time.monotonic()
    done = subprocess.run(
        [*PROGRAM, "image.build", "-n"], cwd=checkout, capture_output=True, text=True, timeout=120,
        env=_env(DOCKER_HOST=f"tcp://127.0.0.1:{silent_peer.port}", ROCMCI_ENGINE_TIMEOUT="2"),
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert (
        f"note: the engine is not reachable (the Docker engine at 'tcp://127.0.0.1:{silent_peer.port}' did not "
        "answer within 2 s): BuildKit features"
    ) in done.stdout + done.stderr
    assert took < 2 * 2 + 10, took  # asked once (the SDK's version call), never again after it did not answer


def test_a_hung_engine_fails_a_real_task_with_one_line(checkout, silent_peer):
    done = subprocess.run(
        [*PROGRAM, "image.inspect", "--tag", "rocmci-test/busybox:latest"], cwd=checkout, capture_output=True,
        text=True, timeout=120, env=_env(DOCKER_HOST=f"tcp://127.0.0.1:{silent_peer.port}", ROCMCI_ENGINE_TIMEOUT="1"),
    )  # fmt: skip
    assert done.returncode != 0
    (line,) = done.stderr.splitlines()
    peer = f"'tcp://127.0.0.1:{silent_peer.port}'"
    assert line.startswith(f"rocmci: the Docker engine at {peer} did not answer within 1 s"), line
    assert "engine_timeout (ROCMCI_ENGINE_TIMEOUT)" in line


@pytest.mark.parametrize(("host", "why"), [
    ("tcp://[::1", "Invalid IPv6 URL"),
    ("tcp://127.0.0.1:99999", "Port out of range 0-65535"),
    ("tcp://", "no host"),
    ("gopher://x:1", "unknown scheme 'gopher'"),
    ("tcp://a b:1", "it holds a blank or control character"),
])  # fmt: skip
def test_a_malformed_docker_host_is_one_line_even_in_a_dry_run(checkout, host, why):
    done = subprocess.run([*PROGRAM, "image.build", "-n"], cwd=checkout, capture_output=True, text=True, timeout=120,
                          env=_env(DOCKER_HOST=host))  # fmt: skip
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"rocmci: DOCKER_HOST={host!r} is not an engine address: {why}"), last
    assert "Traceback" not in done.stderr


# --- a template that never ends ------------------------------------------------------------------------------

ENDLESS = "{% for a in range(10000) %}{% for b in range(10000) %}{% for c in range(10000) %}{% endfor %}" \
    "{% endfor %}{% endfor %}steps: []\n"  # fmt: skip


def test_an_endless_template_ends_at_its_fuel_in_one_line(tmp_path):
    template = tmp_path / "endless.j2"
    template.write_text(ENDLESS)
    done = subprocess.run(
        [*PROGRAM, "pipeline.diff", "--template", str(template), "--source", str(STEPS), "--run-all"], cwd=tmp_path,
        env=_env(ROCMCI_RENDER_FUEL="1000000"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr  # InputError
    (line,) = done.stderr.splitlines()
    assert "did not finish rendering within 1,000,000 instructions" in line and "render_fuel" in line, line


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_render_is_honoured(tmp_path, sig):
    template = tmp_path / "endless.j2"
    template.write_text(ENDLESS)
    proc = subprocess.Popen(
        [*PROGRAM, "pipeline.diff", "--template", str(template), "--source", str(STEPS), "--run-all"], cwd=tmp_path,
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=dispositions(),
    )  # fmt: skip
    try:
        time.sleep(1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)  # the default fuel lasts about 2 s; the native loop would run on
        assert proc.returncode == 128 + sig, err
        assert err.splitlines()[-1] in ("rocmci: interrupted", "rocmci: terminated")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_an_engine_that_did_not_answer_is_not_asked_again(silent_peer, monkeypatch):
    from rocmci.engine import Engine
    from rocmci.errors import EngineError

    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{silent_peer.port}")
    engine = Engine("auto", timeout=1)
    for attempt, bound in ((1, 10.0), (2, 0.5), (3, 0.5)):
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"did not answer within 1 s") as caught:
            engine.image_labels("rocmci-test/busybox:latest") if attempt != 2 else engine.server_version()
        assert time.monotonic() - started < bound, (attempt, caught.value)
    assert "ROCMCI_ENGINE_TIMEOUT" in caught.value.one_line()
