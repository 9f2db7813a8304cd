from __future__ import annotations

from pathlib import Path

import pytest

from rocmci import workarounds as wa
from rocmci import workloads as wl
from rocmci.errors import InputError, PreflightError, UsageError
from rocmci.gpus import Gpu
from rocmci.pipeline import yamldoc
from tests.conftest import REPO


def registry():
    return wa.load_registry(REPO / "workarounds.yaml")


def test_default_dp_example_is_exactly_upstreams_command():
    w = wl.dp_example()
    assert w.command_line() == (
        "VLLM_LOGGING_LEVEL=DEBUG python3 examples/offline_inference/data_parallel.py "
        "--model=Qwen/Qwen1.5-MoE-A2.7B -tp=1 -dp=2 --max-model-len=2048 --all2all-backend=deepep_high_throughput"
    )
    assert w.gpus == 2
    assert wl.dp_example(tp=2, dp=4).gpus == 8
    with pytest.raises(UsageError):
        wl.dp_example(dp=0)


def test_workaround_applies_only_to_high_throughput():
    ht, ll = wl.moe_tests(modes=wl.parse_modes("both"), registry=registry())
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
    assert [g.index for g in wl.choose_gpus(GPUS, "5,7", 2, 1)[0]] == [5, 7]
    with pytest.raises(PreflightError, match="need 10 GPUs, this host offers 8"):
        wl.choose_gpus(GPUS, None, 2, 5)
    with pytest.raises(PreflightError, match="no GPU 9"):
        wl.choose_gpus(GPUS, "1,9", 2, 1)
    with pytest.raises(UsageError):
        wl.choose_gpus(GPUS, "a,b", 2, 1)


def test_arch_coverage():
    wl.check_archs(GPUS[:2], "gfx942;gfx950", "img")
    with pytest.raises(
        PreflightError, match=r"GPU 0 is gfx90a \(MI210/MI250/MI250X\) but image img is built for gfx942"
    ):
        wl.check_archs([Gpu(0, 1, "gfx90a", 128)], "gfx942", "img")


def test_stale_when_the_image_carries_the_fix():
    w = registry()[0]
    assert wa.stale_reason(w, None) is None
    assert wa.stale_reason(w, wa.ImageFacts()) is None
    assert "declares ROCm/rocm-systems#6942" in wa.stale_reason(w, wa.ImageFacts(fixes={"ROCm/rocm-systems#6942"}))
    versioned = wa.Workaround(**{**w.__dict__, "rocm_version_at_least": "7.2"})
    assert wa.stale_reason(versioned, wa.ImageFacts(rocm_version="7.1.1-42")) is None
    assert "ROCm 7.2.0 >= 7.2" in wa.stale_reason(versioned, wa.ImageFacts(rocm_version="7.2.0"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workarounds: {}", "a 'workarounds' list"),
        ("workarounds:\n- {id: a, sets: {lower: '0'}}", "'sets' must map environment variable names"),
        ("workarounds:\n- {id: a, colour: red}", "unknown key 'colour'"),
        ("workarounds:\n- {id: a}\n- {id: a}", "unique 'id'"),
        ("workarounds:\n- {id: a, applies_to: {platfrom: rocm}}", "'applies_to' takes"),
    ],
)
def test_bad_registry(text, message):
    with pytest.raises(InputError, match=message):
        wa.from_document(yamldoc.parse(text, "w.yaml"))


def test_registry_file_loads():
    ids = [w.id for w in registry()]
    assert ids == ["rocprofiler-register-teardown", "deepep-test-worker-os-exit"]
    assert Path(REPO / "workarounds.yaml").is_file()
