"""What a build takes in, planned without an engine: the base tier's content hash (against vLLM's own
refresh-base-image.sh), the Dockerfile features it needs, BASE_IMAGE by digest, build args, buildx,
and the smaller rules of issue 21."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocmci.engine import parse_buildx_inspect
from rocmci.errors import PreflightError, UsageError
from rocmci.image import base, features, requests
from rocmci.image import check as checkmod
from rocmci.image import vllm_dockerfile as vd
from rocmci.image.build import Progress, ProgressParser
from rocmci.image.plan import BaseFacts, plan_build
from rocmci.values import image_ref, url_credentials, without_url_credentials
from tests.unit.test_image_plan import request

SCRIPT = "buildkite/scripts/rocm/refresh-base-image.sh"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def tree(vllm_docker_tree) -> Path:
    return vllm_docker_tree


def upstream_hash(vllm_fixtures: Path, tree: Path, digest: str) -> str:
    """compute_base_content_hash of vLLM's own script, sourced (its main() runs only when executed)."""
    script = vllm_fixtures / SCRIPT
    done = subprocess.run(
        ["bash", "-c", 'source "$1"; compute_base_content_hash 0 "$2"', "bash", str(script), digest],
        cwd=tree, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_base_content_hash_is_refresh_base_image_shs_own(vllm_fixtures, tree):
    script = (vllm_fixtures / SCRIPT).read_text()
    assert " ".join(base.CONTENT_ARGS) == re.search(r'DEFAULT_ROCM_BASE_CONTENT_ARGS="([^"]+)"', script).group(1)
    mine = base.tier(tree, lambda ref: (DIGEST, True))
    assert mine.upstream == base.arg_default((tree / base.BASE_DOCKERFILE).read_text(), "BASE_IMAGE")
    assert mine.content_hash == upstream_hash(vllm_fixtures, tree, DIGEST)
    os.chmod(tree / base.BASE_DOCKERFILE, 0o755)  # the mode is hashed too
    executable = base.tier(tree, lambda ref: (DIGEST, True)).content_hash
    assert executable == upstream_hash(vllm_fixtures, tree, DIGEST) != mine.content_hash
    other = "sha256:" + "cd" * 32  # the same file on another upstream base is another base
    assert base.tier(tree, lambda ref: (other, True)).content_hash == upstream_hash(vllm_fixtures, tree, other)
    assert base.tier(tree, lambda ref: (None, False)).content_hash is None


def test_features_the_real_dockerfile_needs_with_their_lines(vllm_fixtures):
    df = vd.load(vllm_fixtures)
    found = {u.feature: u.line for u in features.uses(df)}
    lines = (vllm_fixtures / "docker/Dockerfile.rocm").read_text().splitlines()
    assert found == {"RUN --mount": 41, "ADD --checksum": 287}
    assert lines[286].startswith("ADD --checksum=sha256:") and lines[40].startswith("RUN --mount=")
    text = "# syntax=docker/dockerfile:1.7\nFROM scratch AS a\nCOPY --link --chmod=644 a b\nRUN <<EOF\ntrue\nEOF\n"
    other = {u.feature: u for u in features.uses(vd.parse(text, path=Path("x"), display="x"))}
    assert set(other) == {"# syntax=docker/dockerfile:1.7", "COPY --link", "COPY --chmod", "heredocs"}
    assert other["# syntax=docker/dockerfile:1.7"].probe is None and other["heredocs"].line == 4
    # Only what the builder's parser rejects is missing; the message names the file's line, not the probe's.
    rejected = {other["heredocs"].probe}
    gaps = features.missing(list(other.values()), lambda probe: (probe not in rejected, "parse error line 2: no"))
    assert [g.use.feature for g in gaps] == ["heredocs"]
    assert features.describe(vd.parse(text, path=Path("x"), display="x"), gaps[0]) == (
        "x:4 uses heredocs (Dockerfile frontend 1.4+); this builder rejects it (parse error: no)"
    )


def facts(tree: Path, digest: str | None = DIGEST, content: str | None = None, tier=None) -> BaseFacts:
    return BaseFacts("rocm/vllm-dev:base", digest, False, content, tier)


def test_base_digest_keys_reuse_and_a_tag_alone_is_refused(tree):
    first = plan_build(request(tree, base=facts(tree)))
    moved = plan_build(request(tree, base=facts(tree, "sha256:" + "99" * 32)))
    assert [s.input_hash for s in first.steps] != [s.input_hash for s in moved.steps]
    assert all(s.labels["rocmci.base-image.digest"] == DIGEST for s in first.steps)
    assert first.steps[0].build_args["BASE_IMAGE"] == "rocm/vllm-dev:base"  # a local ID is not pullable
    pinned = plan_build(request(tree, base=BaseFacts("rocm/vllm-dev:base", DIGEST, True, None)))
    assert pinned.steps[0].build_args["BASE_IMAGE"] == f"rocm/vllm-dev:base@{DIGEST}"  # as refresh-base-image.sh
    with pytest.raises(PreflightError, match="mutable tag"):
        plan_build(request(tree, base=facts(tree, None)))


def test_base_tier_is_built_first_only_when_its_content_hash_differs(tree):
    tier = base.tier(tree, lambda ref: (DIGEST, False))
    same = plan_build(request(tree, base=facts(tree, content=tier.content_hash, tier=tier)))
    assert [s.target for s in same.steps] == ["ci_base", "test"]
    unlabelled = plan_build(request(tree, base=facts(tree, tier=tier)))
    assert [s.target for s in unlabelled.steps] == ["ci_base", "test"] and "--target base" in unlabelled.notices[0]
    changed = plan_build(request(tree, base=facts(tree, content="0" * 64, tier=tier)))
    first, ci_base, _ = changed.steps
    assert (first.target, first.tag) == ("base", f"rocmci/vllm-rocm:base-{tier.content_hash[:12]}")
    assert ci_base.build_args["BASE_IMAGE"] == first.tag and "--target" not in first.argv("docker")
    assert first.labels["vllm.rocm_base.content_hash"] == tier.content_hash
    assert first.build_args == {"BASE_IMAGE": tier.upstream, "USE_SCCACHE": "0"}
    only = plan_build(request(tree, target="base", base=facts(tree, tier=tier)))
    assert [s.target for s in only.steps] == ["base"]


def test_final_builds_no_deepep_so_the_list_is_no_label_and_no_argument(tree):
    (step,) = plan_build(request(tree, target="final", archs=("gfx942",))).steps
    assert "rocmci.arch" not in step.labels and vd.ARCH_ARG not in step.build_args
    assert step.tag == "rocmci/vllm-rocm:final"


def test_build_args_pass_through_checked_and_load_for_a_container_builder(tree):
    df = vd.load(tree)
    assert requests.extra_build_args(df, (("max_jobs", "8"),)) == {"max_jobs": "8"}
    plan = plan_build(request(tree, extra_args={"max_jobs": "8"}, load=True))
    argv = plan.steps[0].argv("docker")
    assert argv[argv.index("max_jobs=8") - 1] == "--build-arg" and "--load" in argv
    assert "--load" not in plan_build(request(tree)).steps[0].argv("docker")
    with pytest.raises(UsageError, match="declares no ARG max_job.*did you mean max_jobs"):
        requests.extra_build_args(df, (("max_job", "8"),))
    with pytest.raises(UsageError, match="is set by rocmci. use --arch"):
        requests.extra_build_args(df, (("DEEPEP_ROCM_ARCH", "gfx942"),))
    with pytest.raises(UsageError, match="control character"):
        requests.extra_build_args(df, (("max_jobs", "8\x1b[2J"),))


def test_buildx_inspect_names_the_builder_and_its_driver():
    text = "Name:          ci\nDriver:        docker-container\nLast Activity: now\n\nNodes:\nName:  ci0\n"
    assert parse_buildx_inspect(text) == ("ci", "docker-container")
    assert parse_buildx_inspect("Name: default\nDriver: docker\n") == ("default", "docker")
    assert parse_buildx_inspect("no builder") is None


def flow(body: str) -> list:
    text = (
        'FROM scratch AS build_rocshmem\nARG DEEPEP_ROCM_ARCH="gfx942;gfx950"\n'
        'RUN bash all_backends -DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"\nFROM build_rocshmem AS build_deepep\n' + body
    )
    df = vd.parse(text, path=Path("Dockerfile.rocm"), display="Dockerfile.rocm")
    return checkmod.check(df, checkmod.ArchRequest(("gfx942", "gfx950"), "--arch"))


def test_every_arch_assignment_before_setup_py_counts():
    good = 'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" \\\n && python3 setup.py --variant rocm bdist_wheel\n'
    assert flow(good) == []
    later = (
        'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" \\\n'
        " && PYTORCH_ROCM_ARCH=gfx942 python3 setup.py --variant rocm bdist_wheel\n"
    )
    (finding,) = flow(later)
    assert (finding.rule, finding.line, finding.col) == ("deepep-arch-source", 6, 5) and "'gfx942'" in finding.message
    assert "stage build_deepep, Dockerfile.rocm:6" in finding.message


def test_offload_arch_one_flag_per_arch_is_fine_one_flag_for_two_is_not():
    ok = 'ENV CXXFLAGS="--offload-arch=gfx942 --offload-arch=gfx950"\n'
    setup = 'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" && python3 setup.py bdist_wheel\n'
    assert flow(ok + setup) == []
    (finding,) = flow('ENV CXXFLAGS="--offload-arch=gfx942;gfx950"\n' + setup)
    assert finding.rule == "offload-arch-multi" and "2 archs in one --offload-arch" in finding.message


@pytest.mark.parametrize("columns", [80, 40])
def test_live_progress_never_fills_the_last_column(columns):
    out = io.StringIO()
    parser = ProgressParser()
    parser.feed("#7 [ci_base 3/9] RUN " + "x" * 200)
    Progress(True, out, columns=columns)("", parser)
    visible = out.getvalue().replace("\r\x1b[K", "")
    assert len(visible) == columns - 1 and visible.startswith("[")


def test_url_credentials_and_upper_case_references():
    assert url_credentials("https://oauth2:tok@github.com/ROCm/DeepEP.git")
    assert url_credentials("https://ghp_token@github.com/x") and url_credentials("ssh://git:pw@host/x")
    assert not url_credentials("ssh://git@github.com/x") and not url_credentials("git@github.com:ROCm/DeepEP")
    assert without_url_credentials("https://a:b@h/x") == "https://***@h/x"
    assert image_ref("--tag", "localhost:5000/x:UPPER-tag") and image_ref("--tag", "Registry.IO/x")
    with pytest.raises(UsageError, match="upper case"):
        image_ref("--tag", "UPPER:tag")


def test_settings_reads_the_checkout_without_the_image_area():
    code = (
        "import sys; from rocmci import settings; "
        "s = settings.resolve(flags={'vllm_src': sys.argv[1]}); assert s.deepep_ref; "
        "print(sorted(m for m in sys.modules if m.startswith('rocmci.image')))"
    )
    stand_in = Path(__file__).parents[1] / "data" / "vllm-standin"
    done = subprocess.run([sys.executable, "-c", code, str(stand_in)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
