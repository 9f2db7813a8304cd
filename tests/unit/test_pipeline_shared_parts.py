"""The parts every generated step repeats (the pod patch, the retry rules) are shared objects, for speed
(README "Performance"): writing and validating a pipeline must give what the same pipeline unshared gives."""

from __future__ import annotations

import json

from rocmci.pipeline import bootstrap, emit, generate, inventory, rules, service, source, validate
from tests.conftest import SHARED_VLLM

INPUTS = bootstrap.TemplateInputs(run_all="1", list_file_diff="run_all", branch="main")


def _generated():
    src = source.load_source(SHARED_VLLM / "test-amd.yaml", "test-amd.yaml")
    return src, generate.generate(src, generate.Options(inputs=INPUTS))


def test_shared_blocks_are_written_as_unshared_ones():
    _, generated = _generated()
    steps = generated.steps
    native = [s for s in steps if "plugins" in s]
    assert len(native) > 100 and len({id(s["plugins"]) for s in native}) < 5  # shared, or this tests nothing
    unshared = json.loads(json.dumps(generated.pipeline))
    assert emit.dump(generated.pipeline) == emit.dump(unshared)


def test_a_secret_in_a_shared_block_is_reported_in_every_step_that_has_it():
    src, generated = _generated()
    native = [s for s in generated.steps if "plugins" in s]
    container = native[0]["plugins"][0]["kubernetes"]["podSpecPatch"]["containers"][0]
    container["image"] = "ghp_" + "A1b2C3d4" * 5  # in the one shared patch: every native step with that GPU count
    sharing = sum(1 for s in native if s["plugins"] is native[0]["plugins"])
    ctx = rules.Context(inventory=inventory.load_inventory(service.packaged_inventory()), archs=("gfx942",))
    report = validate.validate_generated(src, generated, ctx)
    secrets = [f for f in report.findings if f.rule == "secret-in-pipeline"]
    assert sharing > 10 and len(secrets) == sharing
