"""image/requests: the arch check an image build starts with, from the mutation run's survivors: the checkout it reads
(checkout), the DeepEP list (deepep_archs, `native` included), the request naming where each list came from
(arch_request), the stages followed (run_check) and the one line that refuses a build (refusal).

Real parts: vLLM's fixture checkout (a copy in tmp_path where its Dockerfile or docker-bake-rocm.hcl is edited),
settings through the one registry, the real arch check, and a fake KFD sysfs tree laid out as the amdgpu driver lays
out /sys/class/kfd/kfd/topology/nodes, read by the real gpus.detect_gpus.
"""

from __future__ import annotations

import os

import pytest

from rocmci import arch, gpus, settings
from rocmci.errors import FindingsError, UsageError
from rocmci.image import requests
from tests.conftest import SHARED_VLLM
from tests.unit.test_gpus import make_node

pytestmark = pytest.mark.skipif(not (SHARED_VLLM / "docker").is_dir(), reason=f"{SHARED_VLLM} not found")
DOCKERFILE = "docker/Dockerfile.rocm"
BAKE = "docker/docker-bake-rocm.hcl"
# What deepep-unsupported-arch says after the list's origin, for gfx90a.
NOT_FOR_DEEPEP = (
    "asks DeepEP for gfx90a (MI210/MI250/MI250X); DeepEP builds only gfx942 (MI300A/MI300X/MI325X), gfx950 "
    f"(MI350X/MI355X) (source: {arch.DEEPEP_ARCHS_SOURCE})"
)
NO_CHECKOUT = "pass --vllm-src PATH (a vLLM checkout), set ROCMCI_VLLM_SRC, or run from a vLLM checkout"
SEE_ALL = "`rocmci image.check` lists every finding"


def line_of(tree, rel: str, text: str) -> int:
    return next(i for i, x in enumerate((tree / rel).read_text().splitlines(), 1) if text in x)


def resolved(tmp_path, flags=None, env=None, pyproject=None, vllm=SHARED_VLLM):
    given = {"vllm_src": str(vllm), **(flags or {})}
    return settings.resolve(tmp_path, flags=given, env=env or {}, pyproject=pyproject or {})


def request(tmp_path, **kw):
    s = resolved(tmp_path, **kw)
    return requests.arch_request(s, requests.checkout(s))


def checked(tmp_path, target="ci_base", **kw):
    """(the request, its findings, the refusal) for one build of `target`."""
    co, req, findings = requests.run_check(resolved(tmp_path, **kw), target)
    return req, findings, requests.refusal(co, req, findings)


# --- checkout ------------------------------------------------------------------------------------------------------


def test_without_a_vllm_checkout_the_error_says_why_none_was_found_and_how_to_give_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not inside any vLLM checkout, so nothing is found by looking upwards
    s = settings.resolve(tmp_path, flags={}, env={}, pyproject={})
    with pytest.raises(UsageError) as err:
        requests.checkout(s)
    assert err.value.message == (
        "no vLLM checkout to read docker/Dockerfile.rocm from (unset: the current folder is not a vLLM checkout "
        "(no docker/Dockerfile.rocm + setup.py))"
    )
    assert err.value.hint == NO_CHECKOUT


# --- deepep_archs --------------------------------------------------------------------------------------------------


@pytest.fixture
def kfd(tmp_path, monkeypatch):
    """A fake KFD topology folder that `--arch native` reads. deepep_archs calls detect_gpus() with its default
    folder (/sys/class/kfd/...) and takes no host root, so that default is the one seam; detect_gpus itself runs."""
    nodes = tmp_path / "kfd-nodes"
    nodes.mkdir()
    monkeypatch.setattr(gpus.detect_gpus, "__defaults__", (nodes, "KFD sysfs"))
    return nodes


def test_native_is_the_hosts_gpus_each_arch_once_in_generation_order(tmp_path, kfd):
    make_node(kfd, 0, 0)  # a CPU node
    for node, version in ((1, 90500), (2, 90402), (3, 90402)):
        make_node(kfd, node, version, render=127 + node)
    for text in ("native", " Native "):  # the word is taken in any case, blanks around it ignored
        assert requests.deepep_archs(resolved(tmp_path, {"arch": text})) == ("gfx942", "gfx950")


def test_native_on_a_host_without_amd_gpus_is_a_usage_error_saying_what_to_name_instead(tmp_path, kfd):
    make_node(kfd, 0, 0)
    with pytest.raises(UsageError) as err:
        requests.deepep_archs(resolved(tmp_path, {"arch": "native"}))
    assert err.value.message == "--arch native found no AMD GPU on this host"
    assert err.value.hint == "name the archs instead, e.g. --arch 'gfx942;gfx950'"


def test_a_named_list_never_reads_the_hosts_gpus(tmp_path, kfd):
    kfd.rmdir()
    kfd.write_text("not a folder")  # reading it would be a usage error of its own
    assert requests.deepep_archs(resolved(tmp_path, {"arch": "gfx950"})) == ("gfx950",)


@pytest.mark.parametrize(
    ("given", "origin"),
    [
        ({"flags": {"arch": "gfx942;sm90"}}, "flag --arch"),
        ({"env": {"DEEPEP_ROCM_ARCH": "gfx942;sm90"}}, "env DEEPEP_ROCM_ARCH (as vLLM's ci-bake-rocm.sh reads it)"),
    ],
)
def test_a_list_that_is_no_arch_list_is_a_usage_error_naming_the_setting_and_its_origin(tmp_path, given, origin):
    with pytest.raises(UsageError) as err:
        requests.deepep_archs(resolved(tmp_path, **given))
    assert err.value.message == f"arch ({origin}): 'sm90' is not a gfx target"
    assert err.value.hint == "use names like gfx942 or gfx950"


# --- arch_request: where the DeepEP list came from ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"flags": {"arch": "gfx90a;gfx942"}}, "--arch"),
        ({"env": {"ROCMCI_ARCH": "gfx90a;gfx942"}}, "DEEPEP_ROCM_ARCH (env ROCMCI_ARCH)"),
        ({"env": {"DEEPEP_ROCM_ARCH": "gfx90a;gfx942"}},
         "DEEPEP_ROCM_ARCH (env DEEPEP_ROCM_ARCH (as vLLM's ci-bake-rocm.sh reads it))"),
        ({"pyproject": {"arch": "gfx90a;gfx942"}}, "DEEPEP_ROCM_ARCH (pyproject.toml [tool.rocmci])"),
    ],
)  # fmt: skip
def test_an_arch_deepep_cannot_build_is_said_naming_where_the_list_came_from(tmp_path, given, named):
    req = request(tmp_path, **given)
    assert (req.archs, req.archs_origin) == (("gfx90a", "gfx942"), named)
    found = [f for f in requests.run_check(resolved(tmp_path, **given))[2] if f.rule == "deepep-unsupported-arch"]
    line = line_of(SHARED_VLLM, DOCKERFILE, "ARG DEEPEP_ROCM_ARCH=")
    assert [(f.file, f.line, f.message) for f in found] == [(DOCKERFILE, line, f"{named} {NOT_FOR_DEEPEP}")]


def test_a_list_from_the_dockerfiles_arg_names_its_file_and_line(tmp_path, vllm_docker_tree):
    path = vllm_docker_tree / DOCKERFILE
    path.write_text(path.read_text().replace('ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"', 'ARG DEEPEP_ROCM_ARCH="gfx90a"'))
    line = line_of(vllm_docker_tree, DOCKERFILE, 'ARG DEEPEP_ROCM_ARCH="gfx90a"')
    named = f"DEEPEP_ROCM_ARCH ({os.path.realpath(path)}:{line} (ARG DEEPEP_ROCM_ARCH))"
    assert request(tmp_path, vllm=vllm_docker_tree).archs_origin == named


# --- arch_request: vLLM's list and where it is written ---------------------------------------------------------------


def test_vllms_list_from_the_bake_file_is_checked_and_a_lack_is_found_at_its_line(tmp_path, vllm_docker_tree):
    # A finding about the bake file's list points at that file's line: that is where the user changes it.
    path = vllm_docker_tree / BAKE
    path.write_text(path.read_text().replace('default = "gfx90a;gfx942;gfx950"', 'default = "gfx90a;gfx942"'))
    line = line_of(vllm_docker_tree, BAKE, 'default = "gfx90a;gfx942"')
    origin = f"{os.path.realpath(path)}:{line} (variable PYTORCH_ROCM_ARCH)"
    req, findings, refused = checked(tmp_path, vllm=vllm_docker_tree)
    assert (req.vllm_archs, req.vllm_origin, req.vllm_where) == (("gfx90a", "gfx942"), origin, (BAKE, line))
    assert [(f.file, f.line, f.rule, f.message) for f in findings] == [
        (BAKE, line, "vllm-arch-superset", f"vLLM is built for gfx90a;gfx942 ({origin}), which lacks gfx950 that "
                                           "DeepEP is built for: vLLM's own kernels would be missing there"),
    ]  # fmt: skip
    assert isinstance(refused, UsageError)


@pytest.mark.parametrize(
    ("given", "origin"),
    [
        ({"flags": {"vllm_arch": "gfx942"}}, "flag --vllm-arch"),
        ({"env": {"ROCMCI_VLLM_ARCH": "gfx942"}}, "env ROCMCI_VLLM_ARCH"),
        ({"env": {"PYTORCH_ROCM_ARCH": "gfx942"}}, "env PYTORCH_ROCM_ARCH (as vLLM's ci-bake-rocm.sh reads it)"),
        ({"pyproject": {"vllm_arch": "gfx942"}}, "pyproject.toml [tool.rocmci]"),
    ],
)
def test_a_vllm_list_given_on_purpose_is_found_at_the_dockerfiles_arg_not_the_bake_line(tmp_path, given, origin):
    # The bake file still declares PYTORCH_ROCM_ARCH, but the list checked is not the one written there.
    req, findings, _ = checked(tmp_path, **given)
    assert (req.vllm_archs, req.vllm_origin, req.vllm_where) == (("gfx942",), origin, None)
    line = line_of(SHARED_VLLM, DOCKERFILE, "ARG ARG_PYTORCH_ROCM_ARCH")
    assert [(f.file, f.line, f.rule, f.message) for f in findings] == [
        (DOCKERFILE, line, "vllm-arch-superset", f"vLLM is built for gfx942 ({origin}), which lacks gfx950 that "
                                                 "DeepEP is built for: vLLM's own kernels would be missing there"),
    ]  # fmt: skip


@pytest.mark.parametrize("how", ["bake file without the variable", "empty setting"])
def test_without_a_vllm_list_only_deepeps_own_list_is_checked(tmp_path, vllm_docker_tree, how):
    env = {}
    if how == "empty setting":
        env = {"ROCMCI_VLLM_ARCH": ""}
    else:
        path = vllm_docker_tree / BAKE
        path.write_text(path.read_text().replace('variable "PYTORCH_ROCM_ARCH"', 'variable "OTHER_ARCH"'))
    req, findings, refused = checked(tmp_path, vllm=vllm_docker_tree, env=env)
    assert (req.archs, req.vllm_archs, req.vllm_where) == (("gfx942", "gfx950"), None, None)
    assert (findings, refused) == ([], None)


def test_a_vllm_list_that_is_no_arch_list_is_a_usage_error_naming_the_setting_and_its_origin(tmp_path):
    with pytest.raises(UsageError) as err:
        request(tmp_path, flags={"vllm_arch": "gfx942;sm90"})
    assert err.value.message == "vllm_arch (flag --vllm-arch): 'sm90' is not a gfx target"
    assert err.value.hint == "use names like gfx942 or gfx950"


def test_a_vllm_list_of_the_bake_file_that_is_no_arch_list_names_its_file_and_line(tmp_path, vllm_docker_tree):
    path = vllm_docker_tree / BAKE
    text = path.read_text()
    path.write_text(text.replace('default = "gfx90a;gfx942;gfx950"', 'default = "gfx942;sm90"', 1))
    line = text[: text.index('variable "PYTORCH_ROCM_ARCH"')].count("\n") + 2
    with pytest.raises(UsageError) as err:
        request(tmp_path, vllm=vllm_docker_tree)
    assert err.value.message == f"vllm_arch ({path}:{line} (variable PYTORCH_ROCM_ARCH)): 'sm90' is not a gfx target"


# --- run_check: the stages followed ----------------------------------------------------------------------------------

# The fixture's DeepEP step hard-codes PYTORCH_ROCM_ARCH="gfx942;gfx950": asking for gfx942 alone is a finding
# wherever DeepEP is built.


def deepep_source_finding() -> tuple[str, int, str]:
    line = line_of(SHARED_VLLM, DOCKERFILE, 'export PYTORCH_ROCM_ARCH="gfx942;gfx950"')
    return DOCKERFILE, line, "deepep-arch-source"


@pytest.mark.parametrize("target", [None, "ci_base", "test"])
def test_ci_base_and_the_test_image_built_on_it_follow_ci_base(tmp_path, target):
    s = resolved(tmp_path, {"arch": "gfx942"})
    co, req, findings = requests.run_check(s) if target is None else requests.run_check(s, target)
    assert req.target == "ci_base"
    assert [(f.file, f.line, f.rule) for f in findings] == [deepep_source_finding()]


def test_a_target_that_builds_no_deepep_is_followed_as_itself(tmp_path):
    req, findings, refused = checked(tmp_path, "base", flags={"arch": "gfx942"})
    assert (req.target, findings, refused) == ("base", [], None)


# --- refusal ---------------------------------------------------------------------------------------------------------


def test_one_finding_about_the_list_asked_for_is_a_usage_error_with_its_fix(tmp_path):
    req, findings, refused = checked(tmp_path, flags={"arch": "gfx90a;gfx942;gfx950"})
    line = line_of(SHARED_VLLM, DOCKERFILE, "ARG DEEPEP_ROCM_ARCH=")
    assert type(refused) is UsageError and refused.exit_code == 2
    assert refused.message == (
        f"refusing to build for gfx90a;gfx942;gfx950: {DOCKERFILE}:{line}:1: error [deepep-unsupported-arch] "
        f"--arch {NOT_FOR_DEEPEP}"
    )
    assert refused.hint == f"fix: drop gfx90a from the DeepEP list; {SEE_ALL}"


def test_two_findings_about_the_lists_are_one_usage_error_counting_the_other(tmp_path):
    req, findings, refused = checked(tmp_path, flags={"arch": "gfx90a;gfx942;gfx950", "vllm_arch": "gfx942"})
    assert [f.rule for f in findings] == ["vllm-arch-superset", "deepep-unsupported-arch"]
    line = line_of(SHARED_VLLM, DOCKERFILE, "ARG ARG_PYTORCH_ROCM_ARCH")
    assert type(refused) is UsageError
    assert refused.message == (
        f"refusing to build for gfx90a;gfx942;gfx950: {DOCKERFILE}:{line}:1: error [vllm-arch-superset] vLLM is "
        "built for gfx942 (flag --vllm-arch), which lacks gfx90a, gfx950 that DeepEP is built for: vLLM's own "
        "kernels would be missing there (and 1 more)"
    )
    assert refused.hint == (
        f"fix: add gfx90a, gfx950 to vLLM's list (--vllm-arch, or PYTORCH_ROCM_ARCH in {BAKE}); {SEE_ALL}"
    )


def test_a_finding_in_the_file_among_list_findings_makes_the_refusal_a_findings_error(tmp_path):
    # gfx942 alone reaches the hard-coded DeepEP step: a finding in the file, exit 1 like `image.check`.
    req, findings, refused = checked(tmp_path, flags={"arch": "gfx90a;gfx942", "vllm_arch": "gfx942"})
    assert [f.rule for f in findings] == ["vllm-arch-superset", "deepep-unsupported-arch", "deepep-arch-source"]
    assert type(refused) is FindingsError and refused.exit_code == 1
    assert refused.message == f"refusing to build for gfx90a;gfx942: {findings[0].text()} (and 2 more)"
    assert refused.hint == f"fix: {findings[0].fix}; {SEE_ALL}"
