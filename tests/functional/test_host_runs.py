"""Host mode (`--no-container`), the way a Kubernetes-native CI pod runs the workloads: real processes.

A fake GPU host (KFD sysfs for four gfx942 GPUs, /dev/kfd as a plain file: host mode opens no device)
and a copy of the stand-in vLLM tree; the stand-in test module writes what every case and every worker
it spawned saw into STANDIN_REPORT_DIR. Nothing here needs Docker, root or a GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rocmci.runs import results as res
from tests.conftest import REPO, SHARED_VLLM, run_invoke
from tests.unit.test_gpus import make_node

STANDIN = REPO / "tests" / "data" / "standin" / "vllm-workspace"
IN_TEST_WORKAROUND = 'os.environ["ROCPROFILER_REGISTER_ENABLED"] = "0"  # until the base image has the fix\n'


def fake_host(root: Path, gpus: int = 4) -> Path:
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    make_node(nodes, 0, 0)
    for i in range(gpus):
        make_node(nodes, i + 1, 90402, render=128 + i)
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/kfd").write_text("")
    for i in range(gpus):
        (root / f"dev/dri/renderD{128 + i}").write_text("")  # host mode uses only GPUs whose render node exists
    return root


def vllm_tree(root: Path, *, in_test_workaround: bool) -> Path:
    """A stand-in vLLM checkout: the stand-in tests, vLLM's real Dockerfiles, with or without the in-test workaround."""
    shutil.copytree(STANDIN, root)
    (root / "docker").mkdir()
    for name in ("Dockerfile.rocm", "Dockerfile.rocm_base"):
        shutil.copy(SHARED_VLLM / "docker" / name, root / "docker" / name)
    if not in_test_workaround:
        # After vLLM #55099: the base image recipe applies the fix (an instruction, not a comment).
        base = root / "docker" / "Dockerfile.rocm_base"
        fix = "RUN curl -fsSL https://github.com/ROCm/rocm-systems/pull/6942.diff | git apply"
        base.write_text(base.read_text() + f"\n{fix}\n")
    if in_test_workaround:
        module = root / "tests/kernels/moe/test_deepep_moe.py"
        # Written as upstream had it before vLLM #55099, but guarded so that it never runs here:
        # the stand-in must only see the variable when rocmci sets it.
        text = module.read_text()
        module.write_text(text + "\nif False:\n    " + IN_TEST_WORKAROUND)
    return root


def make_host(tmp_path: Path) -> dict:
    """A fake four-GPU host, a copy of the stand-in vLLM tree, and the environment a host run gets."""
    if not SHARED_VLLM.is_dir():
        pytest.skip(f"vLLM fixtures not found at {SHARED_VLLM}")
    tag = uuid.uuid4().hex
    return {
        "root": fake_host(tmp_path / "host"),
        "tree": vllm_tree(tmp_path / "vllm", in_test_workaround=True),
        "reports": tmp_path / "reports",
        "results": tmp_path / "results",
        "tag": tag,
        "env": {
            "ROCMCI_IMAGE": "unused",
            "ROCMCI_RESULTS_DIR": str(tmp_path / "results"),
            "ROCMCI_RUN_TIMEOUT": "300",
        },
    }


@pytest.fixture
def host(tmp_path) -> dict:
    return make_host(tmp_path)


def args(host: dict, *extra: str, mode: str = "pass") -> list[str]:
    return [
        "run.moe-tests", "--no-container", "--host-root", str(host["root"]), "--workdir", str(host["tree"]),
        "--env", f"STANDIN_MODE={mode}", "--env", f"STANDIN_REPORT_DIR={host['reports']}",
        "--env", f"STANDIN_TAG={host['tag']}", *extra,
    ]  # fmt: skip


def reports(host: dict) -> dict[str, list[dict]]:
    return {
        p.stem: [json.loads(line) for line in p.read_text().splitlines()]
        for p in (host["reports"] / "reports").glob("*.jsonl")
    }


def tagged_processes(tag: str) -> list[int]:
    """Every live process whose environment carries the tag: the workload, its workers, anything they started."""
    needle = f"STANDIN_TAG={tag}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_shards_get_disjoint_gpus_and_upstreams_environment(host):
    done = run_invoke(*args(host, "--mode", "high-throughput", "--shards", "2", "--json", mode="slow"), env=host["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    seen = reports(host)
    assert sorted(seen) == ["29500", "29600"]  # one report per shard (distinct rendezvous ports)
    visible = {}
    for port, rows in seen.items():
        for row in rows:
            assert row["env"]["PYTORCH_ROCM_ARCH"] == ""  # as vLLM's runner sets it
            assert row["env"]["PYTHONPATH"].split(":")[0] == str(host["tree"])
            if row["worker_env"] is not None:
                assert row["worker_env"]["ROCPROFILER_REGISTER_ENABLED"] == "0"  # reached the spawned worker
                assert row["worker_env"]["ROCR_VISIBLE_DEVICES"] == row["env"]["ROCR_VISIBLE_DEVICES"]
        visible[port] = {(r["env"]["ROCR_VISIBLE_DEVICES"], r["env"]["HIP_VISIBLE_DEVICES"]) for r in rows}
    assert visible == {"29500": {("0,1", "0,1")}, "29600": {("2,3", "0,1")}}
    times = {port: [r["time"] for r in rows] for port, rows in seen.items()}
    assert min(times["29500"]) < max(times["29600"]) and min(times["29600"]) < max(times["29500"])
    assert tagged_processes(host["tag"]) == []


def test_chosen_gpus_are_the_visible_ones(host):
    done = run_invoke(*args(host, "--mode", "low-latency", "--gpus", "3,1"), env=host["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    rows = reports(host)["none"]
    assert {(r["env"]["ROCR_VISIBLE_DEVICES"], r["env"]["HIP_VISIBLE_DEVICES"]) for r in rows} == {("3,1", "0,1")}
    assert all(r["worker_env"]["ROCR_VISIBLE_DEVICES"] == "3,1" for r in rows)
    assert "ROCPROFILER_REGISTER_ENABLED" not in rows[0]["worker_env"]  # scoped to high-throughput
    assert "the container" not in done.stdout + done.stderr


def test_dry_run_shows_gpu_1_visible_and_the_runner_environment(host):
    done = run_invoke(*args(host, "--gpus", "1", "--dry-run"), env=host["env"])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "# host process: GPUs 1 visible (ROCR_VISIBLE_DEVICES=1; HIP sees them from 0)" in out
    assert "    ROCR_VISIBLE_DEVICES=1 \\\n    HIP_VISIBLE_DEVICES=0 \\" in out
    assert out.count("    PYTORCH_ROCM_ARCH= \\") == 2  # both modes
    assert "docker" not in out
    assert not host["reports"].exists()  # nothing ran


def _start(host: dict, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")}
    env.update(host["env"])
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args(host, *extra, mode="sleep")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_workers(host: dict, count: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120  # a busy machine (the whole suite beside other work) starts them slowly
    while len(tagged_processes(host["tag"])) < count and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if proc.poll() is not None:
        out, err = proc.communicate()
        pytest.fail(f"the run ended (exit {proc.returncode}) before its workers started: {(out + err)[-2000:]}")
    assert len(tagged_processes(host["tag"])) >= count, "the workload and its sleeping worker never started"


def _stop_leftovers(host: dict, proc: subprocess.Popen) -> None:
    """After a failed check, nothing of the run may outlive the test (it would sleep on for 10 minutes)."""
    for pid in tagged_processes(host["tag"]):  # first: they hold the run's output pipes open
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)


@pytest.mark.parametrize(("sig", "code", "line"), [
    (signal.SIGINT, 130, "rocmci: interrupted"),
    (signal.SIGTERM, 143, "rocmci: stopped by SIGTERM; every workload was stopped"),
])  # fmt: skip
def test_interrupt_leaves_no_process(host, sig, code, line):
    proc = _start(host, "--mode", "high-throughput")
    try:
        _wait_for_workers(host, 2, proc)  # pytest and the worker it spawned (plus multiprocessing's tracker)
        before = tagged_processes(host["tag"])
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err
        assert err.strip().splitlines()[-1] == line
        assert tagged_processes(host["tag"]) == [], f"left behind of {before}"
    finally:
        _stop_leftovers(host, proc)


def test_timeout_kills_the_process_group(host):
    proc = _start(host, "--mode", "high-throughput", "--timeout", "4", "--json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 13, err
    (result,) = json.loads(out)["results"]
    assert result["outcome"] == "timed out"
    assert result["detail"] == "stopped at the timeout; its process group was killed"
    assert tagged_processes(host["tag"]) == []


def test_sigabrt_is_retried_once_as_upstream_does(host):
    done = run_invoke(*args(host, "--mode", "high-throughput", "--json", mode="abort-once"), env=host["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(done.stdout)["results"]
    assert (result["outcome"], result["attempts"], result["junit"]["tests"]) == ("passed", 2, 4)
    assert "retrying once" in done.stderr


def test_no_tests_collected_passes_as_upstream_unless_strict(host):
    done = run_invoke(*args(host, "--mode", "low-latency", "--json", mode="empty"), env=host["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["results"][0]["outcome"] == "no tests collected"
    strict = run_invoke(*args(host, "--mode", "low-latency", "--strict", mode="empty"), env=host["env"])
    assert strict.returncode == 10


def test_expected_gpu_count_of_the_pod_is_honoured(host):
    env = {**host["env"], "VLLM_CI_EXPECTED_GPU_COUNT": "2"}
    done = run_invoke(*args(host, "--shards", "2", "--mode", "high-throughput"), env=env)
    assert done.returncode == 5
    assert done.stderr.strip() == (
        "rocmci: VLLM_CI_EXPECTED_GPU_COUNT=2: this pod has 2 GPUs, the run needs 4. "
        "give the step num_gpus for every shard, or use fewer --shards"
    )


# --- workarounds with evidence ---------------------------------------------------------------------------


def test_workaround_follows_the_vllm_source(host, tmp_path):
    fixed = vllm_tree(tmp_path / "vllm-fixed", in_test_workaround=False)
    old = run_invoke("workarounds", "--vllm-src", str(host["tree"]), "--json")
    new = run_invoke("workarounds", "--vllm-src", str(fixed), "--json", "--strict")
    assert old.returncode == 0 and new.returncode == 1
    (before,), (after,) = json.loads(old.stdout), json.loads(new.stdout)
    line = len((host["tree"] / "tests/kernels/moe/test_deepep_moe.py").read_text().splitlines())
    assert before["status"] == "applies"
    assert before["evidence"][0].startswith(
        f"{host['tree']}/tests/kernels/moe/test_deepep_moe.py:{line}: {IN_TEST_WORKAROUND.strip()}"
    )
    assert after["status"] == "obsolete"
    assert after["evidence"][0].startswith(
        f"{fixed}/tests/kernels/moe/test_deepep_moe.py (and the conftest/helper modules it imports) no longer set"
    )
    assert after["refs"]["vllm-project/vllm#55099"] == "https://github.com/vllm-project/vllm/issues/55099"
    assert new.stderr.strip().startswith("rocmci: obsolete workaround(s): rocprofiler-register-teardown.")

    applied = run_invoke(*args(host, "--mode", "high-throughput", "--vllm-src", str(host["tree"]), "--dry-run"))
    left_out = run_invoke(*args(host, "--mode", "high-throughput", "--vllm-src", str(fixed), "--dry-run"))
    assert "    ROCPROFILER_REGISTER_ENABLED=0 \\" in applied.stdout
    assert "# workaround rocprofiler-register-teardown applied to moe-tests [high-throughput]" in applied.stdout
    assert "ROCPROFILER_REGISTER_ENABLED=0 \\" not in left_out.stdout
    assert (
        "# workaround rocprofiler-register-teardown NOT applied (ROCPROFILER_REGISTER_ENABLED=0 not set): obsolete: "
        f"{fixed}/tests/kernels/moe/test_deepep_moe.py (and the conftest/helper modules it imports) no longer set"
    ) in left_out.stdout
    strict = run_invoke(*args(host, "--vllm-src", str(fixed), "--strict", "--dry-run"))
    assert strict.returncode == 1 and "obsolete workaround(s) still in the registry" in strict.stderr


def test_workaround_applied_in_a_real_run_reaches_the_worker(host):
    done = run_invoke(*args(host, "--mode", "high-throughput", "--vllm-src", str(host["tree"])), env=host["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rocmci: workaround rocprofiler-register-teardown applied" in done.stderr
    ends = [r for r in reports(host)["none"] if r["case"].endswith("-end")]
    assert len(ends) == 4 and all(r["worker_env"]["ROCPROFILER_REGISTER_ENABLED"] == "0" for r in ends)


# --- Buildkite ------------------------------------------------------------------------------------------

AGENT = """#!/usr/bin/env python3
import json, os, sys
stdin = sys.stdin.read() if sys.argv[1:2] == ["annotate"] else None
# What an upload publishes: the file's bytes at the moment the agent is called.
sent = open(sys.argv[3], encoding="utf-8").read() if sys.argv[1:3] == ["artifact", "upload"] else None
with open(os.environ["AGENT_RECORD"], "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "stdin": stdin, "cwd": os.getcwd(), "sent": sent}) + "\\n")
"""


def _agent(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "buildkite-agent"
    agent.write_text(AGENT)
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "agent.jsonl"
    env = {"BUILDKITE": "true", "PATH": f"{bin_dir}:{os.environ['PATH']}", "AGENT_RECORD": str(record)}
    return env, record


def test_results_are_posted_to_buildkite(host, tmp_path):
    env, record = _agent(tmp_path)
    done = run_invoke(*args(host, "--shards", "2", "--mode", "high-throughput"), env={**host["env"], **env})
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls[0]["argv"] == ["annotate", "--context", "rocmci-moe-tests", "--style", "success"]
    assert calls[0]["cwd"] == str(host["results"])
    markdown = calls[0]["stdin"]
    assert markdown == (host["results"] / "annotation.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| moe-tests")]
    assert rows == ["| moe-tests high-throughput (2 shards) | :white_check_mark: passed | "
                    + rows[0].split(" | ")[2] + " | 4/4 | 2 shards: 4 passed, 0 skipped |"]  # fmt: skip
    assert "workaround rocprofiler-register-teardown applied" in markdown
    uploads = sorted(c["argv"][2] for c in calls[1:])
    assert all(c["argv"][:2] == ["artifact", "upload"] and len(c["argv"]) == 3 for c in calls[1:])
    assert [u for u in uploads if u.endswith(".xml")] == [
        "junit-moe-high-throughput-shard0.xml", "junit-moe-high-throughput-shard1.xml", "junit-moe-high-throughput.xml",
    ]  # fmt: skip
    logs = [u for u in uploads if u.endswith(".log")]
    assert len(logs) == 2 and all(u.startswith("moe-tests-high-throughput-shard-") for u in logs)


def test_a_secret_in_a_test_id_is_never_uploaded_or_kept_in_the_junit_xml(host, tmp_path):
    """pytest's JUnit XML leaves rocmci like everything else: redacted, and still well-formed XML."""
    import xml.etree.ElementTree as ET

    env, record = _agent(tmp_path)
    secret = "Zq7<sec&ret>"  # XML escapes it in the file (&lt; &amp;): a search of the raw text would miss it
    extra = ("--env", f"UPLOAD_PASSWORD={secret}", "--extra", f"'--junit-prefix={secret}'")
    done = run_invoke(*args(host, "--mode", "high-throughput", *extra, mode="fail-one"), env={**host["env"], **env})
    assert done.returncode == 1, done.stdout + done.stderr  # case 3 fails: its id is in the report
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    sent = {c["argv"][2]: c["sent"] for c in calls if c["argv"][:2] == ["artifact", "upload"]}
    xml = sent["junit-moe-high-throughput.xml"]
    assert xml == (host["results"] / "junit-moe-high-throughput.xml").read_text()  # the kept file is the upload
    cases = ET.fromstring(xml).findall(".//testcase")
    assert len(cases) == 4 and {c.get("classname") for c in cases} == {"***.tests.kernels.moe.test_deepep_moe"}
    assert ET.fromstring(xml).find(".//failure") is not None
    for name, text in [*sent.items(), ("annotation", calls[0]["stdin"]), ("output", done.stdout + done.stderr)]:
        for form in (secret, "Zq7", "sec&amp;ret", "sec&ret"):
            assert form not in text, f"{form!r} in {name}"
    for path in host["results"].iterdir():
        assert "Zq7" not in path.read_text(), path


def test_teardown_crash_gets_its_own_style_and_explanation(host, tmp_path):
    env, record = _agent(tmp_path)
    env["BUILDKITE_PARALLEL_JOB"] = "3"
    done = run_invoke(*args(host, "--mode", "high-throughput", mode="teardown-crash"), env={**host["env"], **env})
    assert done.returncode == 11, done.stdout + done.stderr
    annotate = json.loads(record.read_text().splitlines()[0])
    assert annotate["argv"] == ["annotate", "--context", "rocmci-moe-tests-3", "--style", "warning"]
    markdown = annotate["stdin"]
    assert "| moe-tests high-throughput | :warning: crashed at teardown |" in markdown
    link = "[ROCm/rocm-systems#6942](https://github.com/ROCm/rocm-systems/issues/6942)"
    assert markdown.count("**Crashed at teardown**") == 1 and link in markdown
    assert "4 passed, then the process died by SIGSEGV at teardown" in markdown


def test_without_buildkite_nothing_is_posted(host, tmp_path):
    env, record = _agent(tmp_path)
    env["BUILDKITE"] = "false"
    done = run_invoke(*args(host, "--mode", "low-latency"), env={**host["env"], **env})
    assert done.returncode == 0 and not record.exists()
    assert (host["results"] / "annotation.md").is_file()
    assert res.under_buildkite({"BUILDKITE": "true", "PATH": str(tmp_path / "bin")}) == str(
        tmp_path / "bin/buildkite-agent"
    )


ESCAPES = ("\x1b", "\u202e", "\x07")  # a terminal escape, a bidi override, a bell


def test_a_canary_and_terminal_escapes_reach_no_exit_raw(host, tmp_path):
    """One secret (--env) and terminal escapes (in a test id, through --junit-prefix) go through a real run and
    its dry run: none reaches stdout, stderr, the log, the JUnit file, the annotation, an upload or a results
    file raw, and the child's argv in the dry run names the secret only as ***."""
    env, record = _agent(tmp_path)
    canary = "Kx9-canary-d41d8cd9"
    prefix = "pre\x1b[31m\u202e\x07fix"
    extra = ("--env", f"UPLOAD_PASSWORD={canary}", "--env", f"PLAIN_VALUE={canary}x", "--public", "PLAIN_VALUE",
             "--extra", f"'--junit-prefix={prefix}'")  # fmt: skip
    dry = run_invoke(*args(host, "--mode", "high-throughput", "-n", *extra), env={**host["env"], **env})
    assert dry.returncode == 0, dry.stdout + dry.stderr
    done = run_invoke(*args(host, "--mode", "high-throughput", *extra, mode="fail-one"), env={**host["env"], **env})
    assert done.returncode == 1, done.stdout + done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    exits = {"dry run": dry.stdout + dry.stderr, "run": done.stdout + done.stderr}
    exits |= {f"posted {' '.join(c['argv'])}": (c.get("stdin") or "") + (c.get("sent") or "") for c in calls}
    exits |= {f"file {p.name}": p.read_text(errors="replace") for p in host["results"].rglob("*") if p.is_file()}
    assert any("fix" in text for text in exits.values())  # the test ids did reach some exit, escaped
    for name, text in exits.items():
        assert canary not in text.replace(f"{canary}x", ""), f"the canary reached {name}"
        for char in ESCAPES:
            assert char not in text, f"{char!r} reached {name}"
