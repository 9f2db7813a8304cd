"""Image promises pinned to exact outputs, written against mutants that survived `nox -s mutants` (issue 24).

Each test names the promise it guards. The arch-flow rules are run on small Dockerfiles shaped like vLLM's
(stage and ARG names as in ../shared/fixtures/vllm/docker/Dockerfile.rocm) so that every finding's line,
column, message and fix can be asserted whole; the plan tests use vLLM's real docker/ folder; the build
tests use the real engine's image store for labels and a stand-in docker client (a script on the engine's
client setting, the process boundary) for what a build prints and how it exits.
"""

from __future__ import annotations

import io
import stat
from collections import deque
from pathlib import Path

import pytest

from rocmci import labels as label
from rocmci.errors import BuildError, PreflightError, UsageError
from rocmci.findings import Finding
from rocmci.image import base, retarget
from rocmci.image import build as buildmod
from rocmci.image import check as checkmod
from rocmci.image import plan as planmod
from rocmci.image import vllm_dockerfile as vd
from rocmci.image.build import ProgressParser
from rocmci.image.plan import INPUT_HASH_LABEL, BaseFacts, BuildStep, plan_build
from tests.unit.test_image_plan import request as build_request

FILE = "Dockerfile.rocm"
FIX_ROCSHMEM = 'pass -DGPU_TARGETS="${DEEPEP_ROCM_ARCH}" to rocSHMEM\'s all_backends'
FIX_DEEPEP = (
    'export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" before DeepEP\'s setup.py (it reads only PYTORCH_ROCM_ARCH)'
)
SUPPORTED = (
    "DeepEP builds only gfx942 (MI300A/MI300X/MI325X), gfx950 (MI350X/MI355X) (source: ROCm/DeepEP's setup.py, "
    "main of May 2026 (allowed_arch, and the list it builds when PYTORCH_ROCM_ARCH is unset))"
)
# Lines 1-2: a global ARG and a first stage, so that no finding's line is 1 by accident.
PRE = "ARG BASE=scratch\nFROM ${BASE} AS base\n"
ROC = (
    'FROM base AS build_rocshmem\nARG DEEPEP_ROCM_ARCH="gfx942;gfx950"\n'
    'RUN bash all_backends -DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"\n'
)  # lines 3-5
DEP = (
    "FROM build_rocshmem AS build_deepep\n"
    'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" && python3 setup.py bdist_wheel\n'
)


def parse(text: str) -> vd.VllmDockerfile:
    return vd.parse(text, path=Path("/vllm") / FILE, display=FILE)


def found(text: str, archs=("gfx942", "gfx950"), origin="--arch", vllm=None, vllm_origin=None, where=None):
    request = checkmod.ArchRequest(archs, origin, vllm, vllm_origin, where)
    return [tuple(f) for f in checkmod.check(parse(text), request)]


def err(line: int, col: int, rule: str, message: str, fix: str, file: str = FILE) -> tuple:
    return (file, line, col, rule, "error", message, None, fix)


# --- rocshmem-gpu-targets: the list must reach rocSHMEM's all_backends build --------------------------------


def test_a_whole_flow_has_no_finding():
    """The fixed shape vLLM's file is meant to have: no rule fires."""
    assert found(PRE + ROC + DEP) == []


def _where(findings) -> list[tuple]:
    return [(f[1], f[2], f[3]) for f in findings]


def test_rocshmem_rule_every_way_the_list_can_miss_rocshmem():
    """Each way rocSHMEM is built without the requested list is one finding at the place to change, with its fix;
    the list is judged by the value that reaches all_backends' -DGPU_TARGETS, not by how it is written."""
    never = PRE + ROC.replace('RUN bash all_backends -DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', "RUN make") + DEP
    assert found(never) == [err(
        3, 1, "rocshmem-gpu-targets",
        "ci_base builds no rocSHMEM's all_backends: the stages it installs (base, build_rocshmem, build_deepep) "
        "never run it", "restore the build step",
    )]  # fmt: skip
    without = PRE + ROC.replace('-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', "-DCMAKE=1") + DEP
    assert found(without) == [err(
        5, 5, "rocshmem-gpu-targets",
        "rocSHMEM is built without -DGPU_TARGETS (stage build_rocshmem): the arch list never reaches it", FIX_ROCSHMEM,
    )]  # fmt: skip
    for written, value in (("'gfx942'", "gfx942"), ('"gfx942"', "gfx942"), ("gfx90a", "gfx90a")):
        hard = PRE + ROC.replace('-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', f"-DGPU_TARGETS={written}") + DEP
        assert found(hard) == [err(
            5, 23, "rocshmem-gpu-targets",
            f"rocSHMEM's all_backends (stage build_rocshmem, {FILE}:5) builds for {value}, not the requested "
            f"gfx942;gfx950: -DGPU_TARGETS is {value!r} (from {FILE}:5)", FIX_ROCSHMEM,
        )], written  # fmt: skip
    # The requested list itself is right: a hard-coded copy of it builds what was asked.
    same = PRE + ROC.replace('-DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', '-DGPU_TARGETS="gfx942;gfx950"') + DEP
    assert found(same) == []
    undeclared = PRE + ROC.replace('ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"', "ARG OTHER=1") + DEP
    assert found(undeclared) == [err(
        5, 23, "rocshmem-gpu-targets",
        f"rocSHMEM's -DGPU_TARGETS is empty (from {FILE}:5, stage build_rocshmem): DEEPEP_ROCM_ARCH is not set "
        "there, and the arch list never reaches rocSHMEM", FIX_ROCSHMEM,
    )]  # fmt: skip
    # Declared globally and re-declared in a stage build_rocshmem is built FROM: in scope (BuildKit keeps it).
    roc = ROC.replace('ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"', "ARG OTHER=1")
    inherited = PRE.replace("AS base\n", "AS base\nARG DEEPEP_ROCM_ARCH\n") + roc + DEP
    assert found(inherited) == [] and found(inherited, archs=("gfx950",)) == []


def test_quotes_are_taken_off_a_whole_pair_only():
    """A value is unquoted only when it is a matched pair: the message shows the value the build gets."""
    assert checkmod._unquote('"a;b"') == "a;b" and checkmod._unquote("'a'") == "a"
    assert checkmod._unquote('"a\'') == '"a\'' and checkmod._unquote('"') == '"' and checkmod._unquote("") == ""
    assert checkmod._unquote('""') == "" and checkmod._unquote("abc") == "abc" and checkmod._unquote("xax") == "xax"
    assert checkmod._unquote("XabX") == "XabX" and checkmod._unquote("`a`") == "`a`"


# --- deepep-arch-source: DeepEP's setup.py must see the same list -------------------------------------------


def _deepep(line: int, col: int, got: str, want: str, shown: str, src: str = "", setup: int = 0) -> tuple:
    return err(
        line, col, "deepep-arch-source",
        f"DeepEP's setup.py (stage build_deepep, {FILE}:{setup or line}) builds for {got}, not the requested "
        f"{want}: PYTORCH_ROCM_ARCH is {shown} (from {src or f'{FILE}:{line}'})",
        FIX_DEEPEP,
    )  # fmt: skip


EMPTY = "empty (setup.py's default gfx942;gfx950)"


def test_deepep_rule_every_way_the_list_can_miss_deepep():
    """No setup.py, PYTORCH_ROCM_ARCH unset or set after it: each a finding where to fix it, with the export."""
    assert found(PRE + ROC) == [err(
        1, 1, "deepep-arch-source",
        "ci_base builds no DeepEP's setup.py: the stages it installs (base, build_rocshmem) never run it",
        "restore the build step",
    )]  # fmt: skip
    assert _where(found(PRE + ROC + "FROM build_rocshmem AS build_deepep\nRUN make\n")) == [
        (6, 1, "deepep-arch-source")
    ]
    # Unset: DeepEP's setup.py builds its own default, gfx942;gfx950: right for that list, wrong for another.
    unset = PRE + ROC + "FROM build_rocshmem AS build_deepep\nRUN cd DeepEP \\\n && python3 setup.py bdist_wheel\n"
    assert found(unset) == []
    assert found(unset, archs=("gfx950",)) == [_deepep(8, 5, "gfx942;gfx950", "gfx950", EMPTY, f"{FILE}:8")]
    # An assignment after setup.py does not reach it.
    after = unset.replace("bdist_wheel\n", "bdist_wheel && export PYTORCH_ROCM_ARCH=gfx950\n")
    assert found(after, archs=("gfx950",)) == [_deepep(8, 5, "gfx942;gfx950", "gfx950", EMPTY, f"{FILE}:8")]
    # `setup.py clean` builds nothing; the export before the building call is what counts.
    twice = unset.replace("setup.py bdist_wheel", "setup.py clean && export PYTORCH_ROCM_ARCH=gfx942 && python3 "
                          "setup.py bdist_wheel")  # fmt: skip
    assert found(twice) == [_deepep(8, 38, "gfx942", "gfx942;gfx950", "'gfx942'")]


def test_the_env_that_sets_pytorch_rocm_arch_is_the_nearest_one():
    """Without an assignment in the RUN, the last ENV of the stage or the one it is built FROM is what setup.py
    sees; the finding is at that ENV's variable."""
    setup = "RUN python3 setup.py bdist_wheel\n"
    deepep = "FROM build_rocshmem AS build_deepep\n"
    bad_env = PRE + ROC + deepep + "ENV PYTORCH_ROCM_ARCH=gfx950   \n" + setup
    assert found(bad_env) == [_deepep(7, 5, "gfx950", "gfx942;gfx950", "'gfx950'", setup=8)]
    assert found(bad_env, archs=("gfx950",)) == []  # it is the list asked for
    last_wins = PRE + ROC + deepep + "ENV PYTORCH_ROCM_ARCH=gfx950\nENV PYTORCH_ROCM_ARCH=${DEEPEP_ROCM_ARCH}\n" + setup
    assert found(last_wins) == [] and found(last_wins, archs=("gfx942",)) == []
    last_bad = PRE + ROC + deepep + "ENV PYTORCH_ROCM_ARCH=${DEEPEP_ROCM_ARCH}\nENV A=1 PYTORCH_ROCM_ARCH=gfx942\n"
    last_bad += setup
    assert found(last_bad) == [_deepep(8, 9, "gfx942", "gfx942;gfx950", "'gfx942'", setup=9)]
    in_parent = PRE + ROC.replace("RUN bash", "ENV PYTORCH_ROCM_ARCH=gfx942\nRUN bash") + deepep + setup
    assert found(in_parent) == [_deepep(5, 5, "gfx942", "gfx942;gfx950", "'gfx942'", setup=8)]
    nearest = PRE + ROC.replace("RUN bash", "ENV PYTORCH_ROCM_ARCH=gfx942\nRUN bash") + deepep
    assert found(nearest + "ENV PYTORCH_ROCM_ARCH=${DEEPEP_ROCM_ARCH}\n" + setup, archs=("gfx950",)) == []
    # LABEL lines naming it are no ENV; a name that only ends in PYTORCH_ROCM_ARCH is another variable.
    not_env = PRE + ROC + deepep + "LABEL PYTORCH_ROCM_ARCH=gfx942\nENV MY_PYTORCH_ROCM_ARCH=gfx942\n" + setup
    assert found(not_env, archs=("gfx950",)) == [_deepep(9, 5, "gfx942;gfx950", "gfx950", EMPTY, f"{FILE}:9")]


def test_the_env_value_shown_is_the_one_value_it_sets():
    """An ENV's value is that variable's value only, unquoted; OLD_PYTORCH_ROCM_ARCH is another variable; the
    legacy `ENV NAME value` form and a later pair on the same line count as Docker reads them."""
    deepep = "FROM build_rocshmem AS build_deepep\n"
    setup = "RUN python3 setup.py bdist_wheel\n"
    cases = [
        ("ENV PYTORCH_ROCM_ARCH=gfx942 OTHER=1", 5, 8),
        ("ENV OLD_PYTORCH_ROCM_ARCH=gfx950 PYTORCH_ROCM_ARCH=gfx942", 34, 8),
        ("ENV PYTORCH_ROCM_ARCH gfx942", 5, 8),
        ("ENV PYTORCH_ROCM_ARCH=${DEEPEP_ROCM_ARCH} PYTORCH_ROCM_ARCH=gfx942", 5, 8),
        ("ENV PYTORCH_ROCM_\\\nARCH=gfx942", 1, 9),  # the name split over lines: the ENV's first line
    ]
    for env, col, setup_line in cases:
        assert found(PRE + ROC + deepep + env + "\n" + setup, archs=("gfx950",)) == [
            _deepep(7, col, "gfx942", "gfx950", "'gfx942'", setup=setup_line)
        ], env
    assert found(PRE + ROC + deepep + 'ENV PYTORCH_ROCM_ARCH="gfx942;gfx950"\n' + setup) == []
    for env in ("ENV OLD_PYTORCH_ROCM_ARCH=gfx950 \\\n PYTORCH_ROCM_ARCH=${DEEPEP_ROCM_ARCH}",
                "ENV PYTORCH_ROCM_ARCH=gfx942 PYTORCH_ROCM_ARCH=${DEEPEP_ROCM_ARCH}"):  # fmt: skip
        assert found(PRE + ROC + deepep + env + "\n" + setup, archs=("gfx950",)) == [], env


def test_every_assignment_before_setup_py_is_read_and_the_one_setup_py_sees_is_shown():
    """`export ...='gfx942'` then `PYTORCH_ROCM_ARCH=gfx950 python3 setup.py` builds gfx950 only."""
    deepep = "FROM build_rocshmem AS build_deepep\n"
    two_bad = PRE + ROC + deepep + "RUN export PYTORCH_ROCM_ARCH='gfx942' && PYTORCH_ROCM_ARCH=gfx950 python3 "
    two_bad += "setup.py\n"
    assert found(two_bad) == [_deepep(7, 42, "gfx950", "gfx942;gfx950", "'gfx950'")]
    both_good = (
        PRE + ROC + deepep + 'RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" '
        "&& PYTORCH_ROCM_ARCH=$DEEPEP_ROCM_ARCH python3 setup.py\n"
    )
    assert found(both_good) == [] and found(both_good, archs=("gfx950",)) == []
    # Built FROM a stage without the ARG: the list is empty there, DeepEP builds its default.
    orphan = both_good.replace("FROM build_rocshmem AS build_deepep", "FROM base AS build_deepep")
    assert found(orphan, archs=("gfx950",)) == [_deepep(7, 55, "gfx942;gfx950", "gfx950", EMPTY, f"{FILE}:7")]


def test_the_deepep_finding_names_the_call_and_the_value_it_got():
    no_targets = PRE + ROC.replace(' -DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"', "") + (
        "FROM build_rocshmem AS build_deepep\nRUN export PYTORCH_ROCM_ARCH=gfx950 && python3 setup.py\n"
    )
    assert found(no_targets)[1] == _deepep(7, 12, "gfx950", "gfx942;gfx950", "'gfx950'")


# --- the arch lists themselves -------------------------------------------------------------------------------


def test_an_unsupported_arch_is_named_with_its_gpus_where_the_list_is_declared():
    """deepep-unsupported-arch: at the ARG giving DEEPEP_ROCM_ARCH its default, else build_rocshmem, else line 1."""
    whole = PRE + ROC + DEP
    assert found(whole, archs=("gfx90a", "gfx942", "gfx1100"), origin="ROCMCI_ARCH (env)") == [err(
        4, 1, "deepep-unsupported-arch",
        "ROCMCI_ARCH (env) asks DeepEP for gfx90a (MI210/MI250/MI250X), gfx1100 (Radeon RX 7900 (RDNA3)); "
        + SUPPORTED, "drop gfx90a, gfx1100 from the DeepEP list",
    )]  # fmt: skip
    no_default = whole.replace('ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"', "ARG DEEPEP_ROCM_ARCH")
    message = "--arch asks DeepEP for gfx90a (MI210/MI250/MI250X); " + SUPPORTED
    assert found(no_default, archs=("gfx90a",)) == [
        err(3, 1, "deepep-unsupported-arch", message, "drop gfx90a from the DeepEP list")
    ]
    nothing = "FROM scratch AS build_deepep\nRUN export PYTORCH_ROCM_ARCH=${DEEPEP_ROCM_ARCH} && python3 setup.py\n"
    assert err(1, 1, "deepep-unsupported-arch", message, "drop gfx90a from the DeepEP list") in found(
        nothing, archs=("gfx90a",)
    )


def test_vllms_list_must_cover_deepeps_at_the_place_it_is_written():
    """vllm-arch-superset: at --vllm-arch's source when given, else vLLM's ARG, else line 1 of the file."""
    whole = PRE.replace("AS base\n", "AS base\nARG ARG_PYTORCH_ROCM_ARCH=gfx942\n") + ROC + DEP
    assert found(whole, vllm=("gfx942", "gfx90a"), vllm_origin="--vllm-arch") == [err(
        3, 1, "vllm-arch-superset",
        "vLLM is built for gfx942;gfx90a (--vllm-arch), which lacks gfx950 that DeepEP is built for: "
        "vLLM's own kernels would be missing there",
        "add gfx950 to vLLM's list (--vllm-arch, or PYTORCH_ROCM_ARCH in docker/docker-bake-rocm.hcl)",
    )]  # fmt: skip
    assert found(PRE + ROC + DEP, vllm=("gfx90a",), vllm_origin="bake") == [err(
        1, 1, "vllm-arch-superset",
        "vLLM is built for gfx90a (bake), which lacks gfx942, gfx950 that DeepEP is built for: "
        "vLLM's own kernels would be missing there",
        "add gfx942, gfx950 to vLLM's list (--vllm-arch, or PYTORCH_ROCM_ARCH in docker/docker-bake-rocm.hcl)",
    )]  # fmt: skip
    at = ("docker/docker-bake-rocm.hcl", 23)
    assert found(PRE + ROC + DEP, vllm=("gfx950",), vllm_origin="bake", where=at) == [err(
        23, 1, "vllm-arch-superset",
        "vLLM is built for gfx950 (bake), which lacks gfx942 that DeepEP is built for: "
        "vLLM's own kernels would be missing there",
        "add gfx942 to vLLM's list (--vllm-arch, or PYTORCH_ROCM_ARCH in docker/docker-bake-rocm.hcl)",
        file="docker/docker-bake-rocm.hcl",
    )]  # fmt: skip
    assert found(PRE + ROC + DEP, vllm=("gfx950", "gfx942", "gfx90a"), vllm_origin="bake", where=at) == []


def test_one_offload_arch_flag_naming_several_archs_is_one_finding_per_variable():
    """offload-arch-multi: in RUN, ENV and ARG only; `;` or `,` separate archs; one finding per variable."""
    text = (
        'FROM scratch AS a\nENV CXXFLAGS="--offload-arch=gfx942,gfx950 --offload-arch=gfx90a;gfx942" '
        "HIPCC_FLAGS='--offload-arch gfx942;gfx950'\n"
        'LABEL CFLAGS="--offload-arch=gfx942;gfx950"\nARG MY_FLAGS_X=--offload-arch=gfx942;\n'
        "RUN export FLAGS=--offload-arch=gfx942;;gfx950 && make\nCOPY CFLAGS=--offload-arch=a;b /x\n"
    )
    request = checkmod.ArchRequest(("gfx942",), "--arch")

    def multi(name: str, line: int, col: int, archs: str) -> tuple:
        return err(
            line, col, "offload-arch-multi",
            f"{name} names {len(archs.split(', '))} archs in one --offload-arch ({archs}); "
            "an --offload-arch flag takes one arch",
            f"drop --offload-arch from {name}: DeepEP's setup.py adds one per arch of PYTORCH_ROCM_ARCH; "
            "set the list with DEEPEP_ROCM_ARCH",
        )  # fmt: skip

    assert [tuple(f) for f in checkmod.offload_arch(parse(text), request)] == [
        multi("CXXFLAGS", 2, 5, "gfx942, gfx950"),
        multi("HIPCC_FLAGS", 2, 74, "gfx942, gfx950"),
        multi("FLAGS", 5, 12, "gfx942, gfx950"),
    ]
    # A one-arch flag before the wrong one does not hide it.
    later = 'FROM scratch AS a\nENV CFLAGS="--offload-arch=gfx942 --offload-arch=gfx942,gfx950"\n'
    assert [tuple(f) for f in checkmod.offload_arch(parse(later), request)] == [
        multi("CFLAGS", 2, 5, "gfx942, gfx950")
    ]
    three = "FROM scratch AS a\nARG FLAGS=--offload-arch=gfx90a,gfx942,gfx950\n"
    assert [tuple(f) for f in checkmod.offload_arch(parse(three), request)] == [
        multi("FLAGS", 2, 5, "gfx90a, gfx942, gfx950")
    ]


def test_findings_come_sorted_and_render_with_their_fix():
    """check() lists findings by place; render() is what image.build prints when it refuses."""
    text = 'FROM scratch AS a\nENV CXXFLAGS="--offload-arch=gfx942;gfx950"\n' + PRE + ROC + DEP
    findings = checkmod.check(parse(text), checkmod.ArchRequest(("gfx942",), "--arch", ("gfx950",), "bake"))
    assert [(f.line, f.rule) for f in findings] == [(1, "vllm-arch-superset"), (2, "offload-arch-multi")]
    assert checkmod.render(findings[:1]) == (
        "Dockerfile.rocm:1:1: error [vllm-arch-superset] vLLM is built for gfx950 (bake), which lacks gfx942 that "
        "DeepEP is built for: vLLM's own kernels would be missing there\n"
        "    fix: add gfx942 to vLLM's list (--vllm-arch, or PYTORCH_ROCM_ARCH in docker/docker-bake-rocm.hcl)"
    )
    two = [Finding("f", 1, 1, "r", "error", "m", fix="x"), Finding("f", 2, 1, "r", "error", "n", fix="y")]
    assert checkmod.render(two) == "f:1:1: error [r] m\n    fix: x\nf:2:1: error [r] n\n    fix: y"


def test_the_summary_line_of_a_whole_flow():
    """What image.check prints when the flow is whole, with vLLM's list when one was given."""
    df = parse(PRE + ROC + DEP)
    assert checkmod.summary(df, checkmod.ArchRequest(("gfx942",), "--arch", ("gfx942", "gfx950"), "bake")) == (
        "Dockerfile.rocm: arch flow whole: DEEPEP_ROCM_ARCH=gfx942 reaches rocSHMEM (-DGPU_TARGETS) and DeepEP "
        "(PYTORCH_ROCM_ARCH); vLLM's gfx942;gfx950 covers it"
    )
    assert checkmod.summary(df, checkmod.ArchRequest(("gfx942", "gfx950"), "--arch")) == (
        "Dockerfile.rocm: arch flow whole: DEEPEP_ROCM_ARCH=gfx942;gfx950 reaches rocSHMEM (-DGPU_TARGETS) and "
        "DeepEP (PYTORCH_ROCM_ARCH)"
    )


# --- plan: the commands, tags, labels and hashes a build is planned with -------------------------------------


def tree_digest(checkout: Path, sources: tuple[str, ...]) -> str:
    """plan_build's `digest` input: which files a step copies, named rather than hashed (the plan is pure)."""
    return "tree:" + ",".join(sources)


@pytest.fixture
def tree(vllm_docker_tree) -> Path:
    return vllm_docker_tree


def plan(tree: Path, **given) -> planmod.BuildPlan:
    return plan_build(build_request(tree, **given), tree_digest)


def test_a_step_is_one_docker_build_argv_in_a_fixed_order():
    """BuildStep.argv: --file, --target (the step's, an explicit stage, or none), --tag, args, labels, network,
    --load, plain progress, the context last; push_argv pushes the tag."""
    step = BuildStep(
        target="ci_base", tag="r/x:t", dockerfile=Path("/v/docker/Dockerfile.rocm"), context=Path("/v"),
        build_args={"A": "1", "B": "x y"}, labels={"l.one": "1"}, input_hash="h", network="host", push=True,
        force=False, load=True,
    )  # fmt: skip
    assert step.argv("/usr/bin/docker") == [
        "/usr/bin/docker", "build", "--file", "/v/docker/Dockerfile.rocm", "--target", "ci_base", "--tag", "r/x:t",
        "--build-arg", "A=1", "--build-arg", "B=x y", "--label", "l.one=1", "--network", "host", "--load",
        "--progress", "plain", "/v",
    ]  # fmt: skip
    last_stage = BuildStep(**{**step.__dict__, "stage": None, "network": None, "load": False, "build_args": {}})
    assert last_stage.argv("docker") == [
        "docker", "build", "--file", "/v/docker/Dockerfile.rocm", "--tag", "r/x:t", "--label", "l.one=1",
        "--progress", "plain", "/v",
    ]  # fmt: skip
    other = BuildStep(**{**step.__dict__, "stage": "final", "labels": {}})
    assert other.argv("docker")[4:8] == ["--target", "final", "--tag", "r/x:t"]
    assert step.push_argv("docker") == ["docker", "push", "r/x:t"]


def test_a_tag_names_target_and_archs_and_fits_dockers_128_characters():
    """image_tag: vLLM's list is added only when it differs; a tag longer than Docker allows is cut at 128."""
    assert planmod.image_tag("r/x", "ci_base", ("gfx942",), ("gfx942",)) == "r/x:ci-base-gfx942"
    assert planmod.image_tag("r/x", "test", ("gfx942",), ()) == "r/x:test-gfx942"
    assert planmod.image_tag("r/x", "test", ("gfx942",), ("gfx950",)) == "r/x:test-gfx942-vllm-gfx950"
    many = tuple(f"gfx{n}" for n in range(1100, 1130))
    tag = planmod.image_tag("r/x", "test", ("gfx942",), many).split(":", 1)[1]
    assert len(tag) == 128 and tag == ("test-gfx942-vllm-" + "-".join(many))[:128]


def test_the_input_hash_covers_exactly_the_documented_fields_in_order():
    """input_hash: version, target, global ARG defaults, each stage's name, base and instructions, the sorted
    build args, the copied tree and the extra identity; 16 hex digits. A change here changes every image's key,
    so it is pinned field by field (HASH_VERSION is what to bump)."""
    import hashlib

    df = parse("ARG G=1\nARG H\nFROM scratch AS a\nRUN one\nFROM a AS b\nRUN two\n")
    expected = hashlib.sha256(
        b"rocmci-image-2\0target=b\0global:G=1\0global:H=None\0stage:a:scratch\0RUN one\0stage:b:a\0RUN two\0"
        b"arg:A=1\0arg:B=2\0tree:t\0extra"
    ).hexdigest()[:16]
    assert planmod.input_hash(df, df.stages, {"B": "2", "A": "1"}, "b", "t", "extra") == expected
    assert planmod.HASH_VERSION == "rocmci-image-2"


def test_the_planned_test_build_is_tiered_with_its_labels_args_and_notes(tree):
    """The default request: ci_base, then test on it through CI_BASE_IMAGE; labels say what is inside; ci_base is
    never pushed, test only when asked; the note says how ci_base is reused."""
    built = plan(tree, push=True, overrides={"DEEPEP_BRANCH": "abc"}, extra_args={"max_jobs": "8", "REMOTE_VLLM": "1"})
    ci, test = built.steps
    repo = "rocmci/vllm-rocm"
    ci_tag = f"{repo}:ci-base-gfx942-gfx950-vllm-gfx90a-gfx942-gfx950"
    args = {"REMOTE_VLLM": "1", "DEEPEP_BRANCH": "abc", "DEEPEP_ROCM_ARCH": "gfx942;gfx950",
            "ARG_PYTORCH_ROCM_ARCH": "gfx90a;gfx942;gfx950", "max_jobs": "8"}  # fmt: skip
    labels = {label.ARCH: "gfx942;gfx950", label.VLLM_ARCH: "gfx90a;gfx942;gfx950", "rocmci.deepep.ref": "0f63d3e9",
              label.VLLM_COMMIT: "abc", "org.opencontainers.image.revision": "abc"}  # fmt: skip
    assert (ci.target, ci.tag, ci.build_args, ci.push, ci.stage) == ("ci_base", ci_tag, args, False, "")
    assert ci.labels == {**labels, label.TARGET: "ci_base", INPUT_HASH_LABEL: ci.input_hash}
    assert (ci.dockerfile, ci.context, ci.network, ci.force, ci.load) == (
        tree / "docker/Dockerfile.rocm", tree, None, False, False
    )
    assert (test.target, test.tag, test.push) == ("test", f"{repo}:test-gfx942-gfx950-vllm-gfx90a-gfx942-gfx950", True)
    assert test.build_args == {**args, "CI_BASE_IMAGE": ci_tag}
    assert test.labels == {**labels, label.TARGET: "test", INPUT_HASH_LABEL: test.input_hash,
                           label.CI_BASE_IMAGE: ci_tag}  # fmt: skip
    assert built.tag == test.tag and built.notices == ()
    assert built.notes == (f"ci_base {ci_tag} is reused when its rocmci.input-hash label matches {ci.input_hash}",)
    assert len(ci.input_hash) == len(test.input_hash) == 16
    # test's hash follows ci_base's: a rebuilt ci_base is a new input to test.
    other = plan(tree, push=True, overrides={"DEEPEP_BRANCH": "abd"}, extra_args={"max_jobs": "8"}).steps
    assert other[0].input_hash != ci.input_hash and other[1].input_hash != test.input_hash


def test_network_and_load_and_a_given_tag_reach_the_steps(tree):
    ci, test = plan(tree, network="host", load=True, tag="me/mine:1").steps
    assert (ci.network, test.network, ci.load, test.load) == ("host", "host", True, True)
    assert test.tag == "me/mine:1" and ci.tag != "me/mine:1"
    (final,) = plan(tree, target="final", tag="me/final:1", push=True).steps
    assert (final.tag, final.push) == ("me/final:1", True)
    (final,) = plan(tree, target="final").steps
    assert (final.tag, final.push, final.stage) == ("rocmci/vllm-rocm:final", False, "")


def test_vllms_own_list_is_passed_only_when_given(tree):
    """Without --vllm-arch, ARG_PYTORCH_ROCM_ARCH keeps the file's default and the label is empty."""
    ci, test = plan(tree, vllm_archs=None).steps
    assert "ARG_PYTORCH_ROCM_ARCH" not in ci.build_args and ci.labels[label.VLLM_ARCH] == ""
    assert ci.tag == "rocmci/vllm-rocm:ci-base-gfx942-gfx950"


def test_a_given_ci_base_is_keyed_by_its_digest_when_known(tree):
    """--ci-base: test is built on it; its digest (else its name) is test's identity, so a moved tag rebuilds."""
    given = plan(tree, ci_base_image="rocm/vllm-dev:ci_base")
    (test,) = given.steps
    assert test.labels[label.CI_BASE_IMAGE] == "rocm/vllm-dev:ci_base" and test.push is False
    assert given.notes == ("test is built on the given ci_base rocm/vllm-dev:ci_base; ci_base is not built",)
    digest_a = plan(tree, ci_base_image="rocm/vllm-dev:ci_base", ci_base_digest="sha256:" + "a" * 64).steps[0]
    digest_b = plan(tree, ci_base_image="rocm/vllm-dev:ci_base", ci_base_digest="sha256:" + "b" * 64).steps[0]
    other_name = plan(tree, ci_base_image="rocm/vllm-dev:ci_base2").steps[0]
    assert len({test.input_hash, digest_a.input_hash, digest_b.input_hash, other_name.input_hash}) == 4
    # The same digest under another name is the same input (the identity is the digest).
    renamed = plan(tree, ci_base_image="mirror/ci:x", ci_base_digest="sha256:" + "a" * 64).steps[0]
    assert renamed.build_args["CI_BASE_IMAGE"] == "mirror/ci:x"
    assert {k: v for k, v in renamed.build_args.items() if k != "CI_BASE_IMAGE"} == {
        k: v for k, v in digest_a.build_args.items() if k != "CI_BASE_IMAGE"
    }


def test_targets_and_stages_are_checked_before_planning(tree):
    """An unknown target, or a file without the stages a target needs, is a usage error naming them."""
    with pytest.raises(UsageError) as bad:
        plan(tree, target="everything")
    assert (bad.value.message, bad.value.hint) == (
        "unknown build target 'everything'", "choose one of base, ci_base, test, final"
    )
    path = tree / "docker" / "Dockerfile.rocm"
    path.write_text(path.read_text().replace(" AS ci_base", " AS ci_base_renamed"))
    for target in ("test", "ci_base"):
        with pytest.raises(UsageError) as missing:
            plan(tree, target=target)
        assert (missing.value.message, missing.value.hint) == (
            "docker/Dockerfile.rocm has no stage 'ci_base'", "is --vllm-src a vLLM checkout?"
        )
    final = plan(tree, target="final", base=BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, None, _tier(tree)))
    assert [s.target for s in final.steps] == ["final"]  # final needs no ci_base stage
    assert final.notes == () and final.notices == (
        "BASE_IMAGE rocm/vllm-dev:base carries no vllm.rocm_base.content_hash label, so whether it matches "
        "docker/Dockerfile.rocm_base is unknown; `--target base` builds the base from that file",
    )
    with pytest.raises(UsageError) as base_missing:
        plan(tree, target="base")
    assert (base_missing.value.message, base_missing.value.hint) == (
        f"{tree} holds no docker/Dockerfile.rocm_base", "--target base builds it"
    )


def test_only_targets_that_build_deepep_refuse_an_arch_deepep_cannot_build(tree):
    """final builds no DeepEP: gfx90a plans; ci_base and test build it: gfx90a is refused."""
    (final,) = plan(tree, target="final", archs=("gfx90a",)).steps
    assert vd.ARCH_ARG not in final.build_args and label.ARCH not in final.labels
    for target in ("ci_base", "test"):
        with pytest.raises(UsageError, match="cannot target gfx90a"):
            plan(tree, target=target, archs=("gfx90a",))
    (ci,) = plan(tree, target="ci_base").steps
    assert ci.build_args[vd.ARCH_ARG] == "gfx942;gfx950" and ci.labels[label.ARCH] == "gfx942;gfx950"
    assert planmod.builds_deepep(vd.load(tree), "ci_base", {"REMOTE_VLLM": "0"})
    assert not planmod.builds_deepep(vd.load(tree), "final", {"REMOTE_VLLM": "0"})


def expected_hash(tree: Path, target: str, args: dict[str, str], extra: str) -> str:
    """What a step's input hash must be: input_hash over the stages it builds, the files they copy, and `extra`
    (BASE_IMAGE's identity, then the ci_base identity for test)."""
    from rocmci.image import context

    df = vd.load(tree)
    stages = df.reachable(target, args)
    return planmod.input_hash(df, stages, args, target, tree_digest(tree, context.sources(df, stages,
                              {**df.defaults(), **args})), extra)  # fmt: skip


DIGEST_1 = "sha256:" + "1" * 64
DIGEST_2 = "sha256:" + "2" * 64


def test_base_images_identity_keys_both_tiers(tree):
    """BASE_IMAGE is keyed by its digest (pinned when it is a registry digest); unresolved (a dry run without an
    engine) and tag-only (a dry run that could not resolve it) are keys of their own, and say so in no label."""
    cases = {
        None: ("", "base:unresolved", {}),
        BaseFacts("rocm/vllm-dev:base", None, False, None, tag_only=True): (
            "rocm/vllm-dev:base", "base:tag:rocm/vllm-dev:base", {}),
        BaseFacts("rocm/vllm-dev:base", DIGEST_1, False, None): (
            "rocm/vllm-dev:base", f"base:{DIGEST_1}", {label.BASE_IMAGE_DIGEST: DIGEST_1}),
        BaseFacts("rocm/vllm-dev:base", DIGEST_1, True, None): (
            f"rocm/vllm-dev:base@{DIGEST_1}", f"base:{DIGEST_1}", {label.BASE_IMAGE_DIGEST: DIGEST_1}),
    }  # fmt: skip
    for facts, (ref, identity, base_labels) in cases.items():
        ci, test = plan(tree, base=facts).steps
        args = {"REMOTE_VLLM": "0", **({"BASE_IMAGE": ref} if ref else {}), "DEEPEP_ROCM_ARCH": "gfx942;gfx950",
                "ARG_PYTORCH_ROCM_ARCH": "gfx90a;gfx942;gfx950"}  # fmt: skip
        assert ci.build_args == args, facts
        assert ci.input_hash == expected_hash(tree, "ci_base", args, f"{identity}\0"), facts
        test_args = {**args, "CI_BASE_IMAGE": ci.tag}
        assert test.input_hash == expected_hash(tree, "test", test_args, f"{identity}\0built:{ci.input_hash}")
        assert {k: v for k, v in ci.labels.items() if k == label.BASE_IMAGE_DIGEST} == base_labels
    given = plan(tree, ci_base_image="c/i:1", ci_base_digest=DIGEST_2).steps[0]
    args = {"REMOTE_VLLM": "0", "DEEPEP_ROCM_ARCH": "gfx942;gfx950", "ARG_PYTORCH_ROCM_ARCH": "gfx90a;gfx942;gfx950",
            "CI_BASE_IMAGE": "c/i:1"}  # fmt: skip
    assert given.input_hash == expected_hash(tree, "test", args, f"base:unresolved\0given:{DIGEST_2}")
    named = plan(tree, ci_base_image="c/i:1").steps[0]
    assert named.input_hash == expected_hash(tree, "test", args, "base:unresolved\0given:c/i:1")


def test_a_base_image_that_is_not_on_the_engine_is_refused():
    """A tag alone could key reuse on an image built on another base: refused, with vLLM's own words as hint."""
    with pytest.raises(PreflightError) as refused:
        planmod._base_identity(BaseFacts("rocm/vllm-dev:base", None, False, None))
    assert refused.value.message == (
        "BASE_IMAGE rocm/vllm-dev:base is not on this engine, so its tag is all rocmci knows: a tag can move, "
        "and an input hash on it could reuse an image built on another base"
    )
    assert refused.value.hint == planmod.MUTABLE_HINT and planmod.MUTABLE_HINT.startswith(
        'rocmci keys reuse on content, as vLLM\'s ci-bake-rocm.sh does ("Refusing to compute content-addressed '
        'cache keys from a mutable tag"): pull it first (--pull), or pin it as NAME@sha256:...'
    )


def _tier(tree: Path, digest: str | None = DIGEST_1, content: str | None = "c" * 64) -> base.BaseTier:
    return base.BaseTier(tree / "docker/Dockerfile.rocm_base", "rocm/dev:7", digest, True, content, "f" * 64,
                         {"PYTORCH_ROCM_ARCH": "gfx942"})  # fmt: skip


def test_the_base_tier_is_built_as_refresh_base_image_sh_builds_it(tree):
    """BASE_IMAGE built from another Dockerfile.rocm_base: base first (vLLM's labels, the last stage, the upstream
    image digest-pinned), ci_base and test on it, keyed by the base's content hash; the notice says why."""
    facts = BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, "d" * 64, _tier(tree))
    built = plan(tree, base=facts, rocm_fixes=("ROCm/x#1",), push=True, force=True, network="host", load=True)
    first, ci, test = built.steps
    assert (first.target, first.tag, first.stage, first.push, first.force, first.network, first.load) == (
        "base", "rocmci/vllm-rocm:base-cccccccccccc", None, False, True, "host", True
    )
    assert (first.dockerfile, first.context, first.input_hash) == (tree / "docker/Dockerfile.rocm_base", tree, "c" * 16)
    assert first.build_args == {"BASE_IMAGE": f"rocm/dev:7@{DIGEST_1}", "USE_SCCACHE": "0"}
    assert first.labels == {
        "org.opencontainers.image.revision": "abc", "vllm.rocm_base.metadata_version": "1",
        "vllm.rocm_base.content_hash": "c" * 64, "vllm.rocm_base.content_files_hash": "f" * 64,
        "vllm.rocm_base.dockerfile": "docker/Dockerfile.rocm_base", "vllm.rocm_base.git_commit": "abc",
        "vllm.rocm_base.base_image": "rocm/dev:7", "vllm.rocm_base.base_image_digest": DIGEST_1,
        "vllm.rocm_base.pytorch_rocm_arch": "gfx942", label.ROCM_FIXES: "ROCm/x#1", label.TARGET: "base",
        INPUT_HASH_LABEL: "c" * 16,
    }  # fmt: skip
    args = {"REMOTE_VLLM": "0", "BASE_IMAGE": first.tag, "DEEPEP_ROCM_ARCH": "gfx942;gfx950",
            "ARG_PYTORCH_ROCM_ARCH": "gfx90a;gfx942;gfx950"}  # fmt: skip
    assert ci.build_args == args and label.BASE_IMAGE_DIGEST not in ci.labels
    assert ci.labels[label.ROCM_FIXES] == test.labels[label.ROCM_FIXES] == "ROCm/x#1"
    assert ci.input_hash == expected_hash(tree, "ci_base", args, f"base:built:{'c' * 64}\0")
    assert built.notices == (
        "BASE_IMAGE rocm/vllm-dev:base was built from another docker/Dockerfile.rocm_base "
        "(vllm.rocm_base.content_hash dddddddddddd, the checkout's is cccccccccccc): the base tier is built first "
        "as rocmci/vllm-rocm:base-cccccccccccc, then ci_base on it",
    )
    # The base's own hash, not the old BASE_IMAGE's digest, keys what is built on it.
    moved = BaseFacts("rocm/vllm-dev:base", "sha256:" + "3" * 64, True, "e" * 64, _tier(tree))
    assert [s.input_hash for s in plan(tree, base=moved).steps] == [first.input_hash, ci.input_hash, test.input_hash]
    other = BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, "d" * 64, _tier(tree, content="9" * 64))
    assert plan(tree, base=other).steps[1].input_hash != ci.input_hash


def test_the_base_target_alone_and_its_refusals(tree):
    """--target base: one step, pushed only when asked and tagged by the user; no content hash is no build."""
    facts = BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, None, _tier(tree))
    (only,) = plan(tree, target="base", base=facts, tag="me/base:1", push=True).steps
    assert (only.tag, only.push) == ("me/base:1", True)
    (untagged,) = plan(tree, target="base", base=facts, push=True).steps
    assert (untagged.tag, untagged.push) == ("rocmci/vllm-rocm:base-cccccccccccc", False)
    assert plan(tree, target="base", base=facts, push=False, tag="me/base:1").steps[0].push is False
    for tier in (_tier(tree, digest=None, content=None), _tier(tree, content=None), _tier(tree, digest=None)):
        with pytest.raises(PreflightError) as refused:
            plan(tree, target="base", base=BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, None, tier))
        assert refused.value.message == (
            "the base tier's BASE_IMAGE rocm/dev:7 (docker/Dockerfile.rocm_base) is not on this engine; "
            "its content hash needs the image's digest"
        )
        assert refused.value.hint == planmod.MUTABLE_HINT
    with pytest.raises(UsageError, match="holds no docker/Dockerfile.rocm_base"):
        plan(tree, target="base", base=BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, None, None))
    # A Dockerfile.rocm_base without PYTORCH_ROCM_ARCH: vLLM's label is empty, never a made-up value.
    no_arch = base.BaseTier(tree / "docker/Dockerfile.rocm_base", "rocm/dev:7", DIGEST_1, True, "c" * 64, "f" * 64, {})
    (step,) = plan(tree, target="base", base=BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, None, no_arch)).steps
    assert step.labels["vllm.rocm_base.pytorch_rocm_arch"] == ""
    assert "vllm.rocm_base.pytorch_rocm_arch=" in step.argv("docker")


def test_an_unlabelled_base_is_used_as_is_with_a_notice(tree):
    """BASE_IMAGE without a content-hash label: built on, keyed by its digest, and the notice says how to rebuild;
    no fixes are claimed for it. With a matching label there is no notice and the fixes are claimed."""
    unlabelled = plan(tree, base=BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, None, _tier(tree)),
                      rocm_fixes=("ROCm/x#1",))  # fmt: skip
    assert [s.target for s in unlabelled.steps] == ["ci_base", "test"]
    assert unlabelled.notices == (
        "BASE_IMAGE rocm/vllm-dev:base carries no vllm.rocm_base.content_hash label, so whether it matches "
        "docker/Dockerfile.rocm_base is unknown; `--target base` builds the base from that file",
    )
    assert label.ROCM_FIXES not in unlabelled.steps[0].labels
    same = plan(tree, base=BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, "c" * 64, _tier(tree)),
                rocm_fixes=("ROCm/x#1",))  # fmt: skip
    assert same.notices == () and same.steps[0].labels[label.ROCM_FIXES] == "ROCm/x#1"
    assert same.steps[0].build_args["BASE_IMAGE"] == f"rocm/vllm-dev:base@{DIGEST_2}"
    # Without a digest (a tag-only dry run) nothing is known about the label either way: no notice.
    tag_only = BaseFacts("rocm/vllm-dev:base", None, False, None, _tier(tree), tag_only=True)
    assert plan(tree, base=tag_only).notices == ()
    # A tier whose own hash is unknown cannot be compared: no base step, no fixes claimed.
    unknown = plan(tree, base=BaseFacts("rocm/vllm-dev:base", DIGEST_2, True, "c" * 64, _tier(tree, content=None)),
                   rocm_fixes=("ROCm/x#1",))  # fmt: skip
    assert [s.target for s in unknown.steps] == ["ci_base", "test"]
    assert label.ROCM_FIXES not in unknown.steps[0].labels
    assert planmod.fixes_label(build_request(tree, rocm_fixes=("a/b#1", "c/d#2"))) == {label.ROCM_FIXES: "a/b#1,c/d#2"}
    assert planmod.fixes_label(build_request(tree)) == {}


# --- build: BuildKit's plain progress, and what a build step does on the engine --------------------------------


def test_progress_lines_are_followed_step_by_step():
    """ProgressParser: a step keeps its first name; logs are kept per named step (the last 20, without BuildKit's
    own sha256/DONE/CACHED lines); the first error is the failure; [internal] steps are not counted."""
    parser = ProgressParser()
    lines = [
        "#1 [internal] load build definition", "#1 DONE 0.0s",
        "#2 [ci_base 1/3] RUN make", "#2 [ci_base 1/3] RUN renamed", "#2 0.10 compiling", "#2 sha256:abc 1MB",
        "#2 DONE 1.0s", "#2 CACHED", "#3 [ci_base 2/3] COPY a b", "#3 DONE 0.1s",
        "#9 stray line of an unnamed step", "not a progress line",
        "#4 [ci_base 3/3] RUN exit 3", "#4 1.5 first", "#4 ERROR: process did not complete: exit code: 3",
        "#5 [test 1/1] RUN other", "#5 ERROR: a later error",
    ]  # fmt: skip
    for line in lines:
        parser.feed(line)
    assert parser.names == {"1": "[internal] load build definition", "2": "[ci_base 1/3] RUN make",
                            "3": "[ci_base 2/3] COPY a b", "4": "[ci_base 3/3] RUN exit 3",
                            "5": "[test 1/1] RUN other"}  # fmt: skip
    assert parser.current == "[test 1/1] RUN other"
    assert {k: list(v) for k, v in parser.logs.items()} == {"2": ["compiling"], "4": ["first"]}
    assert (parser.failed, parser.error) == ("4", "process did not complete: exit code: 3")
    assert (parser.cached, parser.done) == ({"2"}, {"1", "2", "3"})
    assert parser.counts() == (1, 1)  # #3 ran, #2 came from the cache, #1 is BuildKit's own
    error = parser.failure(1, deque(["ignored"]))
    assert (error.message, error.hint) == (
        "build failed at [ci_base 3/3] RUN exit 3: process did not complete: exit code: 3", "last lines: first"
    )
    many = ProgressParser()
    many.feed("#6 [s 1/1] RUN loop")
    for n in range(30):
        many.feed(f"#6 {n}.0 line {n}")
    assert list(many.logs["6"]) == [f"line {n}" for n in range(10, 30)]
    many.feed("#6 ERROR: boom")
    assert many.failure(1, deque()).hint == "last lines: line 25 | line 26 | line 27 | line 28 | line 29"


def test_a_failure_without_a_named_step_says_the_exit_code_and_the_last_lines():
    parser = ProgressParser()
    assert (parser.failure(7, deque(["a", "b"])).message, parser.failure(7, deque(["a", "b"])).hint) == (
        "docker build exited with 7", "last lines: a | b"
    )
    assert parser.failure(7, deque()).hint == "see the build output above"
    parser.feed("#8 ERROR: failed to solve: no such image")
    failure = parser.failure(1, deque(["x"]))
    assert (failure.message, failure.hint) == (
        "build failed at #8: failed to solve: no such image", "see the build output above"
    )


def test_progress_is_plain_lines_off_a_terminal_and_one_updating_line_on_it():
    out = io.StringIO()
    parser = ProgressParser()
    plain = buildmod.Progress(False, out)
    plain("#1 line", parser)
    plain.close()
    assert out.getvalue() == "#1 line\n"
    live_out = io.StringIO()
    live = buildmod.Progress(True, live_out, columns=30)
    live("#1 x", parser)
    parser.feed("#2 [s 1/2] RUN something long enough to be cut")
    live("#2 x", parser)
    live.close()
    assert live_out.getvalue() == (
        "\r\x1b[K[    0s] starting" + "\r\x1b[K[    0s] [s 1/2] RUN somethin" + "\n"
    )
    narrow = io.StringIO()
    buildmod.Progress(True, narrow, columns=1)("x", parser)
    assert narrow.getvalue() == "\r\x1b[K["  # never less than one character


def test_a_build_line_reaches_the_terminal_redacted_and_escaped(monkeypatch):
    """The build prints the checkout's RUN output: a secret of rocmci's environment, a terminal escape or a bidi
    override in it is shown masked and as text, plain and live alike (tabs kept: they are layout)."""
    monkeypatch.setenv("HF_TOKEN", "hf_buildLineCanary0123456789abcdefgh")
    line = "#5 0.1 got hf_buildLineCanary0123456789abcdefgh\x1b]0;title\x07 \u202eexe.txt\tdone\r"
    out = io.StringIO()
    buildmod.Progress(False, out)(line, ProgressParser())
    assert out.getvalue() == "#5 0.1 got ***\\e]0;title\\x07 \\u202eexe.txt\tdone\\r\n"
    parser, live_out = ProgressParser(), io.StringIO()
    parser.feed("#5 [s 1/2] RUN echo \x1b[2J\u202e")
    buildmod.Progress(True, live_out, columns=80)("x", parser)
    assert live_out.getvalue() == "\r\x1b[K[    0s] [s 1/2] RUN echo \\e[2J\\u202e"


def test_image_notes_reach_stderr_redacted_and_escaped_line_by_line(monkeypatch, capsys):
    """image.build's and image.retarget's notes quote registry labels and tags: a token or an escape in one is
    masked and shown as text, and rendered findings keep their lines."""
    from rocmci.image import service

    monkeypatch.setenv("HF_TOKEN", "hf_noteCanary0123456789abcdefghijk")
    service.eprint("note: x:1 is here but its hash is \x1b]0;t\x07hf_noteCanary0123456789abcdefghijk\nfix: \u202e")
    assert capsys.readouterr().err == "note: x:1 is here but its hash is \\e]0;t\\x07***\nfix: \\u202e\n"


STANDIN = """#!/bin/sh
# A stand-in docker client: records its arguments, answers `build` and `push` as told, else the real client.
printf '%s\\n' "$*" >> {log}
case "$1" in
  build) {build} ;;
  push) {push} ;;
esac
exec /usr/bin/docker "$@"
"""


def standin_engine(tmp_path: Path, build: str = "exec /usr/bin/docker \"$@\"", push: str = "exit 0"):
    from rocmci.engine import Engine

    client = tmp_path / "docker"
    client.write_text(STANDIN.format(log=tmp_path / "calls", build=build, push=push))
    client.chmod(client.stat().st_mode | stat.S_IXUSR)
    return Engine(str(client)), tmp_path / "calls"


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def image_step(tmp_path, busybox_image):
    import uuid

    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {busybox_image}\nCOPY a /a\n")
    (tmp_path / "ctx" / "a").write_text(uuid.uuid4().hex)
    tag = f"rocmci-test/mutants-image:{uuid.uuid4().hex[:10]}"

    def make(input_hash: str = "1111", **more) -> BuildStep:
        values = dict(
            target="guard", tag=tag, dockerfile=tmp_path / "ctx" / "Dockerfile", context=tmp_path / "ctx",
            build_args={}, labels={INPUT_HASH_LABEL: input_hash}, input_hash=input_hash, network="none",
            push=False, force=False, stage=None,
        )  # fmt: skip
        values.update(more)
        return BuildStep(**values)

    yield make
    from rocmci.engine import Engine

    Engine("/usr/bin/docker").cli("rmi", "-f", tag, check=False)


@pytest.mark.docker
def test_a_retarget_whose_code_objects_fail_is_never_pushed_built_or_up_to_date(engine, image_step, tmp_path):
    """The retarget's verifier runs inside its result before any push (a registry chain pushes every tier): a
    result it refuses (here busybox: no python3, no deep_ep) stays on this engine, built now or up to date."""
    from rocmci.errors import BuildError

    client, log = standin_engine(tmp_path)
    step = image_step(target="retarget", push=True, build_args={"DEEPEP_ROCM_ARCH": "gfx950"})
    for _ in ("built", "up to date"):
        with pytest.raises(BuildError, match="verif|deep_ep|DeepEP"):
            buildmod.build_step(step, client, live=False, log=lambda line: None)
    assert [c for c in calls(log) if c.startswith("push")] == []
    assert any(c.startswith("run --rm --network none " + step.tag) for c in calls(log))


@pytest.mark.docker
def test_a_build_step_on_the_engine_builds_pushes_and_reuses(engine, image_step, tmp_path):
    """build(): each step built and logged with its counts, pushed when asked;
    a current image is not built again and not logged as built."""
    client, log = standin_engine(tmp_path)
    said: list[str] = []
    step = image_step(push=True)
    (result,) = buildmod.build(planmod.BuildPlan((step,)), client, live=False, log=said.append)
    assert (result.tag, result.built, result.ran, result.cached) == (step.tag, True, 1, 1)  # FROM is cached
    assert 0 <= result.seconds < 600
    assert said == [f"pushing {step.tag}",
                    f"built {step.tag} (guard) in {result.seconds:.0f}s: 1 steps ran, 1 cached"]  # fmt: skip
    assert calls(log)[-1] == f"push {step.tag}" and calls(log)[0].startswith("build --file ")
    said.clear()
    (again,) = buildmod.build(planmod.BuildPlan((image_step(),)), client, live=False, log=said.append)
    assert (again.built, again.ran, again.cached) == (False, 0, 0) and 0 <= again.seconds < 60
    assert said == [f"{step.tag} is up to date ({INPUT_HASH_LABEL} 1111); nothing to build (--force rebuilds)"]
    assert buildmod.is_current(image_step(), engine) and not buildmod.is_current(image_step("2222"), engine)
    rebuilt = buildmod.build_step(image_step(force=True), client, live=False, log=said.append)
    assert rebuilt.built and rebuilt.tag == step.tag


@pytest.mark.docker
def test_a_failed_push_is_a_build_error(engine, image_step, tmp_path):
    client, _ = standin_engine(tmp_path, push="echo denied; exit 3")
    with pytest.raises(BuildError) as failed:
        buildmod.build_step(image_step(push=True), client, live=False, log=lambda _: None)
    assert (failed.value.message, failed.value.hint) == (
        f"docker push {image_step().tag} failed with exit 3", "check registry login"
    )


@pytest.mark.docker
def test_a_push_that_failed_is_pushed_by_the_next_run_though_the_image_is_up_to_date(engine, image_step, tmp_path):
    """"Up to date" is about this engine, not the registry: --push after a failed push pushes."""
    client, log = standin_engine(tmp_path, push="echo denied; exit 3")
    with pytest.raises(BuildError):
        buildmod.build_step(image_step(push=True), client, live=False, log=lambda _: None)
    client, log = standin_engine(tmp_path, push="echo pushed; exit 0")
    said: list[str] = []
    again = buildmod.build_step(image_step(push=True), client, live=False, log=said.append)
    assert not again.built and calls(log)[-1] == f"push {again.tag}"
    assert said[0].endswith("nothing to build (--force rebuilds)") and f"pushing {again.tag}" in said
    client, _ = standin_engine(tmp_path, push="exit 4")
    with pytest.raises(BuildError, match="failed with exit 4"):  # and a failed retry is still a failure
        buildmod.build_step(image_step(push=True), client, live=False, log=lambda _: None)


@pytest.mark.docker
def test_a_failed_build_names_its_step_and_an_image_without_its_key_is_refused(engine, image_step, tmp_path):
    """A non-zero build with the engine up is the failing step and its last lines; a build that exits 0 but
    leaves no image with the step's input hash is an error, never a success."""
    progress = "echo '#4 [s 1/1] RUN false'; echo '#4 0.1 oops'; echo '#4 ERROR: exit code: 1'; exit 1"
    client, log = standin_engine(tmp_path, build=progress)
    with pytest.raises(BuildError) as failed:
        buildmod.build_step(image_step(), client, live=False, log=lambda _: None)
    assert (failed.value.message, failed.value.hint) == ("build failed at [s 1/1] RUN false: exit code: 1",
                                                         "last lines: oops")  # fmt: skip
    client, _ = standin_engine(tmp_path, build="echo nothing built; exit 0")
    step = image_step()
    with pytest.raises(BuildError) as missing:
        buildmod.build_step(step, client, live=False, log=lambda _: None)
    assert (missing.value.message, missing.value.hint) == (
        f"{step.tag} was built but lacks label {INPUT_HASH_LABEL}=1111",
        "another build may have replaced the tag meanwhile; rerun",
    )


def test_a_build_that_fails_because_the_engine_stopped_says_so(tmp_path, monkeypatch):
    """The engine gone mid-build is said as such (start it, rerun), not as a failed Dockerfile step."""
    from rocmci.errors import EngineError

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    client, log = standin_engine(tmp_path, build="echo '#1 [s 1/1] RUN x'; echo '#1 ERROR: EOF'; exit 1")
    step = BuildStep(target="t", tag="r/x:t", dockerfile=tmp_path / "D", context=tmp_path, build_args={}, labels={},
                     input_hash="h", network=None, push=False, force=True)  # fmt: skip
    with pytest.raises(EngineError) as stopped:
        buildmod.build_step(step, client, live=False, log=lambda _: None)
    assert (stopped.value.message, stopped.value.hint) == (
        "the Docker engine stopped while building r/x:t",
        "start it again and rerun; finished stages come from the build cache",
    )
    assert calls(log) == [f"build --file {tmp_path}/D --target t --tag r/x:t --progress plain {tmp_path}"]


# --- retarget: the overlay build and its verification -----------------------------------------------------


def _retarget(**given) -> retarget.RetargetRequest:
    values = dict(
        from_image="rocm/vllm-ci:build-1", from_identity="sha256:" + "a" * 64, archs=("gfx950", "gfx942"),
        pins={"DEEPEP_REPO": "https://github.com/ROCm/DeepEP.git", "DEEPEP_BRANCH": "0f63d3e9", "DEEPEP_NIC": "cx7",
              "ROCSHMEM_REPO": "https://github.com/ROCm/rocm-systems.git", "ROCSHMEM_BRANCH": "b1"},
        setup_flags=("--rocm-explicit-ctx", "--rocm-gfx942-fp8-fnuz-max", "224"),
        sources={"DEEPEP_BRANCH": "docker/Dockerfile.rocm:496"}, image_repo="rocmci/vllm-rocm",
    )  # fmt: skip
    values.update(given)
    return retarget.RetargetRequest(**values)


def test_retarget_plans_one_overlay_build_with_vllms_pins_and_a_documented_key():
    """plan_retarget: every pin and DeepEP flag as a build arg of docker/Dockerfile.retarget (context: docker/),
    labels saying what was rebuilt from what, and an input hash over the overlay, the source image's identity
    and the sorted args (pinned field by field: a change re-keys every retargeted image)."""
    import hashlib

    planned = retarget.plan_retarget(_retarget(workdir="/vllm-workspace", notes=("a note",)), "OVERLAY")
    step = planned.step
    args = {
        "FROM_IMAGE": "rocm/vllm-ci:build-1", "DEEPEP_ROCM_ARCH": "gfx950;gfx942",
        "DEEPEP_REPO": "https://github.com/ROCm/DeepEP.git", "DEEPEP_BRANCH": "0f63d3e9", "DEEPEP_NIC": "cx7",
        "ROCSHMEM_REPO": "https://github.com/ROCm/rocm-systems.git", "ROCSHMEM_BRANCH": "b1",
        "DEEPEP_SETUP_FLAGS": "--rocm-explicit-ctx --rocm-gfx942-fp8-fnuz-max 224", "FROM_WORKDIR": "/vllm-workspace",
    }  # fmt: skip
    assert step.build_args == args
    key = hashlib.sha256(b"rocmci-retarget-2\0OVERLAY\0sha256:" + b"a" * 64 + b"\0")
    for name in sorted(args):
        key.update(f"{name}={args[name]}\0".encode())
    assert step.input_hash == key.hexdigest()[:16]
    assert step.labels == {
        label.ARCH: "gfx950;gfx942", label.RETARGET_FROM: "rocm/vllm-ci:build-1",
        label.DEEPEP_REPO: "https://github.com/ROCm/DeepEP.git", label.DEEPEP_REF: "0f63d3e9",
        label.DEEPEP_NIC: "cx7", label.DEEPEP_FLAGS: "--rocm-explicit-ctx --rocm-gfx942-fp8-fnuz-max 224",
        label.ROCSHMEM_REPO: "https://github.com/ROCm/rocm-systems.git", label.ROCSHMEM_REF: "b1",
        label.TARGET: "retarget", INPUT_HASH_LABEL: step.input_hash,
        label.VLLM_DEEPEP_ARCH: "gfx950;gfx942", "vllm.ci_base.content_hash": "",
    }  # fmt: skip
    assert (step.target, step.tag, step.dockerfile, step.context) == (
        "retarget", "rocmci/vllm-rocm:retarget-gfx950-gfx942", retarget.OVERLAY, retarget.OVERLAY_DIR
    )
    assert (step.network, step.push, step.force, step.stage) == (None, False, False, "")
    assert retarget.OVERLAY == retarget.OVERLAY_DIR / "Dockerfile.retarget" and retarget.OVERLAY.is_file()
    assert (planned.sources, planned.notes) == ({"DEEPEP_BRANCH": "docker/Dockerfile.rocm:496"}, ("a note",))
    assert planned.verify_argv("docker") == [
        "docker", "run", "--rm", "--network", "none", step.tag, "python3", "/opt/rocmci/verify_deepep.py",
        "--expect", "gfx950;gfx942",
    ]  # fmt: skip
    given = retarget.plan_retarget(_retarget(tag="me/r:1", network="host", force=True), "OVERLAY").step
    assert (given.tag, given.network, given.force) == ("me/r:1", "host", True)
    # Pins not read (none in the file) are empty labels, never missing ones.
    bare = retarget.plan_retarget(_retarget(pins={}, setup_flags=()), "OVERLAY").step
    assert [bare.labels[k] for k in (label.DEEPEP_REPO, label.DEEPEP_REF, label.DEEPEP_NIC, label.DEEPEP_FLAGS,
                                     label.ROCSHMEM_REPO, label.ROCSHMEM_REF)] == [""] * 6  # fmt: skip
    with pytest.raises(UsageError, match="cannot target gfx90a"):
        retarget.plan_retarget(_retarget(archs=("gfx90a",)), "OVERLAY")


def test_the_verifiers_answer_decides_whether_a_retargeted_image_is_good():
    """check_verification: no JSON answer, a non-zero exit, or ok=false is a BuildError naming the image."""
    good = '{"ok": true, "found": ["gfx942"]}\n'
    assert retarget.check_verification(good, 0, "t:x") == {"ok": True, "found": ["gfx942"]}
    with pytest.raises(BuildError) as none:
        retarget.check_verification("Traceback\n", 139, "t:x")
    assert (none.value.message, none.value.hint) == (
        "verifying t:x gave no result (exit 139)", "run the verifier by hand: /opt/rocmci/verify_deepep.py"
    )
    for stdout, code in ((good, 1), ('{"ok": false, "error": "no gfx950 code object"}\n', 0), ("{}\n", 0)):
        with pytest.raises(BuildError) as bad:
            retarget.check_verification(stdout, code, "t:x")
        error = "no gfx950 code object" if "error" in stdout else None
        assert (bad.value.message, bad.value.hint) == (
            f"t:x was built but DeepEP does not check out: {error}",
            "the image is left for inspection; see its labels with `rocmci image.inspect`",
        )


SELECTING = """ARG REMOTE_VLLM="1"
ARG REQS=requirements
FROM scratch AS base
FROM base AS build_rocshmem
ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"
RUN bash all_backends -DGPU_TARGETS="${DEEPEP_ROCM_ARCH}"
FROM build_rocshmem AS build_deepep
RUN export PYTORCH_ROCM_ARCH="${DEEPEP_ROCM_ARCH}" && python3 setup.py bdist_wheel
FROM build_deepep AS wheels_0
FROM base AS wheels_1
FROM wheels_${REMOTE_VLLM} AS final
COPY ${REQS}/rocm.txt /r.txt
"""


def test_stages_and_copied_files_are_those_of_the_build_rocmci_runs(tmp_path):
    """Whether a target builds DeepEP, and which files it copies, follow the args rocmci builds with (REMOTE_VLLM=0,
    as vLLM's CI does, whatever the file's default) and the file's ARG defaults in COPY sources."""
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile.rocm").write_text(SELECTING)
    seen: list[tuple[str, ...]] = []

    def digest(checkout: Path, sources: tuple[str, ...]) -> str:
        seen.append(sources)
        return "tree"

    request = build_request(tmp_path, target="final", vllm_archs=None)
    (final,) = plan_build(request, digest).steps
    assert final.build_args == {"REMOTE_VLLM": "0", "DEEPEP_ROCM_ARCH": "gfx942;gfx950"}
    assert final.labels[label.ARCH] == "gfx942;gfx950" and final.tag == "rocmci/vllm-rocm:final-gfx942-gfx950"
    assert seen == [("requirements/rocm.txt",)]
    with pytest.raises(UsageError, match="cannot target gfx90a"):
        plan_build(build_request(tmp_path, target="final", archs=("gfx90a",)), digest)
    # A ci_base that reaches no DeepEP stage is tagged by its target alone, as final is.
    (tmp_path / "docker" / "Dockerfile.rocm").write_text(SELECTING + "FROM base AS ci_base\n")
    (ci,) = plan_build(build_request(tmp_path, target="ci_base", vllm_archs=None), digest).steps
    assert (ci.tag, label.ARCH in ci.labels) == ("rocmci/vllm-rocm:ci-base", False)
