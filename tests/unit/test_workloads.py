from __future__ import annotations

from pathlib import Path

import pytest

from rocmci import yamldoc
from rocmci.errors import InputError, PreflightError, UsageError
from rocmci.gpus import Gpu
from rocmci.runs import workarounds as wa
from rocmci.runs import workloads as wl
from tests.conftest import REPO


def registry():
    return wa.load_registry(REPO / "workarounds.yaml")


def _dp(**given):
    """The example as `invoke run.dp-example` builds it: flags parsed and defaulted by cli/flags.py."""
    from rocmci.cli import flags

    names = ("model", "tp", "dp", "max_model_len", "backend", "extra")
    v = flags.parse({n: given.get(n) for n in names})
    return wl.dp_example(**{n: getattr(v, n) for n in names}, example=given.get("example", wl.DP_EXAMPLE_MOVED))


def test_default_dp_example_is_exactly_upstreams_command():
    w = _dp(example=wl.DP_EXAMPLE)
    assert _dp().argv[1] == "examples/features/data_parallel/data_parallel_offline.py"  # vLLM's path now
    assert w.command_line() == (
        "VLLM_LOGGING_LEVEL=DEBUG python3 examples/offline_inference/data_parallel.py "
        "--model=Qwen/Qwen1.5-MoE-A2.7B -tp=1 -dp=2 --max-model-len=2048 --all2all-backend=deepep_high_throughput"
    )
    assert w.gpus == 2
    assert _dp(tp="2", dp="4").gpus == 8
    with pytest.raises(UsageError, match="--dp must be between 1 and"):
        _dp(dp="0")


def test_workaround_applies_only_to_high_throughput():
    ht, ll = wl.moe_tests(modes=wl.expand_modes("both"), registry=registry())
    assert ht.env == {"ROCPROFILER_REGISTER_ENABLED": "0"} and ht.workarounds == ("rocprofiler-register-teardown",)
    assert ll.env == {} and ll.workarounds == ()
    assert ht.argv[ht.argv.index("-k") + 1] == "test_deep_ep_moe and not low_latency"
    keyed = wl.moe_tests(modes=("low-latency",), registry=[], keyword="fp8")[0]
    assert keyed.argv[keyed.argv.index("-k") + 1] == "(test_low_latency_deep_ep_moe) and (fp8)"


def test_shards_get_the_plugin_and_their_own_junit():
    runs = wl.moe_tests(modes=("high-throughput",), registry=[], shards=3)
    assert [r.junit for r in runs] == [f"junit-moe-high-throughput-shard{i}.xml" for i in range(3)]
    assert all(r.sharded and r.group == "high-throughput" for r in runs)
    assert "--rocmci-shard=2/3" in runs[2].argv
    assert wl.shard_env(1) == {"MASTER_PORT": "29600", "VLLM_PORT": "29610"}


GPUS = [Gpu(i, i + 1, "gfx942", 128 + i) for i in range(8)]


def test_choose_gpus_gives_disjoint_sets():
    sets = wl.choose_gpus(GPUS, None, 2, 4)
    assert [[g.index for g in s] for s in sets] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [g.index for g in wl.choose_gpus(GPUS, (5, 7), 2, 1)[0]] == [5, 7]
    with pytest.raises(PreflightError, match="need 10 GPUs, this host offers 8"):
        wl.choose_gpus(GPUS, None, 2, 5)
    with pytest.raises(PreflightError, match="no GPU 9"):
        wl.choose_gpus(GPUS, (1, 9), 2, 1)


def test_arch_coverage():
    wl.check_archs(GPUS[:2], "gfx942;gfx950", "img")
    with pytest.raises(
        PreflightError, match=r"GPU 0 is gfx90a \(MI210/MI250/MI250X\) but image img is built for gfx942"
    ):
        wl.check_archs([Gpu(0, 1, "gfx90a", 128)], "gfx942", "img")


def _tree(tmp_path: Path, test_module: str, base: str = "FROM x\n") -> Path:
    (tmp_path / "tests/kernels/moe").mkdir(parents=True)
    (tmp_path / "docker").mkdir()
    (tmp_path / "tests/kernels/moe/test_deepep_moe.py").write_text(test_module)
    (tmp_path / "docker/Dockerfile.rocm_base").write_text(base)
    return tmp_path


def test_evidence_from_the_vllm_source(tmp_path):
    (w,) = registry()
    old = _tree(tmp_path / "old", 'import os\n\nos.environ["ROCPROFILER_REGISTER_ENABLED"] = "0"\n')
    new = _tree(tmp_path / "new", 'import os\n\nprint(os.environ.get("ROCPROFILER_REGISTER_ENABLED"))\n')
    backported = _tree(
        tmp_path / "bp", old.joinpath("tests/kernels/moe/test_deepep_moe.py").read_text(),
        "FROM x\n# backport of https://github.com/ROCm/rocm-systems/pull/6942\nRUN patch\n",
    )  # fmt: skip
    assert wa.check(w, wa.Sources()).status == wa.APPLIES
    assert wa.check(w, wa.Sources()).reason().startswith("no evidence checked")
    applies = wa.check(w, wa.Sources(vllm_src=old))
    assert applies.status == wa.APPLIES
    assert (
        applies.evidence[0]
        == f'{old}/tests/kernels/moe/test_deepep_moe.py:3: os.environ["ROCPROFILER_REGISTER_ENABLED"] = "0"'
    )
    gone = wa.check(w, wa.Sources(vllm_src=new))
    assert gone.obsolete and gone.evidence[0].startswith(f"{new}/tests/kernels/moe/test_deepep_moe.py: no line matches")
    base = wa.check(w, wa.Sources(vllm_src=backported))
    assert base.obsolete and base.evidence == (
        f"{backported}/docker/Dockerfile.rocm_base:2: # backport of https://github.com/ROCm/rocm-systems/pull/6942",
    )
    labelled = wa.check(w, wa.Sources(image="img", labels={"rocmci.rocm.fixes": "a/b#1, ROCm/rocm-systems#6942"}))
    assert labelled.obsolete and labelled.evidence == (
        "label rocmci.rocm.fixes='a/b#1, ROCm/rocm-systems#6942' on image img",
    )
    assert wa.check(w, wa.Sources(image="img", labels={})).evidence == ("image img has no label rocmci.rocm.fixes",)
    obsolete, notes = wa.run_decisions([gone], {"moe-tests"})
    assert obsolete == {"rocprofiler-register-teardown"} and "NOT applied" in notes[0]
    assert wa.run_decisions([gone], {"dp-example"}) == (frozenset(), [])


def test_evidence_from_a_fix_commit(tmp_path):
    import subprocess

    def git(*a):
        return subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "fix")
    fix = git("rev-parse", "HEAD").strip()
    git("checkout", "-q", "--orphan", "other")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "unrelated")
    condition = wa.Condition("vllm_commit", commit=fix)
    assert wa.check_condition(condition, wa.Sources(vllm_src=tmp_path))[0] is False
    git("merge", "-q", "--allow-unrelated-histories", "-m", "m", fix)
    met, evidence = wa.check_condition(condition, wa.Sources(vllm_src=tmp_path))
    assert met is True and evidence == f"{tmp_path}: HEAD contains {fix} (git merge-base --is-ancestor)"
    assert wa.check_condition(wa.Condition("vllm_commit", commit="abcdef1"), wa.Sources(vllm_src=tmp_path))[0] is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workarounds: {}", "a 'workarounds' list"),
        ("workarounds:\n- {id: a, sets: {lower: '0'}}", "'sets' must map environment variable names"),
        ("workarounds:\n- {id: a, colour: red}", "unknown key 'colour'"),
        ("workarounds:\n- {id: a}\n- {id: a}", "unique 'id'"),
        ("workarounds:\n- {id: a, applies_to: {platfrom: rocm}}", "'applies_to' takes"),
        ("workarounds:\n- {id: a, remove_when: {fix: x}}", "'remove_when' must be a list"),
        ("workarounds:\n- {id: a, remove_when: [{when: x}]}", "each 'remove_when' item is one of"),
        ("workarounds:\n- {id: a, remove_when: [{vllm_commit: 'HEAD; rm -rf /'}]}", "must be a commit hash"),
        ("workarounds:\n- {id: a, remove_when: [{vllm_file_has: {path: ../x, pattern: a}}]}", "must be relative"),
        ("workarounds:\n- {id: a, remove_when: [{vllm_file_has: {path: x, pattern: '('}}]}", "not a regular expr"),
        ("workarounds:\n- {id: a, remove_when: [{image_label: {name: x}}]}", "takes exactly has, name"),
    ],
)
def test_bad_registry(text, message):
    with pytest.raises(InputError, match=message):
        wa.from_document(yamldoc.parse(text, "w.yaml"))


def test_registry_file_loads():
    ids = [w.id for w in registry()]
    assert ids == ["rocprofiler-register-teardown"]  # vLLM #55099 removed the os._exit in-test workaround
    assert Path(REPO / "workarounds.yaml").is_file()


def test_pytest_colours_only_when_streamed_to_a_colour_terminal():
    from rocmci.runs import workloads as wl

    plain = wl.moe_tests(modes=("low-latency",), registry=())[0].argv
    coloured = wl.moe_tests(modes=("low-latency",), registry=(), color=True)[0].argv
    assert "--color=yes" not in plain
    assert coloured[: coloured.index("--color=yes")] == plain[: coloured.index("--color=yes")]
    assert [a for a in coloured if a != "--color=yes"] == list(plain)
