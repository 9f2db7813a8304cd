"""The arch check on realistic edits of vLLM's real docker/Dockerfile.rocm (tests/data/archcheck/edits.yaml).

Each case patches the fixture file in a temporary checkout, adds the scripts/env files it COPYs, and runs the
check for ci_base with the requested list: exactly the errors and warnings listed, each at the line holding
the given text (in the Dockerfile or the COPYed file). A case whose patch no longer applies fails.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from rocmci import arch as archmod
from rocmci.image import check as checkmod
from rocmci.image import vllm_dockerfile as vd

DATA = Path(__file__).resolve().parents[1] / "data" / "archcheck" / "edits.yaml"
CASES = yaml.safe_load(DATA.read_text())["cases"]
DOCKERFILE = "docker/Dockerfile.rocm"


def _flat(edits):
    for e in edits or ():
        if isinstance(e, list):
            yield from _flat(e)
        else:
            yield e


def apply(text: str, edits) -> str:
    for e in _flat(edits):
        if "replace" in e:
            old, new = e["replace"]
            assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in the fixture"
            text = text.replace(old, new)
        else:
            anchor, add = e["after"]
            lines = text.split("\n")
            hits = [i for i, line in enumerate(lines) if anchor in line]
            assert len(hits) == 1, f"{anchor!r} is on {len(hits)} lines of the fixture"
            lines[hits[0] + 1 : hits[0] + 1] = add.rstrip("\n").split("\n") + ([""] if add.endswith("\n") else [])
            text = "\n".join(lines)
    return text


def make_checkout(root: Path, fixtures: Path, case: dict) -> Path:
    (root / "docker").mkdir(parents=True)
    text = apply((fixtures / "docker" / "Dockerfile.rocm").read_text(), case.get("edits"))
    (root / DOCKERFILE).write_text(text)
    for rel, content in (case.get("files") or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


def line_of(root: Path, rel: str, needle: str) -> int:
    lines = (root / (rel or DOCKERFILE)).read_text().split("\n")
    hits = [i + 1 for i, line in enumerate(lines) if needle in line]
    assert len(hits) == 1, f"{needle!r} is on lines {hits} of {rel or DOCKERFILE}"
    return hits[0]


def run(root: Path, case: dict):
    df = vd.load(root)
    vllm = archmod.parse_arch_list(case["vllm"]) if case.get("vllm") else None
    req = checkmod.ArchRequest(archmod.parse_arch_list(case["archs"]), "--arch", vllm_archs=vllm)
    return checkmod.check(df, req)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_edit(case, vllm_fixtures, tmp_path):
    root = make_checkout(tmp_path / "vllm", vllm_fixtures, case)
    findings = run(root, case)
    for severity, key in (("error", "errors"), ("warning", "warnings")):
        want = sorted((r, f or DOCKERFILE, line_of(root, f, t)) for r, f, t in case.get(key) or ())
        got = sorted((x.rule, x.file, x.line) for x in findings if x.severity == severity)
        assert got == want, "\n".join(x.text() for x in findings) or "no findings"


def test_every_class_is_covered():
    classes = {c["class"] for c in CASES}
    assert classes == {"missed", "false-alarm", "engine", "unfollowed"}
    assert sum(c["class"] == "missed" for c in CASES) >= 15
    assert sum(c["class"] == "false-alarm" for c in CASES) >= 8
    # a missed case must be refused (an error), a false alarm must pass (no error)
    for c in CASES:
        if c["class"] == "missed":
            assert c.get("errors"), c["name"]
        if c["class"] in ("false-alarm", "unfollowed"):
            assert not c.get("errors"), c["name"]


def test_deepep_effective_matches_setup_py(vllm_fixtures):
    """The filter rocmci models is the one in DeepEP's setup.py (fixture): run that branch on a few lists."""
    from rocmci.image.dockerflow import deepep_effective

    src = (vllm_fixtures.parent / "deepep" / "setup.py").read_text()
    start = src.index('        arch_env = os.getenv("PYTORCH_ROCM_ARCH", "").strip()')
    end = src.index('    elif variant == "cuda":')
    body = "\n".join(line[8:] for line in src[start:end].split("\n"))
    import os
    import textwrap

    for text in ("", "gfx942;gfx950", "gfx950", "gfx90a;gfx942", "gfx942,gfx950", "gfx90a", "GFX942"):
        env = dict(os.environ)
        os.environ["PYTORCH_ROCM_ARCH"] = text
        try:
            exec(compile(textwrap.dedent("allowed_arch = {'gfx942', 'gfx950'}\n" + body), "setup.py", "exec"),
                 {"os": os, "print": lambda *a: None})  # fmt: skip
            theirs = tuple(os.environ["PYTORCH_ROCM_ARCH"].split(";"))
        except OSError:
            theirs = None
        finally:
            os.environ.clear()
            os.environ.update(env)
        assert deepep_effective(text) == theirs, text


def test_large_dockerfile_is_linear(vllm_fixtures, tmp_path):
    """100k lines (the real file plus many stages of ENV/RUN/ARG) are checked right, and with no work that grows
    with the square of the file: that would take minutes here. The bound is loose on purpose (the suite runs on
    loaded machines); the speed itself is for benchmarks, not tests."""
    real = (vllm_fixtures / "docker" / "Dockerfile.rocm").read_text()
    filler = []
    for i in range(12_500):
        filler += [
            f"FROM base AS filler{i}",
            f"ARG A{i}=x",
            f"ENV B{i}=${{A{i}}}",
            f"RUN echo {i} && true",
            f"RUN export C{i}=1 && echo $C{i} > /tmp/c{i}",
            "COPY setup.py /tmp/",
            f"WORKDIR /w{i}",
            "",
        ]
    text = real.replace("FROM base AS build_rocshmem", "\n".join(filler) + "\nFROM base AS build_rocshmem")
    assert text.count("\n") >= 100_000
    (tmp_path / "docker").mkdir()
    (tmp_path / DOCKERFILE).write_text(text)
    df = vd.load(tmp_path)
    req = checkmod.ArchRequest(("gfx942", "gfx950"), "--arch")
    t = time.perf_counter()
    findings = checkmod.check(df, req)
    took = time.perf_counter() - t
    assert not [f for f in findings if f.severity == "error"]
    assert took < 20.0, took  # 0.37 s on an idle 2-CPU box


def test_classic_builder_ends_args_buildkit_keeps_them(vllm_fixtures, tmp_path):
    """build_deepep (FROM build_rocshmem) sees DEEPEP_ROCM_ARCH under BuildKit only; ENV is kept by both."""
    from rocmci.image import dockerflow

    case = next(c for c in CASES if c["name"] == "arg-kept-through-from-under-buildkit")
    df = vd.load(make_checkout(tmp_path / "vllm", vllm_fixtures, case))
    args = {"DEEPEP_ROCM_ARCH": "gfx950"}
    kit = {c.kind: c.value.text for c in dockerflow.follow(df, "ci_base", args).calls}
    classic = {c.kind: c.value.text for c in dockerflow.follow(df, "ci_base", args, buildkit=False).calls}
    assert kit == {"rocshmem": "gfx950", "deepep": "gfx950"}
    assert classic == {"rocshmem": "gfx950", "deepep": ""}
