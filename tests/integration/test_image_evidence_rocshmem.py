"""rocSHMEM's targets are read after the build too (issue 31 item 1): a rocSHMEM narrower than the request
fails the build at the rocSHMEM stage, and no tag is left claiming the list."""

from __future__ import annotations

import shutil
import uuid

from tests.conftest import REPO, run_invoke
from tests.integration.test_image_tiers import env

STANDIN = REPO / "tests" / "data" / "vllm-standin"


def test_a_rocshmem_built_for_fewer_targets_fails_the_build_naming_its_stage(engine, tmp_path):
    tree = tmp_path / "vllm"
    shutil.copytree(STANDIN, tree)
    path = tree / "docker" / "Dockerfile.rocm"
    text = path.read_text()
    assert '-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"' in text
    # Set where the static arch check cannot follow (an eval: a warning), so only the evidence can tell.
    path.write_text(text.replace('-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', '-DGPU_TARGETS="${ROCSHMEM_TARGETS}"')
                    .replace(" && cd projects/rocshmem/build \\\n",
                             ' && cd projects/rocshmem/build && eval "ROCSHMEM_TARGETS=gfx942" \\\n'))
    repo = f"rocmci-test/rocshmem-{uuid.uuid4().hex[:8]}"
    try:
        done = run_invoke("image.build", "--vllm-src", str(tree), "--target", "ci_base", env=env(repo))
        assert done.returncode == 4, done.stderr[-3000:]
        last = done.stderr.strip().splitlines()[-1]
        assert "its rocSHMEM code objects are for gfx942, not the requested gfx942;gfx950" in last
        assert "(rocSHMEM is built by stage build_rocshmem of docker/Dockerfile.rocm)" in last
        assert "the image was untagged" in last
        assert not engine.cli("images", "-q", repo, check=False).stdout.split()
    finally:
        tags = engine.cli("images", "--format", "{{.Repository}}:{{.Tag}}", repo, check=False).stdout.split()
        if tags:
            engine.cli("rmi", *tags, check=False)
