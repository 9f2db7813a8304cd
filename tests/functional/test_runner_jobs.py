"""run.step against vLLM's real runner, executed: every docker-path step of every fixture step file.

The reference is built without rocmci's job code: ci-infra's real template renders the step file
(citemplate.render_ci_infra, as bootstrap-amd.sh does), the test plays the Buildkite agent of the step's
queue itself (BUILDKITE_*, render devices: an agent of amd_<family>_<N> owns N GPUs), and the fixture
run-amd-test.sh, unmodified in a vLLM-like checkout, runs under this file's own recording `docker`.
rocmci's side is the job it plans (runs/agent.py) traced by its own stand-ins (runs/jobs.py). The two
`docker run`s must be equal word for word once rocmci's listed additions (jobs.RUNNER_DIFFERENCES) are
taken out. Native steps: rocmci's pod container carries the rendered podSpecPatch's image, env, GPUs.

The default run takes a sample of every kind (each file's first steps, a parallel job, DeepEP, no_gpu,
refused ones); ROCMCI_ALL_STEPS=1 (`nox -s runner-parity`) takes every step of every file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmci.pipeline import citemplate, source
from rocmci.pipeline.bootstrap import TemplateInputs
from rocmci.runs import agent, jobs, stepjobs
from rocmci.runs import pod as podmod
from rocmci.runs import steps as st
from tests.conftest import REPO, SHARED_VLLM, run_invoke

SHARED = REPO.parent / "shared" / "fixtures"
TEMPLATE = SHARED / "ci-infra" / "buildkite" / "test-template-amd.j2"
RUNNER = SHARED_VLLM / "buildkite" / "scripts" / "hardware_ci" / "run-amd-test.sh"
FILES = ["test-amd.yaml", "test-amd.58da4ee04.yaml", "test-amd.a0b421b7.yaml", "test-amd.b47dcc58.yaml"]
ALL = os.environ.get("ROCMCI_ALL_STEPS") == "1"
BUILD, JOB = "0190ab12-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "0190ab12-aaaa-4bbb-8ccc-0123456789ab"

pytestmark = pytest.mark.skipif(not TEMPLATE.is_file() or not RUNNER.is_file(), reason="shared fixtures not found")

# The reference agent's recording docker: every call NUL-separated, `docker run` returns at once.
RECORDER = """#!/bin/bash
printf '%s\\0' "$@" > "$REF_TRACE.$(date +%s%N)"
case "$1" in run) exit 0 ;; container|inspect) exit 1 ;; --version) echo 'Docker version 1, build x' ;; esac
exit 0
"""
QUIET = "#!/bin/bash\nexit 0\n"
NO_NET = "#!/bin/bash\nexit 7\n"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A vLLM-like checkout holding the fixture runner, byte for byte."""
    root = tmp_path_factory.mktemp("vllm")
    (root / ".buildkite/scripts/hardware_ci").mkdir(parents=True)
    shutil.copyfile(RUNNER, root / ".buildkite/scripts/hardware_ci/run-amd-test.sh")
    (root / "docker").mkdir()
    shutil.copyfile(SHARED_VLLM / "docker" / "Dockerfile.rocm", root / "docker" / "Dockerfile.rocm")
    (root / "setup.py").write_text("")
    shutil.copyfile(SHARED_VLLM / "test-amd.yaml", root / ".buildkite" / "test-amd.yaml")
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fixture"], check=True)
    return root


@pytest.fixture(scope="module")
def recorder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ref-bin")
    for name, text in {"docker": RECORDER, "rocminfo": QUIET, "rocm-smi": QUIET, "curl": NO_NET}.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    # The host's render gid (a dry run here, without the group, shows docker the name): the same host as rocmci's.
    (folder / "getent").write_text(f"#!/bin/bash\necho render:x:{jobs.render_gid(Path('/')) or 'render'}:\n")
    (folder / "getent").chmod(0o755)
    return folder


def rendered(name: str) -> list[dict]:
    """ci-infra's render of the step file (run_all: no gates), its command steps in order."""
    text = citemplate.render_ci_infra(TEMPLATE, SHARED_VLLM / name, TemplateInputs(run_all="1"))
    out = []
    for item in citemplate.parse_pipeline(text, "ci-infra render"):
        for step in item.get("steps", [item]) if isinstance(item, dict) else ():
            if isinstance(step, dict) and step.get("command") == st.RUNNER:
                out.append(step)
    return out


def generated(name: str) -> dict[str, st.Step]:
    src = source.load_source(SHARED_VLLM / name, name)
    return {s.label: s for s in st.generated_steps(src, "amdproduction", "rocm/vllm-ci:build-$BUILDKITE_BUILD_ID")}


def reference_render(queue: str, expected: str) -> str:
    """The test's own agent model: amd_<family>_<N> owns N GPUs; a step expecting none is handed none."""
    if expected == "0":
        return ""
    m = re.fullmatch(r"amd_\w+?_(\d+)", queue)
    n = int(m.group(1)) if m else int(expected or 1)
    return " ".join(f"--device /dev/dri/renderD{128 + i}" for i in range(n))


def reference_docker_run(step: dict, checkout: Path, recorder: Path, tmp: Path, job: int | None):
    """Run the fixture runner as the test's agent would; (exit code, its `docker run` words or None)."""
    upload = {"BUILDKITE_BUILD_ID": BUILD}
    env = {k: agent.interpolate(str(v), upload) for k, v in step.get("env", {}).items()}
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    agent_env = {
        "PATH": f"{recorder}:/usr/bin:/bin", "HOME": str(home), "BUILDKITE_BUILD_ID": BUILD, "BUILDKITE_JOB_ID": JOB,
        "BUILDKITE_COMMIT": "c" * 40, "BUILDKITE_BUILD_CHECKOUT_PATH": str(checkout),
        "BUILDKITE_LABEL": step["label"], "BUILDKITE_AGENT_META_DATA_QUEUE": step["agents"]["queue"],
        "BUILDKITE_AGENT_META_DATA_RENDER_DEVICES": reference_render(
            step["agents"]["queue"], env.get("VLLM_CI_EXPECTED_GPU_COUNT", "1")),
        "REF_TRACE": str(tmp / "call"), "ROCM_DOCKER_TTY": "0", **env,
    }  # fmt: skip
    if step.get("parallelism"):
        agent_env.update(BUILDKITE_PARALLEL_JOB=str(job or 0), BUILDKITE_PARALLEL_JOB_COUNT=str(step["parallelism"]))
    done = subprocess.run(["/bin/bash", "-e", "-c", step["command"]], cwd=checkout, env=agent_env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    for path in sorted(tmp.glob("call.*")):
        words = path.read_bytes().decode().split("\0")[:-1]
        path.unlink()
        if words[:1] == ["run"]:
            return done.returncode, words, done.stdout + done.stderr
    return done.returncode, None, done.stdout + done.stderr


def rocmci_docker_run(step: st.Step, checkout: Path, tmp: Path, job: int | None):
    """rocmci's job for the step, traced: (exit code, the `docker run` words without rocmci's additions)."""
    ids = agent.Ids(BUILD, JOB, "c" * 40, "main")
    planned = agent.job(step.data, parallel_job=job, ids=ids, checkout=str(checkout))
    place = jobs.Place(checkout, tmp / "results", str(tmp / "hf"))
    render = agent.render_devices(stepjobs.stand_in_gpus(planned.gpus))
    traced = jobs.trace(planned, place, render)
    runs = traced.runs()
    if not runs:
        return traced.exit_code, None, "\n".join(traced.output)
    return traced.exit_code, strip_additions(list(runs[0]), place), "\n".join(traced.output)


def strip_additions(words: list[str], place: jobs.Place) -> list[str]:
    """Take out what RUNNER_DIFFERENCES lists: the client's name, --cidfile, rocmci's labels, the results mount."""
    out, skip = [], 0
    words = words[1:]  # the client (docker)
    for i, word in enumerate(words):
        if skip:
            skip -= 1
            continue
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if word == "--cidfile" or (word == "--label" and nxt.startswith("rocmci.")):
            skip = 1
            continue
        if word == "--volume" and nxt == f"{place.results}:/rocmci-results":
            skip = 1
            continue
        out.append(word)
    return out


def normalise(words: list[str], tmp_home: str) -> list[str]:
    """The container's random name and the agent's HOME (the listed HOME difference) made comparable."""
    out = []
    for w in words:
        w = re.sub(r"^rocm_(\w+)_[A-Za-z0-9]{10}$", r"rocm_\1_NAME", w)
        w = re.sub(r"^/.*/huggingface:/root/.cache/huggingface$", "HOME/huggingface:/root/.cache/huggingface", w)
        out.append(w.replace(tmp_home, "HOME"))
    return out


def cases():
    out = []
    for name in FILES:
        path = SHARED_VLLM / name
        if not path.is_file() or not TEMPLATE.is_file():
            continue
        steps = rendered(name)
        chosen = steps if ALL else _sample(steps)
        out += [pytest.param(name, s["label"], id=f"{name}:{s['label']}") for s in chosen]
    return out


def _sample(steps: list[dict]) -> list[dict]:
    """Every kind once: the first docker-path and native steps, parallelism, DeepEP, no GPU, refusals, 2 GPUs."""
    kinds = {
        "docker": lambda s: not s.get("plugins"),
        "native": lambda s: bool(s.get("plugins")),
        "parallel": lambda s: bool(s.get("parallelism")),
        "deepep": lambda s: "deepep" in s.get("env", {}).get("VLLM_TEST_COMMANDS", "").lower(),
        "no_gpu": lambda s: s.get("env", {}).get("VLLM_CI_EXPECTED_GPU_COUNT") == "0",
        "python_only": lambda s: "python_only_compile" in s.get("env", {}).get("VLLM_TEST_COMMANDS", ""),
        "two_node": lambda s: s.get("env", {}).get("NUM_NODES") not in (None, "1"),
        "two_gpus": lambda s: s["agents"]["queue"].endswith("_2") and not s.get("plugins"),
    }
    chosen = []
    for test in kinds.values():
        hit = next((s for s in steps if test(s) and s not in chosen), None)
        if hit is not None:
            chosen.append(hit)
    return chosen


@pytest.mark.parametrize(("name", "label"), cases())
def test_the_job_equals_what_the_runner_does_for_ci_infras_render(name, label, checkout, recorder, tmp_path):
    reference = next(s for s in rendered(name) if s["label"] == label)
    ours = generated(name)[label]
    job = 1 if reference.get("parallelism") else None
    if reference.get("plugins"):
        return check_pod(reference, ours, checkout, tmp_path)
    ref_code, ref_run, ref_out = reference_docker_run(reference, checkout, recorder, tmp_path, job)
    our_code, our_run, our_out = rocmci_docker_run(ours, checkout, tmp_path, job)
    assert our_code == ref_code, (ref_out[-800:], our_out[-800:])
    if ref_run is None:  # the runner refused the step: so must rocmci's trace, with the same words
        assert our_run is None and ref_out.strip().splitlines()[-1] in our_out
        return
    home = str(tmp_path / "results" / "agent" / "home")
    assert normalise(our_run, home) == normalise(ref_run, str(tmp_path / "home"))


def check_pod(reference: dict, ours: st.Step, checkout: Path, tmp: Path) -> None:
    """A native step: rocmci's container is the rendered pod's (image, env, GPUs), running the step's command."""
    ids = agent.Ids(BUILD, JOB, "c" * 40, "main")
    job = agent.job(ours.data, parallel_job=None, ids=ids, checkout=str(checkout))
    spec = reference["plugins"][0]["kubernetes"]["podSpecPatch"]
    container = spec["containers"][0]
    gpus = int(container["resources"]["limits"]["amd.com/gpu"])
    host = podmod.Host(
        "docker", "pod-1", "node-1", tuple(stepjobs.stand_in_gpus(job.gpus)), Path("/"), str(checkout),
        str(tmp / "r"), str(tmp / "hf"), str(tmp / "bk"), "host", str(tmp / "cid"), JOB,
    )  # fmt: skip
    argv = podmod.run_argv(job, host)
    assert argv[-4:] == [*agent.AGENT_SHELL, reference["command"]]
    assert argv[-5] == agent.interpolate(container["image"], {"BUILDKITE_BUILD_ID": BUILD})
    envs = dict(argv[i + 1].split("=", 1) for i, w in enumerate(argv) if w == "--env" and "=" in argv[i + 1])
    upload = {"BUILDKITE_BUILD_ID": BUILD}
    for key, value in reference["env"].items():
        if key != "VLLM_CI_DIAGNOSTICS_DIR":  # listed: under the results mount
            assert envs[key] == agent.interpolate(str(value), upload), key
    fields = {"metadata.name": "pod-1", "metadata.namespace": "rocmci", "spec.nodeName": "node-1"}
    for item in container["env"]:
        expected = item["value"] if "value" in item else fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        assert envs[item["name"]] == expected, item["name"]
    renders = [argv[i + 1] for i, w in enumerate(argv) if w == "--device" and "renderD" in argv[i + 1]]
    assert len(renders) == gpus
    assert ("/dev/kfd" in argv) == (gpus > 0)
    agent_given = {"BUILDKITE_BUILD_ID": BUILD, "BUILDKITE_JOB_ID": JOB, "BUILDKITE_LABEL": reference["label"],
                   "BUILDKITE_COMMAND": reference["command"]}  # fmt: skip
    for key, value in agent_given.items():
        assert envs[key] == value, key


def dry_run(checkout: Path, tmp: Path, *args: str):
    env = {
        "ROCMCI_RESULTS_DIR": str(tmp / "results"),
        "ROCMCI_HF_CACHE": str(tmp / "hf"),
        "DOCKER_HOST": "unix:///nonexistent",
    }
    return run_invoke(
        "run.step", "--vllm-src", str(checkout), "--host-root", str(tmp), "--dry-run", *args, env=env, cwd=tmp
    )


def render_nodes(out: str) -> list[str]:
    return re.findall(r"--device \S*renderD\d+", out.replace(" \\\n    ", " "))


def test_the_april_fp8_moe_step_on_mi325_2_gets_both_gpus_of_its_agent(checkout, tmp_path):
    april = SHARED_VLLM / "test-amd.58da4ee04.yaml"
    done = dry_run(checkout, tmp_path, "--source", str(april), "--step", "mi325_2: Kernels FP8 MoE Test")
    assert done.returncode == 0, done.stderr
    assert len(render_nodes(done.stdout)) == 2
    assert "2 GPUs (an agent of this queue owns that many" in done.stdout


def test_a_no_gpu_step_gets_no_render_node(checkout, tmp_path):
    done = dry_run(checkout, tmp_path, "--step", "mi250_1: Rust Frontend Cargo Style + Clippy")
    assert done.returncode == 0, done.stderr
    assert render_nodes(done.stdout) == [] and "VLLM_TARGET_DEVICE=cpu" in done.stdout


@pytest.mark.parametrize(
    ("step_file", "label", "reason"),
    [
        ("test-amd.yaml", "mi250_1: Python-only Installation", "python_only_compile.sh requires native execution"),
        ("test-amd.b47dcc58.yaml", "mi325_4: 2 Node Tests (4 GPUs in total)", "No test commands provided"),
    ],
)
def test_steps_the_runner_refuses_are_refused_with_its_reason(checkout, tmp_path, step_file, label, reason):
    done = dry_run(checkout, tmp_path, "--source", str(SHARED_VLLM / step_file), "--step", label)
    assert done.returncode == 5, done.stdout
    assert "vLLM's runner refuses step" in done.stderr and reason in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_gpus_must_match_what_the_agent_owns_and_build_id_excludes_image(checkout, tmp_path):
    three = dry_run(checkout, tmp_path, "--step", "mi250_1: V1 others (CPU)", "--gpus", "0,1,2")
    assert three.returncode == 2 and "--gpus names 3 GPUs" in three.stderr
    both = dry_run(checkout, tmp_path, "--step", "mi250_1: V1 others (CPU)", "--build-id", "7", "--image", "x:1")
    assert both.returncode == 2 and "--build-id and --image" in both.stderr


def test_a_dry_run_with_json_prints_the_same_command_as_json(checkout, tmp_path):
    text = dry_run(checkout, tmp_path, "--step", "mi250_1: V1 others (CPU)")
    data = dry_run(checkout, tmp_path, "--step", "mi250_1: V1 others (CPU)", "--json")
    assert data.returncode == 0, data.stderr
    (run,) = json.loads(data.stdout)["runs"]
    assert run["argv"][1:3] == ["run", "--cidfile"] and "--device" in run["argv"]
    assert any(e.startswith("BUILDKITE_AGENT_META_DATA_QUEUE=amd_mi250_1") for e in run["env"])
    assert len(render_nodes(text.stdout)) == len([w for w in run["argv"] if "renderD" in w]) == 1
