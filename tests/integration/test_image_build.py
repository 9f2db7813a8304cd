"""image.build and image.retarget on the real engine (BuildKit), with the stand-in vLLM tree.

tests/data/vllm-standin is a small vLLM checkout: vLLM's stage names, ARG names and tiers, built FROM the
local base image; its steps write the arguments they received into files.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid

import pytest

from tests.conftest import REPO, RUN_LABEL, RUN_SELECTOR, run_invoke
from tests.integration.helpers import leftovers, remove_images

STANDIN = REPO / "tests" / "data" / "vllm-standin"
STEP = re.compile(r"^#(\d+) \[([\w-]+) \d+/\d+\] (.*)$")


def env_for(repo: str) -> dict[str, str]:
    # The base image is unique to this run (see `standin`), so no earlier run's build cache can answer for it.
    base = f"{repo}:base"
    return {"ROCMCI_IMAGE_REPO": repo, "ROCMCI_BASE_IMAGE": base, "ROCMCI_BUILD_NETWORK": "none", "CI": "true",
            "ROCMCI_EXTRA_LABELS": f"{RUN_SELECTOR},{case_label(repo)}"}  # fmt: skip


def case_label(repo: str) -> str:
    """The label of every image this module makes (its base's, inherited, and image.build's extra_labels)."""
    return f"{RUN_LABEL}.case={repo.rsplit('-', 1)[1]}"


def steps(output: str) -> dict[str, set[str]]:
    """From BuildKit's plain progress: the stages whose RUN steps executed, and those whose RUN steps were cached."""
    names: dict[str, tuple[str, str]] = {}
    ran: set[str] = set()
    cached: set[str] = set()
    for line in output.splitlines():
        if line.startswith("#1 [internal] load build definition"):
            names = {}  # the next build (test after ci_base) numbers its steps from #1 again
        elif m := STEP.match(line):
            names[m.group(1)] = (m.group(2), m.group(3))
        elif (m := re.match(r"^#(\d+) (CACHED|DONE )", line)) and m.group(1) in names:
            stage, text = names[m.group(1)]
            if text.startswith("RUN"):
                (cached if m.group(2) == "CACHED" else ran).add(stage)
    return {"ran": ran - cached, "cached": cached}


@pytest.fixture(scope="module")
def standin(engine, python_image, tmp_path_factory):
    """A copy of the stand-in checkout and a unique image repository, removed afterwards."""
    tree = tmp_path_factory.mktemp("vllm") / "vllm"
    shutil.copytree(STANDIN, tree)
    repo = f"rocmci-test/vllm-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [engine.client, "build", "--network", "none", "-q", "-t", f"{repo}:base", "--label", RUN_SELECTOR,
         "--label", case_label(repo), "-"],
        input=f"FROM {python_image}\nRUN echo {repo} > /standin-run\n",
        env=engine.build_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    yield tree, repo
    refs = engine.cli("images", "-q", repo, check=False).stdout.split()
    if refs:
        engine.cli("rmi", "-f", *set(refs), check=False)
    assert remove_images(engine, case_label(repo)) == [], f"images labelled {case_label(repo)} could not be removed"


@pytest.fixture(scope="module")
def built(standin):
    tree, repo = standin
    done = run_invoke("image.build", "--vllm-src", str(tree), env=env_for(repo))
    assert done.returncode == 0, done.stderr[-3000:]
    return done, f"{repo}:test-gfx942-gfx950-vllm-gfx90a-gfx942-gfx950"


def read(engine, image: str, *command: str) -> str:
    return engine.cli("run", "--rm", "--network", "none", image, *command).stdout.strip()


def test_tiers_labels_and_one_arch_list_reaching_rocshmem_and_deepep(engine, standin, built):
    done, tag = built
    tree, repo = standin
    assert f"built {repo}:ci-base-gfx942-gfx950-vllm-gfx90a-gfx942-gfx950 (ci_base)" in done.stderr
    assert f"built {tag} (test)" in done.stderr
    for checked in (f"{repo}:ci-base-gfx942-gfx950-vllm-gfx90a-gfx942-gfx950", tag):  # evidence after each build
        assert f"checked {checked}: DeepEP code objects for gfx942;gfx950, as requested" in done.stderr
    labels = engine.image_labels(tag)
    assert labels["rocmci.arch"] == "gfx942;gfx950" and labels["rocmci.vllm.arch"] == "gfx90a;gfx942;gfx950"
    assert labels["rocmci.deepep.ref"] == "standin-deepep-1" and labels["rocmci.rocshmem.ref"] == "standin-rocshmem-1"
    assert labels["rocmci.deepep.flags"] == "--rocm-explicit-ctx --rocm-gfx942-fp8-fnuz-max 224"
    assert labels["rocmci.ci-base-image"].startswith(f"{repo}:ci-base-") and len(labels["rocmci.input-hash"]) == 16
    assert read(engine, tag, "cat", "/opt/rocshmem/gpu-targets") == "gfx942;gfx950"
    deepep = "import deep_ep as d; print(d.ARCHS, d.REF, d.NIC, d.EXPLICIT_CTX, d.FP8_FNUZ_MAX)"
    assert read(engine, tag, "python3", "-c", deepep) == "gfx942;gfx950 standin-deepep-1 cx7 True 224"
    native = read(engine, tag, "cat", "/opt/vllm-wheels/native.txt")
    assert native == "STANDIN_VLLM_COMPILE PYTORCH_ROCM_ARCH=gfx90a;gfx942;gfx950"
    assert read(engine, tag, "ls", "/vllm-workspace/src") == "vllm"  # vLLM's test-stage layout

    again = run_invoke("image.build", "--vllm-src", str(tree), env=env_for(repo))
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("is up to date") == 2 and "built " not in again.stderr and "#1 " not in again.stderr


def test_arch_only_change_reruns_rocshmem_and_deepep_and_no_vllm_compile(engine, standin, built):
    tree, repo = standin
    done = run_invoke("image.build", "--vllm-src", str(tree), "--arch", "gfx950", env=env_for(repo))
    assert done.returncode == 0, done.stderr[-3000:]
    seen = steps(done.stderr)
    # That DeepEP was rebuilt for the new list is proven by what it recorded at build time (deep_ep.ARCHS
    # below); its stage's progress lines once came out as cached in a full loaded run (1 of 3), so the
    # progress is asserted for rocSHMEM, whose stage the new list reaches first.
    assert "build_rocshmem" in seen["ran"], (seen, done.stderr[-3000:])
    assert not seen["ran"] & {"csrc-build", "build_vllm"}, seen
    assert {"csrc-build", "build_vllm"} <= seen["cached"]
    tag = f"{repo}:test-gfx950-vllm-gfx90a-gfx942-gfx950"
    assert f"checked {tag}: DeepEP code objects for gfx950, as requested" in done.stderr
    assert read(engine, tag, "cat", "/opt/rocshmem/gpu-targets") == "gfx950"
    assert read(engine, tag, "python3", "-c", "import deep_ep; print(deep_ep.ARCHS)") == "gfx950"


def test_failing_step_is_named_with_its_log_tail(engine, standin, built, tmp_path):
    tree, repo = standin
    broken = tmp_path / "vllm"
    shutil.copytree(tree, broken)
    (broken / "csrc" / "FAIL").write_text("")
    done = run_invoke("image.build", "--vllm-src", str(broken), "--tag", f"{repo}:broken", env=env_for(repo))
    assert done.returncode == 4
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rocmci: build failed at [csrc-build 4/4] RUN if [ -e csrc/FAIL ]")
    assert "exit code: 7" in last and "standin: compile error in csrc" in last
    assert "Traceback" not in done.stderr
    assert engine.image_labels(f"{repo}:broken") is None


def test_a_deepep_built_for_gfx942_under_a_gfx950_request_fails_the_build_at_the_deepep_check(
    engine, standin, built, tmp_path
):
    """The static arch check cannot follow the file (an eval sets DeepEP's PYTORCH_ROCM_ARCH): a warning, not a
    refusal, so only the evidence can tell: the build fails and no tag keeps the lying labels."""
    tree, repo = standin
    wrong = tmp_path / "vllm"
    shutil.copytree(tree, wrong)
    path = wrong / "docker" / "Dockerfile.rocm"
    setup = " && python3 setup.py --variant rocm"
    path.write_text(path.read_text().replace(setup, ' && eval "export PYTORCH_ROCM_ARCH=gfx942" \\\n' + setup))
    checked = run_invoke("image.check", "--vllm-src", str(wrong), "--arch", "gfx950")
    assert checked.returncode == 0 and "warning [arch-flow-unfollowed] eval runs text" in checked.stdout
    dry = run_invoke("image.build", "--vllm-src", str(wrong), "--arch", "gfx950", "-n", env=env_for(repo))
    ci_base = f"{repo}:ci-base-gfx950-vllm-gfx90a-gfx942-gfx950"
    assert dry.returncode == 0 and "# then the DeepEP check (the verifier " in dry.stdout
    assert f"    --entrypoint python3 \\\n    {ci_base} \\\n    - \\\n    --expect gfx950\n" in dry.stdout
    containers = set(leftovers(engine))
    done = run_invoke("image.build", "--vllm-src", str(wrong), "--arch", "gfx950", env=env_for(repo))
    assert done.returncode == 4, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rocmci: {ci_base} was built but its DeepEP code objects are for gfx942, not the "
                           "requested gfx950 (DeepEP is built by stage build_deepep of docker/Dockerfile.rocm)")
    assert "the image was untagged, so no label claims gfx950" in last and "Traceback" not in done.stderr
    assert f"built {ci_base}" not in done.stderr and " (test) in " not in done.stderr  # test is never built on it
    assert engine.image_labels(ci_base) is None  # no tag says gfx950 over a gfx942 DeepEP, nor offers reuse
    assert set(leftovers(engine)) == containers  # the verifier's container is gone
    again = run_invoke("image.build", "--vllm-src", str(wrong), "--arch", "gfx950", env=env_for(repo))
    assert again.returncode == 4 and "is up to date" not in again.stderr  # checked again, never reused

    fixed = run_invoke("image.build", "--vllm-src", str(tree), "--arch", "gfx950", "--target", "ci_base",
                       env=env_for(repo))  # fmt: skip
    assert fixed.returncode == 0 and f"checked {ci_base}: DeepEP code objects for gfx950, as requested" in fixed.stderr


def test_a_given_ci_base_whose_deepep_is_another_list_fails_the_test_tier(engine, standin, built):
    tree, repo = standin
    given = f"{repo}:ci-base-gfx942-gfx950-vllm-gfx90a-gfx942-gfx950"  # built by `built`: DeepEP for both
    tag = f"{repo}:given-ci-base"
    done = run_invoke("image.build", "--vllm-src", str(tree), "--arch", "gfx950", "--ci-base", given, "--tag", tag,
                      env=env_for(repo))  # fmt: skip
    assert done.returncode == 4, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"rocmci: {tag} was built but its DeepEP code objects are for gfx942;gfx950, not the requested gfx950 "
        f"(DeepEP is built by the given ci_base {given}). the image was untagged"
    )
    assert engine.image_labels(tag) is None and engine.image_labels(given) is not None


def test_retarget_rebuilds_rocshmem_and_deepep_on_the_image_and_verifies_it(engine, standin, built):
    tree, repo = standin
    _, source = built
    done = run_invoke(
        "image.retarget", "--from", source, "--arch", "gfx950", "--vllm-src", str(tree), env=env_for(repo)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tag = f"{repo}:retarget-gfx950"
    assert f"built {tag}: deep_ep imports; code objects for gfx950" in done.stderr
    labels = engine.image_labels(tag)
    assert labels["rocmci.arch"] == "gfx950" and labels["rocmci.retarget.from"] == source
    assert read(engine, tag, "cat", "/opt/rocshmem/gpu-targets") == "gfx950"
    assert read(engine, tag, "cat", "/opt/rocshmem/ref") == "standin-rocshmem-1"  # the pin read from the file
    workdir = engine.cli("image", "inspect", "--format", "{{.Config.WorkingDir}}", tag).stdout.strip()
    assert workdir == "/vllm-workspace"  # the source image's, not the overlay's
    mismatch = engine.cli("run", "--rm", "--network", "none", tag, "python3", "/opt/rocmci/verify_deepep.py",
                          "--expect", "gfx942;gfx950", check=False)
    assert mismatch.returncode == 1 and '"ok": false' in mismatch.stdout  # it compares: gfx950 alone is not both


def test_unsupported_arch_fails_before_any_build(standin):
    tree, repo = standin
    done = run_invoke("image.build", "--vllm-src", str(tree), "--arch", "gfx90a", env=env_for(repo))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "gfx942" in done.stderr and "#1 " not in done.stderr


def test_no_checkout_is_one_line_naming_the_flag(tmp_path):
    done = run_invoke("image.build", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "rocmci: no vLLM checkout to read docker/Dockerfile.rocm from (unset: the current folder is not a vLLM "
        "checkout (no docker/Dockerfile.rocm + setup.py)). pass --vllm-src PATH (a vLLM checkout), set "
        "ROCMCI_VLLM_SRC, or run from a vLLM checkout"
    ]


def test_engine_down_is_one_line(tmp_path, standin):
    tree, repo = standin
    env = {**env_for(repo), "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    done = run_invoke("image.build", "--vllm-src", str(tree), env=env)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1].startswith("rocmci: the Docker engine is not running")


def test_done_when_commands_on_a_copy_of_vllms_tree(vllm_fixtures, tmp_path):
    """The issue's checks, as a user would type them, on a copy of vLLM's real docker/ folder."""
    tree = tmp_path / "vllm"
    shutil.copytree(vllm_fixtures / "docker", tree / "docker")
    (tree / "setup.py").write_text("")
    path = tree / "docker" / "Dockerfile.rocm"
    line = next(n for n, t in enumerate(path.read_text().splitlines(), 1) if 'export PYTORCH_ROCM_ARCH="gfx942' in t)
    check = run_invoke("image.check", "--vllm-src", str(tree))  # the list vLLM's file hard-codes is the default
    assert check.returncode == 0, check.stdout
    check = run_invoke("image.check", "--vllm-src", str(tree), "--arch", "gfx942")  # another list stops there
    assert check.returncode == 1 and check.stdout.startswith(f"docker/Dockerfile.rocm:{line}:12: error ")
    checksum = next(n for n, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("ADD --checksum"))
    for argv in (("doctor", "--for", "build", "--vllm-src", "../shared/fixtures/vllm"),  # as the issue types them
                 ("image.build", "--vllm-src", str(tree), "--network", "none")):  # fmt: skip
        # This engine's built-in BuildKit (Docker 20.10) rejects ADD --checksum: said before any stage runs.
        refused = run_invoke(*argv)
        last = refused.stderr.strip().splitlines()[-1]
        assert refused.returncode == 5, refused.stderr
        assert f"docker/Dockerfile.rocm:{checksum} uses ADD --checksum" in last and "Unknown flag: checksum" in last
        assert "docker buildx create --driver docker-container --use" in last and "Traceback" not in refused.stderr
    for argv in (("image.build", "--vllm-src", "../shared/fixtures/vllm", "-n"),
                 ("image.build", "--vllm-src", str(tree), "--dry-run")):  # fmt: skip
        # A dry run still prints the plan; what would stop the build is a `# preflight:` line above it.
        dry = run_invoke(*argv)
        assert dry.returncode == 0, dry.stderr
        first = dry.stdout.splitlines()[0]
        assert first.startswith("# preflight: the build would stop here (exit 5): ") and "ADD --checksum" in first
        assert "--target ci_base" in dry.stdout and "--target test" in dry.stdout
    # Without an engine to ask, the dry run still shows the plan, and says what it could not check.
    dry = run_invoke("image.build", "--vllm-src", str(tree), "--dry-run",
                     env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})  # fmt: skip
    assert dry.returncode == 0 and "'DEEPEP_ROCM_ARCH=gfx942;gfx950'" in dry.stdout and str(path) in dry.stdout
    assert "note: the engine is not reachable (" in dry.stderr and "): BuildKit features" in dry.stderr
    # The file's own list builds what vLLM builds: no finding of the arch flow at all.
    assert "[deepep-arch-source]" not in dry.stderr and " error [" not in dry.stderr
    # `final` builds no rocSHMEM/DeepEP: another list is neither refused nor a label or build arg there.
    final = run_invoke("image.build", "--vllm-src", str(tree), "--target", "final", "--arch", "gfx942", "-n",
                       env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})  # fmt: skip
    assert final.returncode == 0, final.stderr
    assert "DEEPEP_ROCM_ARCH" not in final.stdout and "rocmci.arch=" not in final.stdout
    assert "--target final" in final.stdout
    refused = run_invoke("image.build", "--vllm-src", str(tree), "--arch", "gfx942", "--dry-run")
    assert refused.returncode == 1 and f"docker/Dockerfile.rocm:{line}:12" in refused.stderr
    shown = run_invoke("settings", env={"ROCMCI_VLLM_SRC": str(tree)})
    assert re.search(r"deepep_ref\s+0f63d3e9\s+\S*docker/Dockerfile.rocm:\d+ \(ARG DEEPEP_BRANCH\)", shown.stdout)
    retarget = run_invoke("image.retarget", "--from", "rocm/vllm-ci:x", "--arch", "gfx950", "--vllm-src", str(tree),
                          "--dry-run")
    assert retarget.returncode == 0 and "DEEPEP_BRANCH=0f63d3e9" in retarget.stdout
    assert "--rocm-explicit-ctx --rocm-gfx942-fp8-fnuz-max 224" in retarget.stderr
    path.write_text(path.read_text().replace('export PYTORCH_ROCM_ARCH="gfx942;gfx950"',
                                             'export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}"'))
    fixed = run_invoke("image.check", "--vllm-src", str(tree))
    assert fixed.returncode == 0 and len(fixed.stdout.strip().splitlines()) == 1
