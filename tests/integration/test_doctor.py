"""`invoke doctor` end to end: real engine, real invoke process, fake device trees."""

from __future__ import annotations

import json

from tests.conftest import run_invoke
from tests.unit.test_gpus import make_node


def test_doctor_without_gpus_says_so_and_shows_the_engine(engine):
    done = run_invoke("doctor")
    assert done.returncode == 0, done.stderr
    assert "no AMD GPU on this host" in done.stdout  # the AMD GPUs check
    assert "DeepEP workloads: not here, missing /dev/kfd, render nodes, AMD GPUs" in done.stdout
    assert f"server {engine.server_version()}" in done.stdout
    assert "Traceback" not in done.stderr


def test_doctor_for_run_fails_with_the_fix(engine):
    done = run_invoke("doctor", "--for", "run")
    assert done.returncode == 5
    assert done.stderr.strip().splitlines() == [
        "rocmci: not ready for run: /dev/kfd: absent (and 3 more above). "
        "install the amdgpu driver (ROCm) on an AMD GPU host"
    ]


def test_doctor_reads_gpus_from_a_kfd_tree(engine, tmp_path):
    nodes = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    make_node(nodes, 0, 0)
    make_node(nodes, 1, 90402, render=128)
    make_node(nodes, 2, 90402, render=129)
    make_node(nodes, 3, 90500, render=130)
    (tmp_path / "dev/dri").mkdir(parents=True)
    (tmp_path / "dev/kfd").write_text("")
    for minor in (128, 129, 130):
        (tmp_path / f"dev/dri/renderD{minor}").write_text("")
    done = run_invoke("doctor", "--json", "--host-root", str(tmp_path))
    assert done.returncode == 0, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["AMD GPUs"]["detail"] == "3 GPUs: gfx942 x2, gfx950 x1"
    assert checks["/dev/kfd"]["ok"] and checks["render nodes"]["ok"]
    assert checks["docker engine"]["ok"]


def test_engine_not_running_is_one_line_naming_how_to_start_it(tmp_path):
    done = run_invoke("doctor", "--for", "build", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert done.returncode == 5
    assert "docker engine" in done.stdout and "the Docker engine is not running" in done.stdout
    assert "start the Docker service" in done.stderr
    assert "--bridge=none" not in done.stderr + done.stdout  # the sandbox's way, not a user's
    assert "Traceback" not in done.stderr


def test_unknown_purpose_is_a_usage_error():
    done = run_invoke("doctor", "--for", "lunch")
    assert done.returncode == 2
    assert "unknown --for 'lunch'" in done.stderr


def test_doctor_asks_the_builder_about_the_checkouts_dockerfile_features(engine, tmp_path):
    from tests.conftest import REPO

    done = run_invoke("doctor", "--json", "--vllm-src", str(REPO / "tests" / "data" / "vllm-standin"))
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["dockerfile features"]["ok"], checks["dockerfile features"]
    assert checks["dockerfile features"]["detail"].startswith("docker/Dockerfile.rocm: RUN --mount; all accepted")
    heredoc = tmp_path / "vllm"
    (heredoc / "docker").mkdir(parents=True)
    (heredoc / "setup.py").write_text("")
    (heredoc / "docker" / "Dockerfile.rocm").write_text("FROM scratch AS ci_base\nRUN <<EOF\ntrue\nEOF\n")
    refused = run_invoke("doctor", "--for", "build", "--vllm-src", str(heredoc))
    assert refused.returncode == 5
    assert "docker/Dockerfile.rocm:2 uses heredocs (Dockerfile frontend 1.4+); this builder rejects it" in (
        refused.stderr
    )
    outside = run_invoke("doctor", "--json", cwd=tmp_path)
    detail = {c["name"]: c for c in json.loads(outside.stdout)}["dockerfile features"]["detail"]
    assert detail == "not checked (no vLLM checkout: --vllm-src)"
